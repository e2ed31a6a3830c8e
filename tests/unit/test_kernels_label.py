"""Union-find 8-connected labelling and hole filling against scipy.ndimage."""
import numpy as np
import pytest
import scipy.ndimage as ndi

from kernels import DetectorModel, KernelArgumentError, fill_holes, label8, render_frame

S8 = np.ones((3, 3), bool)
SHAPES = [(1, 1), (1, 23), (23, 1), (2, 2), (64, 64), (101, 77)]


@pytest.mark.parametrize("density", [0.0, 0.1, 0.4, 0.6, 1.0])
@pytest.mark.parametrize("shape", SHAPES)
def test_label_random_exact(shape, density):
    rng = np.random.default_rng(int(density * 10) + shape[0])
    mask = rng.random(shape) < density
    got, n = label8(mask)
    ref, n_ref = ndi.label(mask, S8)
    assert n == n_ref
    assert got.dtype == np.int32 and np.array_equal(got, ref)


@pytest.mark.parametrize("pattern", ["checker", "grid", "diagonals", "spiral"])
def test_label_hard_patterns(pattern):
    rr, cc = np.indices((63, 65))
    mask = {
        "checker": (rr + cc) % 2 == 0,           # one component via diagonals
        "grid": (rr % 2 == 0) & (cc % 2 == 0),   # isolated pixels, max label count
        "diagonals": (rr - cc) % 4 == 0,
        "spiral": np.zeros((63, 65), bool),
    }[pattern]
    if pattern == "spiral":  # merges discovered late (U shapes, NE unions)
        for k in range(0, 30, 4):
            mask[k, k:65 - k] = mask[k:63 - k, 64 - k] = mask[62 - k, k:65 - k] = True
            mask[k + 2:63 - k, k] = True
    got, n = label8(mask)
    ref, n_ref = ndi.label(mask, S8)
    assert n == n_ref and np.array_equal(got, ref)


def test_label_synthetic_and_dtypes():
    frame = render_frame(DetectorModel(shape=(128, 128), n_frames=4, frames_per_spot=1), 1)
    mask = frame > 160
    ref, n_ref = ndi.label(mask, S8)
    for m in (mask, mask.astype(np.uint8), mask.astype(np.int32)):
        got, n = label8(m)
        assert n == n_ref and np.array_equal(got, ref)
    out = np.full(mask.shape, -5, np.int32)
    assert label8(mask, out=out)[0] is out


def test_label_errors():
    with pytest.raises(KernelArgumentError, match="dimensions"):
        label8(np.zeros(5, bool))
    with pytest.raises(KernelArgumentError, match="int32"):
        label8(np.zeros((2, 2), bool), out=np.zeros((2, 2), np.int64))


@pytest.mark.parametrize("density", [0.0, 0.3, 0.5, 0.7, 1.0])
@pytest.mark.parametrize("shape", SHAPES)
def test_fill_holes_random(shape, density):
    rng = np.random.default_rng(11)
    mask = rng.random(shape) < density
    assert np.array_equal(fill_holes(mask).astype(bool), ndi.binary_fill_holes(mask))


def test_fill_holes_rings_and_border():
    mask = np.zeros((20, 20), bool)
    mask[2:9, 2:9] = True
    mask[4:7, 4:7] = False      # closed ring: filled
    mask[12:18, 0:5] = True
    mask[14:16, 0:3] = False    # open to the border: not filled
    mask[10, 10:15] = True      # diagonal-only closure leaks (4-connected background)
    got = fill_holes(mask).astype(bool)
    assert np.array_equal(got, ndi.binary_fill_holes(mask))
    assert got[5, 5] and not got[14, 0]
