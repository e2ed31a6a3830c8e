"""A user ROI and the detector's pixel mask in the UDF adapter, against LiberTEM's own run.

The same frames cut as a stream cuts them (receivers, strided partitions, trees of
1 and 3 nodes), with a user ROI and excluded pixels given as LiberTEM's
``CorrectionSet(excluded_pixels=...)``: every buffer must equal
``Context.make_with("inline").run_udf(..., roi=roi, corrections=...)`` (rtol 1e-6).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libertem")

from analyses.loading import load_analysis
from streams.protocol import ScanGeometry
from analyses.errors import AnalysisError
from analyses.udf import UDFError
from tests import udf_cases as uc
from tests.unit.test_analyses_udf_adapter import _run

F = uc.SCAN[0] * uc.SCAN[1]
GEOM = ScanGeometry("s", 1, F, 1, uc.FRAME, "<u2", uc.SCAN)
SPECS = [("libertem.udf.sum:SumUDF", {}), ("libertem.udf.sumsigudf:SumSigUDF", {}),
         ("libertem.udf.masks:ApplyMasksUDF", {"masks": "MASKS"})]


def pixel_mask() -> np.ndarray:
    """A DECTRIS-style uint32 pixel mask: scattered pixels, a corner, a pair of neighbours."""
    m = np.zeros(uc.FRAME, np.uint32)
    for y, x in [(3, 5), (16, 16), (16, 17), (0, 0), (31, 20), (9, 31)]:
        m[y, x] = 1 if (y + x) % 2 else 4      # any nonzero flag excludes
    return m


def user_roi() -> np.ndarray:
    roi = np.zeros(uc.SCAN, bool)
    roi[1:6, 2:7] = True
    roi[7, 0] = True
    return roi


def _specs(tmp_path):
    np.save(tmp_path / "masks.npy", uc.masks())
    return [(s, {k: (str(tmp_path / "masks.npy") if v == "MASKS" else v) for k, v in p.items()})
            for s, p in SPECS]


def _reference(specs, data, roi, mask):
    from libertem.api import Context
    from libertem.corrections import CorrectionSet

    ctx = Context.make_with("inline")
    ds = ctx.load("memory", data=data.reshape(*uc.SCAN, *uc.FRAME), sig_dims=2)
    corr = None if mask is None else CorrectionSet(excluded_pixels=mask > 0)
    res = ctx.run_udf(ds, [uc.make_udf(s, p) for s, p in specs], roi=roi, corrections=corr)
    return [{k: np.asarray(v.data) for k, v in r.items()} for r in res]


_REF: dict = {}     # LiberTEM's results per case, computed once


def _compare(ref, got, what):
    bad = []
    for k, x in ref.items():
        y = np.asarray(got[k].data)
        if x.shape != y.shape or x.dtype != y.dtype:
            bad.append(f"{what}/{k}: {y.shape} {y.dtype}, LiberTEM {x.shape} {x.dtype}")
        elif not np.allclose(x, y, rtol=1e-6, atol=0, equal_nan=True):
            bad.append(f"{what}/{k}: max difference {np.nanmax(np.abs(x - y))}")
    return bad


@pytest.mark.parametrize("case,nodes", [("roi", 2), ("mask-file", 1), ("detector", 3),
                                        ("both", 1), ("both", 3), ("roi-withheld", 2)])
def test_roi_and_excluded_pixels_equal_libertem(tmp_path, nodes, case):
    specs = _specs(tmp_path)
    data = uc.frames(seed=3)
    roi = user_roi() if case in ("roi", "both", "roi-withheld") else None
    mask = pixel_mask() if case in ("mask-file", "detector", "both") else None
    valid = np.ones(F, bool)
    if case == "roi-withheld":
        valid[[0, 11, 12, 30]] = False       # two of them inside the ROI
    lt_roi = roi
    if case == "roi-withheld":
        lt_roi = roi & valid.reshape(uc.SCAN)
    if case not in _REF:
        _REF[case] = _reference(specs, data, lt_roi, mask)
    ref = _REF[case]
    np.save(tmp_path / "roi.npy", user_roi())
    np.save(tmp_path / "mask.npy", pixel_mask())
    corrections = {"mask-file": str(tmp_path / "mask.npy"), "detector": "detector",
                   "both": "detector"}.get(case)
    a = load_analysis("udf:" + ",".join(s for s, _ in specs), [p for _, p in specs],
                      roi=str(tmp_path / "roi.npy") if roi is not None else None,
                      corrections=corrections)
    if corrections == "detector":
        a.use_detector(GEOM.scan, pixel_mask())
    a.prepare(GEOM)
    total = _run(a, data, valid, nodes)
    got = a.results(total)
    bad = []
    for label, r, g in zip(a.labels, ref, got):
        bad += _compare(r, g, label)
    assert not bad, bad
    expect = valid if roi is None else valid & roi.reshape(-1)
    assert (total.seen(F) == expect).all()


def test_excluded_pixels_are_patched_not_zeroed():
    """LiberTEM's patch: an excluded pixel becomes the mean of its good neighbours, so
    the sum frame there is the mean of the neighbours' sums (checked with NumPy)."""
    data = uc.frames(seed=1)
    a = load_analysis("udf:libertem.udf.sum:SumUDF", {}, corrections=pixel_mask())
    a.prepare(GEOM)
    got = np.asarray(a.results(_run(a, data, np.ones(F, bool), 2))[0]["intensity"].data)
    excluded = pixel_mask() > 0
    raw = data.sum(axis=0, dtype=np.float64)
    assert np.allclose(got[~excluded], raw[~excluded], rtol=1e-6)
    for y, x in zip(*np.nonzero(excluded)):
        nb = [(yy, xx) for yy in range(y - 1, y + 2) for xx in range(x - 1, x + 2)
              if (yy, xx) != (y, x) and 0 <= yy < uc.FRAME[0] and 0 <= xx < uc.FRAME[1]
              and not excluded[yy, xx]]
        want = np.mean([raw[p] for p in nb])
        assert got[y, x] == pytest.approx(want, rel=1e-6), (y, x)
        assert got[y, x] != 0
    assert got.dtype == np.float32         # corrections make the input float32, as LiberTEM


def test_refusals(tmp_path):
    spec = "udf:libertem.udf.sum:SumUDF"
    np.save(tmp_path / "roi.npy", np.ones((3, 3), bool))
    a = load_analysis(spec, {}, roi=str(tmp_path / "roi.npy"))
    with pytest.raises(UDFError, match=r"roi.npy has shape \(3, 3\), scan s is 8x8"):
        a.prepare(GEOM)
    np.save(tmp_path / "bad.npy", np.full(uc.SCAN, 0.5))
    with pytest.raises(UDFError, match="boolean scan mask"):
        load_analysis(spec, {}, roi=str(tmp_path / "bad.npy"))
    with pytest.raises(UDFError, match="cannot read it"):
        load_analysis(spec, {}, roi=str(tmp_path / "missing.npy"))
    with pytest.raises(UDFError, match="expected none or detector"):
        load_analysis(spec, {}, corrections="dector")
    a = load_analysis(spec, {}, corrections="detector")
    a.use_detector("s", None)
    with pytest.raises(UDFError, match="carried no pixel mask"):
        a.prepare(GEOM)
    a.use_detector("s", np.zeros((4, 4), np.uint32))
    with pytest.raises(UDFError, match=r"shape \(4, 4\), frames of scan s are 32x32"):
        a.prepare(GEOM)
    block = np.zeros(uc.FRAME, np.uint32)
    block[10:13, 10:13] = 1                # the middle pixel has no good neighbour
    a.use_detector("s", block)
    with pytest.raises(UDFError, match="refuses one that has none"):
        a.prepare(GEOM)
    with pytest.raises(AnalysisError, match="apply to udf: analyses"):
        load_analysis(None, {}, corrections="detector")
