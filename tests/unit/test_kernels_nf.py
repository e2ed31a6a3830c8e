"""NF-HEDM reduction: each step and the whole pipeline against a SciPy reference,
and spot recovery on synthetic frames with ground truth."""
import numpy as np
import pytest
import scipy.ndimage as ndi

from kernels import (DetectorModel, KernelArgumentError, NFParams, NFWorkspace, frame_truth,
                     frames, match_points, median_background, plant_spots, reduce_frame,
                     subtract_background)

S8 = np.ones((3, 3), bool)


def ref_reduce(frame, bg, p):
    """The pipeline in NumPy/SciPy: (rows, cols, intensity, labels, n)."""
    sub = np.clip(frame.astype(np.int64) - bg - p.offset, 0, None).astype(np.uint16)
    med = ndi.median_filter(sub, p.median_size, mode="nearest")
    log = ndi.gaussian_laplace(med.astype(float), p.log_sigma, mode="nearest",
                               radius=p.log_radius)
    neg = log < 0
    near_nonneg = ndi.maximum_filter((~neg).astype(np.uint8), 3, mode="constant", cval=1)
    edges = neg & near_nonneg.astype(bool)
    labels, n = ndi.label(ndi.binary_fill_holes(edges), S8)
    r, c = np.nonzero(labels)
    return r, c, med[r, c], labels[r, c], n


def assert_same(spots, ref):
    r, c, v, lab, n = ref
    assert spots.n_labels == n
    for got, want in zip((spots.rows, spots.cols, spots.intensity, spots.labels), (r, c, v, lab)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_median_background_lower_median(n):
    rng = np.random.default_rng(n)
    stack = rng.integers(0, 1000, (n, 13, 17), dtype=np.uint16)
    ref = np.sort(stack, axis=0)[(n - 1) // 2]
    assert np.array_equal(median_background(stack), ref)
    bands = [median_background(np.ascontiguousarray(stack[:, a:b]))
             for a, b in [(0, 4), (4, 5), (5, 13)]]
    assert np.array_equal(np.concatenate(bands), ref)


def test_subtract_background_clips():
    frame = np.array([[0, 5, 65535]], np.uint16)
    bg = np.array([[3, 2, 0]], np.uint16)
    assert subtract_background(frame, bg, 1).tolist() == [[0, 2, 65534]]
    with pytest.raises(KernelArgumentError, match="differs"):
        subtract_background(frame, bg[:, :2], 0)


@pytest.fixture(scope="module")
def nf_data():
    model = DetectorModel(shape=(160, 144), n_frames=16, n_spots=30, seed=5)
    stack = np.stack(list(frames(model)))
    return model, stack, median_background(stack)


@pytest.mark.parametrize("params", [NFParams(offset=30), NFParams(offset=20, median_size=5),
                                    NFParams(offset=30, log_sigma=1.5, log_radius=6),
                                    NFParams(offset=0)])
def test_reduce_frame_matches_reference(nf_data, params):
    _, stack, bg = nf_data
    work = NFWorkspace(bg.shape)
    for i in (0, 7, 15):
        spots = reduce_frame(stack[i], bg, params, work)
        assert_same(spots, ref_reduce(stack[i], bg, params))


def test_reduce_frame_random_input():
    rng = np.random.default_rng(2)
    frame = rng.integers(0, 300, (70, 90), dtype=np.uint16)
    bg = rng.integers(0, 200, (70, 90), dtype=np.uint16)
    for p in (NFParams(offset=10), NFParams(offset=50, median_size=5)):
        assert_same(reduce_frame(frame, bg, p), ref_reduce(frame, bg, p))


@pytest.mark.parametrize("shape", [(1, 1), (1, 40), (40, 1), (3, 3)])
def test_reduce_frame_edge_shapes(shape):
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 200, shape, dtype=np.uint16)
    bg = np.zeros(shape, np.uint16)
    p = NFParams(offset=5)
    assert_same(reduce_frame(frame, bg, p), ref_reduce(frame, bg, p))


def test_reduce_frame_zero_single_and_border():
    bg = np.zeros((40, 40), np.uint16)
    p = NFParams(offset=0)
    assert reduce_frame(bg.copy(), bg, p).n_labels == 0
    single = bg.copy()
    single[20, 20] = 1000  # one pixel: removed by the median filter
    assert reduce_frame(single, bg, p).n_labels == 0
    spot = bg.copy()
    rr, cc = np.indices(spot.shape)
    for r0, c0 in [(0.0, 10.0), (39.0, 39.0), (20.0, 20.0)]:  # edge, corner, centre
        d2 = (rr - r0) ** 2 + (cc - c0) ** 2
        spot += (800 * np.exp(-d2 / (2 * 1.5 ** 2))).astype(np.uint16)
    got = reduce_frame(spot, bg, p)
    assert_same(got, ref_reduce(spot, bg, p))
    assert got.n_labels == 3
    cen = got.centroids()
    tm, _ = match_points(cen, [(0, 10), (39, 39), (20, 20)], 2.0)
    assert tm.all()
    rec = got.to_records(frame=4)
    assert rec.dtype.names == ("frame", "row", "col", "intensity", "label")
    assert (rec["frame"] == 4).all() and len(rec) == len(got.rows)


def test_params_validation():
    with pytest.raises(KernelArgumentError, match="median_size"):
        NFParams(median_size=4)
    with pytest.raises(KernelArgumentError, match="offset"):
        NFParams(offset=-1)
    with pytest.raises(KernelArgumentError, match="sigma"):
        NFParams(log_sigma=-1.0)
    with pytest.raises(KernelArgumentError, match="workspace"):
        reduce_frame(np.zeros((4, 4), np.uint16), np.zeros((4, 4), np.uint16),
                     work=NFWorkspace((5, 4)))


SNR_MIN = 10.0


@pytest.mark.parametrize("seed", [1, 2])
def test_nf_recovers_planted_spots(seed):
    """>= 95% of spots with SNR >= 10 found, <= 5% of detections false.

    Model: 256x256, 24 frames, background 100 +- pattern, noise sd 10, hot
    pixels, Gaussian spots sigma 0.8-1.5 px, peak 30-600 counts (SNR 3-60),
    each on 3 consecutive frames; background = median over the stack.
    A detection is a label's centroid within 2 px of a planted spot.
    """
    model = DetectorModel(shape=(256, 256), n_frames=24, n_spots=45, seed=seed,
                          amplitude=(30.0, 600.0))
    truth = plant_spots(model)
    stack = np.stack(list(frames(model)))
    bg = median_background(stack)
    params = NFParams(offset=30, median_size=3, log_sigma=1.0, log_radius=4)
    n_true = n_found = n_det = n_false = 0
    work = NFWorkspace(bg.shape)
    for i in range(model.n_frames):
        spots = reduce_frame(stack[i], bg, params, work)
        ft = frame_truth(truth, i)
        tm, fm = match_points(spots.centroids(), np.c_[ft["row"], ft["col"]], 2.0)
        strong = ft["snr"] >= SNR_MIN
        n_true += strong.sum()
        n_found += (tm & strong).sum()
        n_det += spots.n_labels
        n_false += (~fm).sum()
    assert n_true >= 60
    assert n_found / n_true >= 0.95, (n_found, n_true)
    assert n_false / max(n_det, 1) <= 0.05, (n_false, n_det)
