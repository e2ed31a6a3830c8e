"""FF-HEDM peak search against a NumPy/SciPy reference, and peak recovery."""
import numpy as np
import pytest
import scipy.ndimage as ndi

from kernels import (PEAK_DTYPE, DetectorModel, FFParams, KernelArgumentError, find_peaks,
                     frame_truth, frames, match_points, plant_spots, render_dark)

S8 = np.ones((3, 3), bool)
INT_FIELDS = ["frame", "peak", "region", "n_in_region", "peak_row", "peak_col", "n_pixels",
              "row_min", "row_max", "col_min", "col_max"]
FLOAT_FIELDS = ["row", "col", "integrated", "max_intensity"]


def ref_peaks(frame, dark, p, frame_index=0):
    """Straightforward implementation of the definitions in kernels/ff.py."""
    sub = np.maximum(frame.astype(np.float32) - dark.astype(np.float32), np.float32(0))
    labels, n = ndi.label(sub > np.float32(p.threshold), S8)
    sizes = np.bincount(labels.ravel(), minlength=n + 1)
    keep = (sizes >= p.min_pixels) & (sizes <= p.max_pixels)
    keep[0] = False
    maxpix = keep[labels] & (sub >= ndi.maximum_filter(sub, size=3, mode="nearest"))
    plab, npk = ndi.label(maxpix, S8)
    out = np.zeros(npk, PEAK_DTYPE)
    locs = []
    for k in range(1, npk + 1):
        rr, cc = np.nonzero(plab == k)
        locs.append((rr[0], cc[0]))
    locs = np.array(locs).reshape(-1, 2)
    region_of = labels[locs[:, 0], locs[:, 1]] if npk else np.zeros(0, int)
    for g in np.unique(region_of):
        ks = np.flatnonzero(region_of == g)
        rr, cc = np.nonzero(labels == g)
        d = (rr[:, None] - locs[ks, 0]) ** 2 + (cc[:, None] - locs[ks, 1]) ** 2
        owner = ks[np.argmin(d, axis=1)]
        for k in ks:
            sel = owner == k
            r, c, v = rr[sel], cc[sel], sub[rr[sel], cc[sel]].astype(np.float64)
            o = out[k]
            o["frame"], o["peak"], o["region"], o["n_in_region"] = frame_index, k + 1, g, len(ks)
            o["peak_row"], o["peak_col"] = locs[k]
            o["integrated"], o["max_intensity"], o["n_pixels"] = v.sum(), v.max(), sel.sum()
            o["row"], o["col"] = (v * r).sum() / v.sum(), (v * c).sum() / v.sum()
            o["row_min"], o["row_max"] = r.min(), r.max()
            o["col_min"], o["col_max"] = c.min(), c.max()
    return out


def assert_same(got, ref):
    assert got.dtype == PEAK_DTYPE and len(got) == len(ref)
    for f in INT_FIELDS:
        assert np.array_equal(got[f], ref[f]), f
    for f in FLOAT_FIELDS:
        np.testing.assert_allclose(got[f], ref[f], rtol=1e-9, err_msg=f)


@pytest.mark.parametrize("params", [FFParams(threshold=50, min_pixels=2),
                                    FFParams(threshold=30, min_pixels=1, max_pixels=30),
                                    FFParams(threshold=0.0, min_pixels=1)])
def test_find_peaks_synthetic_matches_reference(params):
    model = DetectorModel(shape=(128, 160), n_frames=6, frames_per_spot=1, n_spots=30,
                          eta=0.4, seed=9, min_separation=4.0)
    dark = np.mean([render_dark(model, i) for i in range(4)], axis=0)
    for i, fr in enumerate(frames(model, [0, 3])):
        assert_same(find_peaks(fr, dark, params, i), ref_peaks(fr, dark, params, i))


@pytest.mark.parametrize("shape", [(1, 1), (1, 50), (50, 1), (64, 64)])
def test_find_peaks_random_matches_reference(shape):
    rng = np.random.default_rng(shape[1])
    frame = rng.integers(0, 60, shape, dtype=np.uint16)   # ties and plateaus are common
    dark = rng.uniform(0, 10, shape).astype(np.float32)
    for p in (FFParams(threshold=25, min_pixels=1),
              FFParams(threshold=40, min_pixels=3, max_pixels=8)):
        assert_same(find_peaks(frame, dark, p), ref_peaks(frame, dark, p))


def test_find_peaks_edge_cases():
    dark = np.zeros((20, 20), np.float32)
    zero = np.zeros((20, 20), np.uint16)
    assert len(find_peaks(zero, dark, FFParams(threshold=0, min_pixels=1))) == 0
    single = zero.copy()
    single[0, 19] = 100  # one pixel in a corner
    got = find_peaks(single, dark, FFParams(threshold=10, min_pixels=1))
    assert len(got) == 1 and (got["row"][0], got["col"][0], got["integrated"][0]) == (0, 19, 100)
    assert len(find_peaks(single, dark, FFParams(threshold=10, min_pixels=2))) == 0
    two = zero.copy()
    two[5, 2:9] = [60, 80, 60, 40, 60, 90, 60]  # one region, two maxima, split between them
    got = find_peaks(two, dark, FFParams(threshold=10, min_pixels=1))
    assert_same(got, ref_peaks(two, dark, FFParams(threshold=10, min_pixels=1)))
    # col 5 is as far from both maxima: the tie goes to peak 1
    assert got["n_in_region"].tolist() == [2, 2] and got["n_pixels"].tolist() == [4, 3]
    plateau = zero.copy()
    plateau[10:12, 10:13] = 50  # a flat top is one peak
    got = find_peaks(plateau, dark, FFParams(threshold=10, min_pixels=1))
    assert len(got) == 1 and got["n_pixels"][0] == 6 and got["col"][0] == 11.0


def test_ff_params_validation():
    with pytest.raises(KernelArgumentError, match="threshold"):
        FFParams(threshold=-1)
    with pytest.raises(KernelArgumentError, match="min_pixels"):
        FFParams(min_pixels=5, max_pixels=2)
    with pytest.raises(KernelArgumentError, match="dark shape"):
        find_peaks(np.zeros((3, 3), np.uint16), np.zeros((3, 4)))


SNR_MIN = 10.0


@pytest.mark.parametrize("eta", [0.0, 0.3])
def test_ff_recovers_planted_peaks(eta):
    """>= 95% of peaks with SNR >= 10 found, <= 5% of detections false.

    Model: 256x256, 8 frames of 50 spots each (sigma 0.8-1.5 px, peak
    40-600 counts, i.e. SNR 4-60, pseudo-Voigt eta as given), background
    100 +- pattern, noise sd 10, hot pixels; dark = mean of 8 dark frames;
    threshold 50 counts (5 sd), regions of >= 2 pixels.  A detection is a
    peak centroid within 2 px of a planted spot.
    """
    model = DetectorModel(shape=(256, 256), n_frames=8, frames_per_spot=1, n_spots=400,
                          amplitude=(40.0, 600.0), eta=eta, seed=21)
    truth = plant_spots(model)
    dark = np.mean([render_dark(model, i) for i in range(8)], axis=0)
    params = FFParams(threshold=50, min_pixels=2)
    n_true = n_found = n_det = n_false = 0
    for i, fr in enumerate(frames(model)):
        peaks = find_peaks(fr, dark, params, i)
        ft = frame_truth(truth, i)
        tm, fm = match_points(np.c_[peaks["row"], peaks["col"]], np.c_[ft["row"], ft["col"]], 2.0)
        strong = ft["snr"] >= SNR_MIN
        n_true += strong.sum()
        n_found += (tm & strong).sum()
        n_det += len(peaks)
        n_false += (~fm).sum()
    assert n_true >= 150
    assert n_found / n_true >= 0.95, (n_found, n_true)
    assert n_false / max(n_det, 1) <= 0.05, (n_false, n_det)
