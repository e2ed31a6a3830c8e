"""4D-STEM virtual detector and electron counting against NumPy/SciPy."""
import numpy as np
import pytest
import scipy.ndimage as ndi

from kernels import KernelArgumentError, count_electrons, ring_mask, virtual_detector

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
    with pytest.raises(KernelArgumentError, match="uint16 or float32"):
        virtual_detector(np.zeros((2, 4, 4), np.int64), np.zeros((1, 4, 4), np.float32))


def ref_count(frame, dark, bg, xray):
    v = frame.astype(np.float32) - dark.astype(np.float32)
    nb = ndi.maximum_filter(v, footprint=RING8, mode="constant", cval=-np.inf)
    return ((v > bg) & (v < xray) & (v > nb)).astype(np.uint8)


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
