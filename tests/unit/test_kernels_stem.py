"""4D-STEM virtual detector and electron counting against NumPy/SciPy."""
import numpy as np
import pytest
import scipy.ndimage as ndi

from kernels import (FRAME_DTYPES, KernelArgumentError, circular_mask, count_electrons,
                     ring_mask, virtual_detector)

RING8 = np.ones((3, 3), bool)
RING8[1, 1] = False


def test_ring_mask_geometry():
    m = ring_mask((9, 9), (4, 4), 2, 3.5)
    d = np.hypot(*(np.indices((9, 9)) - 4))
    assert np.array_equal(m.astype(bool), (d >= 2) & (d < 3.5))
    assert ring_mask((9, 9), (4, 4), 0, 1)[4, 4] == 1
    with pytest.raises(KernelArgumentError):
        ring_mask((9, 9), (4, 4), 3, 2)


@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
@pytest.mark.parametrize("shape", [(1, 1), (1, 12), (24, 20)])
def test_virtual_detector_matches_tensordot(shape, dtype):
    rng = np.random.default_rng(0)
    fr = rng.integers(0, 4000, (7, *shape)).astype(dtype)
    center = (shape[0] / 2, shape[1] / 2)
    masks = np.stack([ring_mask(shape, center, 0, 3), ring_mask(shape, center, 3, 9),
                      rng.random(shape).astype(np.float32), np.zeros(shape, np.float32)])
    ref = np.tensordot(fr.astype(np.float64), masks.astype(np.float64), ((1, 2), (1, 2)))
    got = virtual_detector(fr, masks)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert (got[:, 3] == 0).all()


def test_virtual_detector_errors():
    with pytest.raises(KernelArgumentError, match="differs"):
        virtual_detector(np.zeros((2, 4, 4), np.uint16), np.zeros((1, 4, 5), np.float32))
    # 64-bit integers are not exact in float64 above 2**53: refused, saying why
    with pytest.raises(KernelArgumentError, match="int64.*not exact in float64"):
        virtual_detector(np.zeros((2, 4, 4), np.int64), np.zeros((1, 4, 4), np.float32))
    with pytest.raises(KernelArgumentError, match="complex64"):
        virtual_detector(np.zeros((2, 4, 4), np.complex64), np.zeros((1, 4, 4), np.float32))


def _frames_of(dtype, shape=(7, 12, 10), seed=0):
    """Random frames spanning the range of ``dtype`` (exact integers, or real floats)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "ui":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, endpoint=True,
                            dtype=dt.newbyteorder("=")).astype(dt)
    return (rng.normal(0, 1, shape) * 10.0 ** rng.integers(-3, 6, shape)).astype(dt)


@pytest.mark.parametrize("dtype", [d.name for d in FRAME_DTYPES] + [">u4", ">f8"])
def test_virtual_detector_every_dtype_from_the_original_values(dtype):
    """Every supported dtype (big-endian too): float64 from the values, no narrowing."""
    fr = _frames_of(dtype)
    masks = np.stack([circular_mask((12, 10), 4.5, 5.0, 3), circular_mask((12, 10), 4, 6, 6, 2),
                      np.random.default_rng(1).random((12, 10))])
    ref = np.einsum("nij,mij->nm", fr.astype(np.float64), masks.astype(np.float64))
    np.testing.assert_allclose(virtual_detector(fr, masks), ref, rtol=1e-13, atol=0)


def test_circular_mask_is_libertems():
    masks = pytest.importorskip("libertem.masks")
    for shape in [(9, 9), (16, 12), (12, 16)]:
        for cx, cy in [(4, 4), (3.5, 5), (0, 11), (7.25, 2.5)]:
            for r in [0.5, 1, 2, 3, 4.5, 6]:
                ref = masks.circular(cx, cy, shape[1], shape[0], r)
                assert np.array_equal(circular_mask(shape, cx, cy, r).astype(bool), ref)
                ref = masks.ring(cx, cy, shape[1], shape[0], r + 2, r)
                assert np.array_equal(circular_mask(shape, cx, cy, r + 2, r).astype(bool), ref)
    # r <= R: the pixel at exactly R is in; (cx, cy) is (column, row)
    m = circular_mask((9, 9), 2, 6, 2)
    assert m[6, 4] == 1 and m[6, 5] == 0 and m[4, 2] == 1 and m[2, 6] == 0
    with pytest.raises(KernelArgumentError):
        circular_mask((9, 9), 4, 4, 2, 3)


def ref_count(frame, dark, bg, xray, gain=None, blank=False):
    """NumPy/SciPy reference: float64 values; stempy's rule blanks before the maximum test."""
    v = frame.astype(np.float64) - np.asarray(dark, np.float64)
    if gain is not None:
        v = v / gain
    inside = (v > bg) & (v < xray)
    w = np.where(inside, v, 0.0) if blank else v
    nb = ndi.maximum_filter(w, footprint=RING8, mode="constant", cval=-np.inf)
    return (inside & (w > nb)).astype(np.uint8)


@pytest.mark.parametrize("shape", [(1, 1), (1, 30), (30, 1), (64, 48)])
def test_count_electrons_random(shape):
    rng = np.random.default_rng(4)
    dark = rng.uniform(0, 20, shape).astype(np.float32)
    frame = rng.integers(0, 200, shape, dtype=np.uint16)
    frame[rng.random(shape) < 0.02] = 3000  # X-ray hits
    ev, n = count_electrons(frame, dark, 40.0, 1000.0)
    ref = ref_count(frame, dark, 40.0, 1000.0)
    assert np.array_equal(ev, ref) and n == ref.sum()


def test_count_electrons_planted_events():
    rng = np.random.default_rng(8)
    shape = (64, 64)
    dark = rng.normal(50, 2, shape).astype(np.float32)
    frame = np.rint(dark + rng.normal(0, 2, shape)).astype(np.uint16)
    pos = [(0, 0), (0, 33), (63, 63), (20, 20), (40, 10), (10, 50)]  # incl. border
    for r, c in pos:
        frame[r, c] += 300
    frame[30, 30] += 5000  # an X-ray: not an electron
    ev, n = count_electrons(frame, dark, 100.0, 2000.0)
    assert n == len(pos) and sorted(zip(*np.nonzero(ev))) == sorted(pos)
    assert count_electrons(np.zeros(shape, np.uint16), np.zeros(shape), 0.0, 10.0)[1] == 0
    with pytest.raises(KernelArgumentError, match="xray"):
        count_electrons(frame, dark, 10.0, 5.0)


@pytest.mark.parametrize("dtype", [d.name for d in FRAME_DTYPES])
@pytest.mark.parametrize("rule", ["raw", "stempy"])
def test_count_electrons_every_dtype_on_its_own_values(dtype, rule):
    """Counting on the original type: a 32-bit frame with events far above 65535 and
    float frames with fractional values are counted exactly (no cast to uint16)."""
    rng = np.random.default_rng(5)
    shape = (40, 36)
    dt = np.dtype(dtype)
    base = 100 if dt.itemsize > 1 or dt.kind == "f" else 10
    frame = rng.normal(base, 2, shape)
    pos = rng.choice(shape[0] * shape[1], 30, replace=False)
    big = 70_000 if dt.itemsize >= 4 else (2_000 if dt.itemsize == 2 else 60)
    frame.flat[pos] += rng.uniform(0.5, 1, 30) * big
    if dt.kind in "ui":
        frame = np.clip(np.rint(frame), np.iinfo(dt).min, np.iinfo(dt).max)
    frame = frame.astype(dt)
    dark = np.full(shape, float(base), np.float64)
    bg, xr = 20.0, big * 2.0
    # integers with stempy's rule are truncated after the dark: use an integer dark there
    ev, n = count_electrons(frame, dark, bg, xr, rule=rule)
    ref = ref_count(frame, dark, bg, xr, blank=rule == "stempy")
    assert np.array_equal(ev, ref) and n == ref.sum() and n >= 20


def test_count_electrons_dark_gain_and_the_two_rules_next_to_an_xray():
    shape = (16, 16)
    dark = np.full(shape, 10.0)
    gain = np.full(shape, 2.0)
    frame = np.full(shape, 10, np.uint32)
    frame[5, 5] = 10 + 2 * 300          # an electron of 300 after the gain
    frame[5, 6] = 10 + 2 * 90_000       # an X-ray hit beside it
    frame[12, 3] = 10 + 2 * 150         # an isolated electron
    bg, xr = 50.0, 5000.0
    raw, n_raw = count_electrons(frame, dark, bg, xr, gain=gain, rule="raw")
    st, n_st = count_electrons(frame, dark, bg, xr, gain=gain, rule="stempy")
    # ours: the X-ray neighbour keeps (5, 5) from being an event; stempy's blanks it first
    assert n_raw == 1 and raw[12, 3] == 1 and raw[5, 5] == 0
    assert n_st == 2 and st[5, 5] == 1 and st[5, 6] == 0
    for rule in ("raw", "stempy"):
        ref = ref_count(frame, dark, bg, xr, gain=gain, blank=rule == "stempy")
        assert np.array_equal(count_electrons(frame, dark, bg, xr, gain=gain, rule=rule)[0], ref)
    with pytest.raises(KernelArgumentError, match="nonzero"):
        count_electrons(frame, dark, bg, xr, gain=np.zeros(shape))
    with pytest.raises(KernelArgumentError, match="rule"):
        count_electrons(frame, dark, bg, xr, rule="other")
    with pytest.raises(KernelArgumentError, match="not supported"):
        count_electrons(frame.astype(np.uint64), dark, bg, xr)


@pytest.mark.parametrize("rule", ["raw", "stempy"])
def test_count_stack_equals_the_reference_frame_by_frame_and_grows_its_buffer(rule):
    """One call for a stack: every frame's events as the reference's, in order; frames
    holding the most events a frame can (none touching) overflow the first buffer."""
    from kernels import count_stack

    rng = np.random.default_rng(9)
    shape = (9, 11)
    dark = rng.uniform(0, 20, shape)
    busy = np.zeros(shape, np.uint16)
    busy[::2, ::2] = 500                         # ceil(9/2) * ceil(11/2) = 30 events
    frames = np.stack([busy] * 6 + [rng.integers(0, 600, shape).astype(np.uint16)
                                    for _ in range(5)] + [busy] * 3)
    counts, flat = count_stack(frames, dark, 40.0, 1000.0, rule=rule)
    starts = np.concatenate(([0], np.cumsum(counts)))
    assert counts[0] == 30 and counts.sum() == len(flat) > 9 * 30
    for i, fr in enumerate(frames):
        ref = np.flatnonzero(ref_count(fr, dark, 40.0, 1000.0, blank=rule == "stempy"))
        assert np.array_equal(flat[starts[i]:starts[i + 1]], ref), i
    with pytest.raises(KernelArgumentError, match="empty"):
        count_stack(frames[:0], dark, 40.0, 1000.0)


@pytest.mark.parametrize("dtype", [d.name for d in FRAME_DTYPES])
def test_frame_sums_are_numpys_float64_sums(dtype):
    """Integer frames summed exactly (int64), float frames as NumPy sums them: equal bits."""
    from kernels import frame_sums

    fr = _frames_of(dtype, (5, 13, 7))
    ref = fr.reshape(5, -1).sum(axis=1, dtype=np.float64)
    assert np.array_equal(frame_sums(fr), ref)
