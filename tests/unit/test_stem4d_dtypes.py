"""Frames keep their values: Stem4D on every supported dtype against LiberTEM.

LiberTEM (``ApplyMasksUDF`` with its own ``masks.circular``/``masks.ring`` and
an all-ones mask for the per-frame sum, float64 masks) on the same frames in
memory is the reference for the sum and the virtual images; the issue's cases
(a uint32 frame with a 70,000-count pixel, float32 gain-corrected frames) are
checked against the exact sums too.
"""
from __future__ import annotations

import numpy as np
import pytest

from streams.protocol import ScanGeometry

pytest.importorskip("numba")
lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is the reference here")

SCAN, SHAPE = (3, 4), (24, 20)
CX, CY = 9.5, 11.0
MASKS = [{"name": "bf", "r": 4}, {"name": "adf", "ri": 4, "ro": 9},
         {"name": "off", "r": 3, "cx": 4, "cy": 6}, {"name": "edge", "ri": 9, "ro": 30}]


@pytest.fixture(scope="module")
def ctx():
    return lt_api.Context.make_with("inline")


def _libertem(ctx, frames):
    """Per-frame sum and the four virtual images, by LiberTEM."""
    import libertem.masks as lm
    from libertem.udf.masks import ApplyMasksUDF

    rows, cols = SHAPE
    factories = [lambda: np.ones(SHAPE),
                 lambda: lm.circular(CX, CY, cols, rows, 4),
                 lambda: lm.ring(CX, CY, cols, rows, 9, 4),
                 lambda: lm.circular(4, 6, cols, rows, 3),
                 lambda: lm.ring(CX, CY, cols, rows, 30, 9)]
    ds = ctx.load("memory", data=frames.reshape(*SCAN, *SHAPE), sig_dims=2)
    res = ctx.run_udf(dataset=ds, udf=ApplyMasksUDF(mask_factories=factories,
                                                    mask_dtype=np.float64))
    return np.asarray(res["intensity"].data, np.float64).reshape(-1, len(factories))


def _frames(dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = SCAN[0] * SCAN[1]
    if dt.kind == "f":          # gain-corrected: fractional values
        return (rng.poisson(20, (n, *SHAPE)) * rng.uniform(0.7, 1.3, SHAPE)).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 10**6), (n, *SHAPE),
                        endpoint=True).astype(dt)


def _run(frames, **params):
    from stem4d.analysis import Stem4D

    a = Stem4D(cx=CX, cy=CY, masks=MASKS, **params)
    g = ScanGeometry("t", 1, len(frames), 1, SHAPE, frames.dtype.str, SCAN)
    a.prepare(g)
    p = a.process_partition(frames, np.arange(len(frames)), np.ones(len(frames), bool))
    return a, a.images(p, g)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "int8", "int16", "int32",
                                   "float32", "float64", ">u2", ">f4"])
def test_sum_and_virtual_images_equal_libertems_for_every_dtype(ctx, dtype):
    frames = _frames(dtype)
    _, img = _run(frames, mode="virtual")
    ref = _libertem(ctx, frames)
    got = np.stack([img["sum_image"].ravel()] +
                   [img[f"virtual/{m['name']}"].ravel() for m in MASKS], axis=1)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
    assert "electron_counts" not in img       # mode="virtual" does not count


def test_the_issues_cases_uint32_70000_counts_and_float32_gain_corrected(ctx):
    # uint32, one pixel of 70,000 counts: the sum keeps it (a cast to uint16 lost 65,536)
    f = np.random.default_rng(1).integers(0, 40, (SCAN[0] * SCAN[1], *SHAPE)).astype(np.uint32)
    f[0, 11, 9] = 70_000
    a, img = _run(f, background_threshold=50.0, xray_threshold=100_000.0, dark=0.0)
    exact = f.reshape(len(f), -1).sum(axis=1, dtype=np.int64)
    assert np.array_equal(img["sum_image"].ravel(), exact.astype(np.float64))
    assert img["sum_image"].ravel()[0] > 70_000
    np.testing.assert_allclose(img["virtual/bf"].ravel(), _libertem(ctx, f)[:, 1], rtol=1e-12)
    assert img["electron_counts"].ravel()[0] >= 1        # counted on its own value
    # float32 gain-corrected: fractional values are summed, not truncated
    g = (f.astype(np.float32) * np.float32(1.0371)).astype(np.float32)
    _, img = _run(g, mode="virtual")
    exact = g.astype(np.float64).reshape(len(g), -1).sum(axis=1)
    np.testing.assert_allclose(img["sum_image"].ravel(), exact, rtol=1e-15)
    assert not np.array_equal(img["sum_image"].ravel(), np.trunc(g).astype(np.float64)
                              .reshape(len(g), -1).sum(axis=1))


@pytest.mark.parametrize("dtype", ["<i8", "<u8", "<f2", "<c8"])
def test_a_dtype_that_cannot_be_kept_is_refused_naming_it(dtype):
    from stem4d.analysis import Stem4D
    from stem4d.errors import Stem4DError

    a = Stem4D()
    if dtype in ("<i8", "<u8"):     # the stream protocol's dtypes; the others never arrive
        with pytest.raises(Stem4DError, match=np.dtype(dtype).name):
            a.prepare(ScanGeometry("t", 1, 4, 1, (8, 8), dtype, (2, 2)))
    with pytest.raises(Stem4DError, match="not supported"):
        a.process_partition(np.zeros((2, 8, 8), dtype), np.arange(2), np.ones(2, bool))
