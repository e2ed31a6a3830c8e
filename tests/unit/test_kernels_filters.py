"""Median filter, LoG and zero crossings against scipy.ndimage (mode='nearest')."""
import numpy as np
import pytest
import scipy.ndimage as ndi

from kernels import (DetectorModel, KernelArgumentError, log_filter, median_filter,
                     render_frame, zero_crossings)
from kernels.sortnet import batcher_pairs, median_network

SHAPES = [(1, 1), (1, 17), (17, 1), (2, 3), (37, 53), (128, 96)]


@pytest.mark.parametrize("n", [9, 25])
def test_median_network_zero_one_principle(n):
    # 0-1 principle, exhaustively over all 2**n 0-1 inputs, as packed bit-planes:
    # bit x of wire k's plane is bit k of input x.  The low 16 input bits vary
    # inside a chunk of 2**16 inputs, the rest are constant per chunk.  The
    # middle wire must end as 1 exactly when at least n - (n-1)//2 inputs are 1.
    low = min(n, 16)
    x = np.arange(2 ** low, dtype=np.uint32)
    popcount = np.zeros(2 ** low, np.int64)
    planes = []
    for k in range(low):
        bit = ((x >> k) & 1).astype(bool)
        popcount += bit
        planes.append(np.packbits(bit, bitorder="little").view(np.uint64))
    ones = np.full_like(planes[0], np.iinfo(np.uint64).max)
    zeros = np.zeros_like(planes[0])
    lo, hi = median_network(n)
    mid = (n - 1) // 2
    for top in range(2 ** (n - low)):
        wires = planes + [ones if (top >> k) & 1 else zeros for k in range(n - low)]
        for i, j in zip(lo, hi):
            wires[i], wires[j] = wires[i] & wires[j], wires[i] | wires[j]
        expect = popcount + bin(top).count("1") >= n - mid
        assert np.array_equal(wires[mid], np.packbits(expect, bitorder="little").view(np.uint64))


def test_batcher_sorts():
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 9, 25):
        for _ in range(20):
            a = list(rng.integers(0, 10, n))
            for i, j in batcher_pairs(n):
                a[i], a[j] = min(a[i], a[j]), max(a[i], a[j])
            assert a == sorted(a)


@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("shape", SHAPES)
def test_median_random_exact(shape, size):
    rng = np.random.default_rng(size * 1000 + shape[0])
    img = rng.integers(0, 65536, shape, dtype=np.uint16)
    assert np.array_equal(median_filter(img, size), ndi.median_filter(img, size, mode="nearest"))


@pytest.mark.parametrize("size", [3, 5])
def test_median_synthetic_and_edge_cases(size):
    frame = render_frame(DetectorModel(shape=(96, 80), n_frames=4, frames_per_spot=1), 0)
    ref = ndi.median_filter(frame, size, mode="nearest")
    assert np.array_equal(median_filter(frame, size), ref)
    zero = np.zeros((20, 30), np.uint16)
    assert not median_filter(zero, size).any()
    single = zero.copy()
    single[0, 0] = 65535  # a lone pixel in the corner vanishes
    ref = ndi.median_filter(single, size, mode="nearest")
    assert np.array_equal(median_filter(single, size), ref)
    block = zero.copy()
    block[:size, :size] = 7  # a spot cut by the corner survives in 'nearest' mode
    got = median_filter(block, size)
    assert np.array_equal(got, ndi.median_filter(block, size, mode="nearest"))
    assert got[0, 0] == 7


def test_median_out_and_errors():
    img = np.arange(12, dtype=np.uint16).reshape(3, 4)
    out = np.empty((3, 4), np.uint16)
    assert median_filter(img, 3, out=out) is out
    with pytest.raises(KernelArgumentError, match="median size"):
        median_filter(img, 4)
    with pytest.raises(KernelArgumentError, match="uint16"):
        median_filter(img.astype(np.int32))
    with pytest.raises(KernelArgumentError, match="shape"):
        median_filter(img, 3, out=np.empty((4, 3), np.uint16))


@pytest.mark.parametrize("sigma,radius", [(1.0, 4), (1.7, 5), (0.6, 2)])
@pytest.mark.parametrize("shape", SHAPES)
def test_log_matches_gaussian_laplace(shape, sigma, radius):
    rng = np.random.default_rng(7)
    img = rng.integers(0, 4000, shape, dtype=np.uint16)
    ref = ndi.gaussian_laplace(img.astype(np.float64), sigma, mode="nearest", radius=radius)
    got = log_filter(img, sigma, radius)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(log_filter(img.astype(np.float64), sigma, radius), ref,
                               rtol=1e-12, atol=1e-9)


def test_log_explicit_kernel_and_sign():
    # Independent check: correlate with the explicit 2-D LoG kernel built
    # from the analytic 1-D weights (normalised Gaussian and its 2nd derivative).
    sigma, radius = 1.2, 4
    x = np.arange(-radius, radius + 1, dtype=float)
    g = np.exp(-0.5 * x ** 2 / sigma ** 2)
    g /= g.sum()
    d2 = g * (x ** 2 / sigma ** 4 - 1 / sigma ** 2)
    kern = np.outer(d2, g) + np.outer(g, d2)
    img = np.zeros((31, 31), np.uint16)
    img[15, 15] = 1000
    img[0, 3] = 500  # a spot on the border
    ref = ndi.correlate(img.astype(float), kern, mode="nearest")
    got = log_filter(img, sigma, radius)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    assert got[15, 15] < 0 and got[0, 3] < 0
    assert not log_filter(np.zeros((5, 5), np.uint16), sigma, radius).any()


def test_log_errors():
    img = np.zeros((4, 4), np.uint16)
    with pytest.raises(KernelArgumentError, match="sigma"):
        log_filter(img, 0.0, 3)
    with pytest.raises(KernelArgumentError, match="radius"):
        log_filter(img, 1.0, 0)


def _ref_edges(log):
    neg = log < 0
    nonneg_near = ndi.maximum_filter((~neg).astype(np.uint8), size=3, mode="constant", cval=1)
    return (neg & nonneg_near.astype(bool)).astype(np.uint8)


@pytest.mark.parametrize("shape", SHAPES)
def test_zero_crossings(shape):
    rng = np.random.default_rng(3)
    log = rng.normal(size=shape)
    log[rng.random(shape) < 0.1] = 0.0
    assert np.array_equal(zero_crossings(log), _ref_edges(log))
    assert not zero_crossings(np.zeros(shape)).any()
    assert zero_crossings(-np.ones(shape)).sum() == (
        shape[0] * shape[1] - max(shape[0] - 2, 0) * max(shape[1] - 2, 0))
