"""hedm.ffpeaks: FF peak search as an analysis, on a few frames, against the kernel.

The analysis's partials, merged in any order, give the peaks that
:func:`kernels.ff.find_peaks` gives frame by frame against the mean dark (what
``hedm/ff.py`` writes); its parameters come from the file, a dict or keywords, and
a dark of the wrong shape or an impossible region size is refused.
"""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from kernels import open_frames
    from kernels.synth import DetectorModel

    from hedm.ffpeaks import read_ff_params
    from hedm.synth import make_ff_dataset

    folder = tmp_path_factory.mktemp("ff")
    params = make_ff_dataset(str(folder), DetectorModel(shape=(64, 48), n_frames=5, n_spots=16,
                                                         seed=7, frames_per_spot=1),
                             {"RawStartNr": 0})
    p = read_ff_params(params)
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    reader = open_frames(str(folder / p["InputPattern"]), shape=shape)
    darks = open_frames(str(folder / p["Dark"]), shape=shape)
    dark = np.mean([darks.read(i).astype(np.float64) for i in range(darks.n_frames)], axis=0)
    return {"folder": folder, "params": params, "p": p, "dark": dark,
            "stack": np.stack([reader.read(i) for i in range(reader.n_frames)])}


def test_partials_merged_in_any_order_give_the_kernels_peaks(sweep):
    from kernels.ff import FFParams, find_peaks

    from hedm.ffpeaks import FFPeaks

    a = FFPeaks(sweep["params"], first_frame=10)
    stack = sweep["stack"]
    kp = FFParams(threshold=sweep["p"]["Threshold"], min_pixels=sweep["p"]["MinNrPx"],
                  max_pixels=sweep["p"]["MaxNrPx"])
    dark = sweep["dark"].astype(np.float32)
    want = [find_peaks(f, dark, kp, frame_index=10 + i) for i, f in enumerate(stack)]
    assert sum(len(w) for w in want) > 10          # the comparison compares something
    late = a.process_partition(stack[[4, 2]], np.array([4, 2]), np.ones(2, bool))
    early = a.process_partition(stack[[0, 1, 3]], np.array([0, 1, 3]), np.ones(3, bool))
    for merged in (a.merge(late, early), a.merge(early, late)):
        t = a.tables(merged, 5)
        assert np.array_equal(t["peaks"], np.concatenate(want))
        assert list(t["frames"]["frame"]) == [10, 11, 12, 13, 14]
        assert list(t["frames"]["n_peaks"]) == [len(w) for w in want]
    np.testing.assert_allclose(a.dark(stack.shape[1:])[0], sweep["dark"], rtol=1e-6)
    # frames missing from the partials: the tables hold the frames seen, nothing else
    assert list(a.tables(late, 5)["frames"]["frame"]) == [12, 14]
    assert len(a.tables(a.empty(), 5)["peaks"]) == 0


def test_parameters_from_file_dict_or_keywords_agree(sweep):
    import os

    from hedm.ffpeaks import FFPeaks

    dark = os.path.join(sweep["folder"], sweep["p"]["Dark"])
    from_file = FFPeaks(sweep["params"], threshold=5.0)
    from_dict = FFPeaks(sweep["p"], dark=dark, threshold=5.0)
    assert from_file.p == from_dict.p and from_file.p["Threshold"] == 5.0
    assert os.path.samefile(from_file.dark_path, from_dict.dark_path)
    assert FFPeaks().dark_path is None and not FFPeaks().dark((4, 4))[0].any()


def test_refusals(sweep, tmp_path):
    from hedm.ffpeaks import FFPeaks
    from hedm.params import ParamError
    from hedm.errors import HedmError

    with pytest.raises(ParamError, match="MinNrPx .* must not exceed MaxNrPx"):
        FFPeaks(sweep["p"], min_pixels=50, max_pixels=5)
    with pytest.raises(HedmError, match="dark file .* does not exist"):
        FFPeaks(sweep["params"], dark=str(tmp_path / "missing.ge3"))
    from kernels import write_tiff_series

    small = write_tiff_series(str(tmp_path / "dark_%d.tif"), [np.ones((32, 32), np.uint16)])[0]
    with pytest.raises(HedmError, match=r"dark .* is \(32, 32\), frames are \(64, 48\)"):
        FFPeaks(sweep["params"], dark=small).dark((64, 48))


def test_a_sweep_without_a_peak_is_a_problem_not_an_empty_table(sweep):
    """No peak in any frame received (a threshold above every peak, dark frames): the
    analysis says why, so the file flow exits 1 and a stream's scan is not served."""
    from hedm.ffpeaks import FFPeaks
    from streams.protocol import ScanGeometry

    stack = sweep["stack"]
    g = ScanGeometry("sweep", 1, 5, 1, stack.shape[1:], "<u2", (1, 5))
    a = FFPeaks(sweep["params"])
    found = a.process_partition(stack, np.arange(5), np.ones(5, bool))
    assert a.problem(found, g) == ""
    blind = FFPeaks(sweep["params"], threshold=65535.0)
    none = blind.process_partition(stack[1:3], np.array([1, 2]), np.ones(2, bool))
    why = blind.problem(none, g)
    assert "no peak found in scan sweep" in why and "2 frame(s) received (1..2)" in why
    assert "Threshold (65535.0)" in why
    assert "no frame received" in blind.problem(blind.empty(), g)


def test_im_trans_opt_orients_frames_as_midas_does(tmp_path):
    """MIDAS's ImTransOpt (1 flip y, 2 flip z, 3 transpose, in order) is applied to each raw
    frame before the peak search, as MIDAS's PeaksFitting does; a bad code is refused."""
    from hedm.ffpeaks import FFPeaks, read_ff_params
    from hedm.params import ParamError

    frame = np.full((1, 12, 12), 10, np.uint16)
    frame[0, 2:5, 7:10] = 500                       # a blob at row 3, column 8
    where = {}
    for codes in ((), (1,), (2,), (1, 2), (3,)):
        a = FFPeaks({"ImTransOpt": codes, "Threshold": 100.0, "MinNrPx": 2})
        pk = a.process_partition(frame, np.array([0]), np.array([True])).chunks[0].ragged[
            "peaks"][1]
        assert len(pk) == 1
        where[codes] = (round(float(pk["row"][0]), 6), round(float(pk["col"][0]), 6))
    assert where[()] == (3.0, 8.0) and where[(1,)] == (3.0, 3.0) and where[(2,)] == (8.0, 8.0)
    assert where[(1, 2)] == (8.0, 3.0) and where[(3,)] == (8.0, 3.0)
    path = tmp_path / "bad.params"
    path.write_text("Dark d.ge3\nNrPixelsY 12\nNrPixelsZ 12\nImTransOpt 4\n")
    with pytest.raises(ParamError, match="ImTransOpt 4 is not one of"):
        read_ff_params(str(path))
