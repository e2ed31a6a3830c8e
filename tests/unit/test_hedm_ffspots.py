"""hedm.ffspots: peaks of consecutive frames merged into spots, across the end and the start
of a full rotation, with omega, eta, 2theta and ring from the geometry."""
from __future__ import annotations

import numpy as np


def test_chains_of_consecutive_frames_are_one_spot():
    from hedm.ffspots import merge_peaks

    frame = np.array([0, 1, 2, 1, 5, 6, 9])
    y = np.array([10.0, 10.5, 11.0, 40.0, 10.0, 30.0, 10.0])
    z = np.array([20.0, 20.2, 20.1, 40.0, 20.0, 30.0, 20.0])
    lab = merge_peaks(frame, y, z, 10, 2.0, wrap=False)
    assert lab[0] == lab[1] == lab[2]                      # frames 0-1-2, moving < 2 px
    assert len(set(lab.tolist())) == 5                     # 40,40 alone; 5 and 6 far apart
    assert lab[4] != lab[0] and lab[6] != lab[0]           # frame 5 and 9: not consecutive
    # a full rotation: frame 9 is followed by frame 0
    wrapped = merge_peaks(frame, y, z, 10, 2.0, wrap=True)
    assert wrapped[6] == wrapped[0] and len(set(wrapped.tolist())) == 4


def test_nearest_mutual_neighbours_only():
    from hedm.ffspots import merge_peaks

    # two peaks on frame 1 near one on frame 0: the nearer continues it, the other is new
    lab = merge_peaks(np.array([0, 1, 1]), np.array([0.0, 0.5, 1.6]),
                      np.array([0.0, 0.0, 0.0]), 3, 2.0, wrap=False)
    assert lab[0] == lab[1] != lab[2]


def test_spot_across_the_end_and_start_of_a_rotation(tmp_path):
    from hedm.ffparams import GRAINS_SCHEMA, ff_arrays, grains_params, ring_table
    from hedm.ffspots import spots_from_peaks
    from hedm.params import parse_params
    from kernels.ff import PEAK_DTYPE

    text = ("LatticeConstant 4.08 4.08 4.08 90 90 90\nWavelength 0.172979\nLsd 120000\n"
            "BC 96 96\npx 200\nOmegaStart 180\nOmegaStep -1\nWidth 400\n")
    p = grains_params(parse_params(text, GRAINS_SCHEMA))
    arrays = ff_arrays(p, 360, (192, 192))
    rings = ring_table(p, (192, 192))
    r1 = rings[0, 2] / p["px"]                   # {111} radius in px
    pk = np.zeros(4, PEAK_DTYPE)
    # one spot on frames 359 and 0 (MIDAS's frame omegas, the stamps OmegaStart + k
    # OmegaStep: -179 and 180), equal intensities: omega -179.5
    pk["frame"] = [359, 0, 100, 101]
    pk["col"] = [96.0, 96.0, 96 + r1, 96 + r1]
    pk["row"] = [96 + r1, 96 + r1, 96.0, 96.0]
    pk["integrated"] = [1.0, 1.0, 1.0, 3.0]
    s = spots_from_peaks(pk, 0, 360, p, arrays, rings)
    assert len(s) == 2
    a, b = s[np.argsort(s["intensity"])]
    assert abs(a["omega"] + 179.5) < 1e-9 and a["n_frames"] == 2
    # weighted 1:3 toward 101 (a circular mean: equal to the linear one within 1e-5 deg)
    assert abs(b["omega"] - (180 - 100 - 0.75)) < 1e-5
    assert a["ring"] == b["ring"] == 1
    # +z: eta 0; larger columns are lab -y in MIDAS's FF (yDet = ybc - Y / px): eta +90
    assert abs(a["eta"]) < 1e-9 and abs(b["eta"] - 90) < 1e-9
    np.testing.assert_allclose([a["two_theta"], b["two_theta"]], rings[0, 1], rtol=1e-9)
    # not a full rotation (360 frames of 0.5 deg): frame 359 is not followed by frame 0
    half = dict(p, OmegaStep=-0.5)
    assert len(spots_from_peaks(pk[:2], 0, 360, half, arrays, rings)) == 2


def test_a_chain_is_cut_at_a_valley_of_its_intensity():
    from hedm.ffspots import split_at_valleys

    # one rocking curve: never cut, however long or flat-topped
    assert not split_at_valleys([1, 5, 9, 4, 1]).any()
    assert not split_at_valleys([5, 4, 4.5, 3]).any()           # a dip of 10%: noise
    # two curves: cut beside the valley, the valley with its brighter neighbour
    np.testing.assert_array_equal(split_at_valleys([1, 5, 9, 2, 8, 3]),
                                  [False, False, False, True, False])
    np.testing.assert_array_equal(split_at_valleys([1, 3, 1, 9, 8]),
                                  [False, True, False, False])
    # three curves, two cuts
    assert split_at_valleys([1, 9, 3, 1, 9, 4, 1, 7, 2]).sum() == 2


def test_merge_with_intensities_separates_two_spots_on_the_same_pixels():
    from hedm.ffspots import merge_peaks

    # spots of two grains 0.8 px apart, frames 10-12 and 13-15: one chain by position
    frame = np.arange(10, 16)
    y = np.array([50.0, 50.0, 50.0, 50.8, 50.8, 50.8])
    z = np.full(6, 30.0)
    inten = np.array([100.0, 900.0, 200.0, 250.0, 800.0, 90.0])
    assert len(set(merge_peaks(frame, y, z, 360, 2.5, False).tolist())) == 1
    lab = merge_peaks(frame, y, z, 360, 2.5, False, inten)
    assert lab[0] == lab[1] == lab[2] != lab[3] == lab[4] == lab[5]
