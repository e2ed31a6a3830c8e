"""LiberTEM UDFs through :mod:`analyses.udf`, against LiberTEM's own inline run.

The frames of one 8x8 scan (32x32 uint16) are cut as a stream cuts them (N
receivers, strided frames, partitions of K) and merged in per-node trees then
across nodes, as the receiving job does with 1, 2 and 4 nodes; with frames
withheld the valid mask is LiberTEM's ROI. Results must equal
``Context.make_with("inline").run_udf`` within float tolerance, dtype kept.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("libertem")

from analyses.loading import load_analysis
from streams.protocol import ScanGeometry
from analyses.udf import UDFError
from tests import udf_cases as uc

F = uc.SCAN[0] * uc.SCAN[1]
GEOM = ScanGeometry("s", 1, F, 1, uc.FRAME, "<u2", uc.SCAN)


def _specs(tmp_path):
    np.save(tmp_path / "masks.npy", uc.masks())
    return [(s, {k: (str(tmp_path / "masks.npy") if v == "MASKS" else v) for k, v in p.items()})
            for s, p in uc.SPECS]


def _run(analysis, data, valid, nodes, k=5):
    """Process like ``nodes`` receivers (frame f at receiver f % nodes), merge per node
    from the last partition backwards, then across nodes in a pairwise tree."""
    per_node = []
    for r in range(nodes):
        idx = np.arange(r, F, nodes)
        acc = analysis.empty()
        parts = [analysis.process_partition(data[idx[s:s + k]], idx[s:s + k], valid[idx[s:s + k]])
                 for s in range(0, len(idx), k)]
        for p in reversed(parts):
            acc = analysis.merge(p, acc)
        per_node.append(acc.compact())
    while len(per_node) > 1:
        per_node = [analysis.merge(per_node[i], per_node[i + 1]) if i + 1 < len(per_node)
                    else per_node[i] for i in range(0, len(per_node), 2)]
    return per_node[0]


_REF = {}      # LiberTEM's results per case: computed once, compared at every node count


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("withheld", [False, True])
def test_udfs_equal_libertem_inline(tmp_path, nodes, withheld):
    specs = _specs(tmp_path)
    data = uc.frames()
    valid = np.ones(F, bool)
    if withheld:
        valid[[0, 3, 10, 11, 40, 63]] = False
    if withheld not in _REF:
        _REF[withheld] = uc.reference(specs, data, valid)
    ref = _REF[withheld]
    spec = "udf:" + ",".join(s for s, _ in specs)
    a = load_analysis(spec, [p for _, p in specs])
    a.prepare(GEOM)
    total = _run(a, data, valid, nodes)
    got = a.results(total)
    bad = []
    for label, r, g in zip(a.labels, ref, got):
        bad += uc.compare(r, {k: np.asarray(v.data) for k, v in g.items()}, label)
    assert not bad, bad
    assert (total.seen(F) == valid).all()
    # the test's UDF saw the right scan coordinates and every valid frame once
    pos = {k: np.asarray(v.data) for k, v in got[a.labels.index("PosUDF")].items()}
    yy, xx = np.divmod(np.arange(F), uc.SCAN[1])
    assert (pos["where"].reshape(F, 2)[valid] == np.stack([yy, xx], 1)[valid]).all()
    assert list(pos["stats"]) == [valid.sum(), valid.sum()]


def test_single_udf_from_json_and_output_file(tmp_path):
    """``--analysis-params`` JSON, one UDF: /udf/<buffer> with dtype, /udf/valid."""
    import h5py

    from analyses.output import Coverage, write_scan

    data = uc.frames()
    valid = np.ones(F, bool)
    valid[[5, 6]] = False
    a = load_analysis("udf:tests.udf_cases:PosUDF", json.loads('{"scale": 3}'))
    a.prepare(GEOM)
    total = _run(a, data, valid, 2)
    write_scan(str(tmp_path / "s.h5"), a, total, GEOM,
               Coverage.of_files(GEOM, total.complete(F), total.received(F)))
    ref = uc.reference([("tests.udf_cases:PosUDF", {"scale": 3})], data, valid)[0]
    with h5py.File(tmp_path / "s.h5", "r") as f:
        assert f["udf/value"].shape == uc.SCAN and f["udf/value"].dtype == np.float64
        assert f["udf/where"].shape == (*uc.SCAN, 2)
        assert f["udf/weighted"].shape == uc.FRAME
        assert f["udf/value"].attrs["kind"] == "nav"
        assert (f["udf/valid"][()] == valid.reshape(uc.SCAN)).all()
        got = {k: f["udf"][k][()] for k in ref}
        assert json.loads(f["udf"].attrs["params"]) == {"scale": 3}
    assert not uc.compare(ref, got, "PosUDF")
    imgs = a.images(total, GEOM)
    assert list(imgs)[0] == "value" and imgs["weighted"].shape == uc.FRAME


def test_merge_leaves_inputs_alone():
    data = uc.frames()
    a = load_analysis("udf:libertem.udf.sum:SumUDF")
    a.prepare(GEOM)
    p = a.process_partition(data[:8], np.arange(8), np.ones(8, bool))
    q = a.process_partition(data[8:16], np.arange(8, 16), np.ones(8, bool))
    before = p.agg[0]["intensity"].copy()
    m = a.merge(p, q)
    assert (p.agg[0]["intensity"] == before).all()
    assert np.allclose(m.agg[0]["intensity"], data[:16].sum(0))


class NoMerge(__import__("libertem.udf.base", fromlist=["UDF"]).UDF):
    def get_result_buffers(self):
        return {"s": self.buffer(kind="sig", dtype=np.float32)}

    def process_frame(self, frame):
        self.results.s[:] += frame


class NoProcess(__import__("libertem.udf.base", fromlist=["UDF"]).UDF):
    def get_result_buffers(self):
        return {}


@pytest.mark.parametrize("spec,params,words", [
    ("udf:tests.unit.test_analyses_udf_adapter:NoMerge", {}, ["NoMerge", "merge"]),
    ("udf:tests.unit.test_analyses_udf_adapter:NoProcess", {}, ["NoProcess", "process_frame"]),
    ("udf:tests.unit.test_analyses_udf_adapter:GEOM", {}, ["GEOM", "not a LiberTEM UDF"]),
    ("udf:no.such.module:X", {}, ["no.such.module"]),
    ("udf:libertem.udf.sum:SumUDF", {"nonsense": 1}, ["SumUDF", "nonsense"]),
    ("udf:libertem.udf.sum", {}, ["udf:MODULE:CLASS"]),
])
def test_refused_with_a_message_naming_udf_and_feature(spec, params, words):
    with pytest.raises(UDFError) as e:
        a = load_analysis(spec, params)
        a.prepare(GEOM)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_analysis_params_option():
    from analyses.loading import analysis_options

    assert analysis_options('{"a": [1, 2]}', []) == {"a": [1, 2]}
    assert analysis_options("[{}, {}]", []) == [{}, {}]
    assert analysis_options(None, ["a=3", "b=x"]) == {"a": 3, "b": "x"}
    for bad, words in (('{"a": 1}', "not both"), ("{nope", "not JSON"), ("3", "JSON object")):
        with pytest.raises(ValueError, match=words):
            analysis_options(bad, ["x=1"] if words == "not both" else [])


class GPUOnly(NoMerge):
    def get_backends(self):
        return ("cupy",)

    def merge(self, dest, src):
        dest.s[:] += src.s


def test_refused_at_prepare_gpu_only_and_aux_data():
    from libertem.udf.base import UDF

    a = load_analysis("udf:tests.unit.test_analyses_udf_adapter:GPUOnly")
    with pytest.raises(UDFError, match="GPUOnly.*no CPU backend"):
        a.prepare(GEOM)
    aux = UDF.aux_data(np.zeros(F, np.float32), kind="nav")
    with pytest.raises(UDFError, match="PosUDF.*aux data"):
        load_analysis("udf:tests.udf_cases:PosUDF", {"scale": 1.0, "extra": aux}).prepare(GEOM)


def test_a_frame_analysed_twice_makes_a_summing_udf_result_invalid():
    """Stream V2: an image the detector sent twice can reach two clients and be analysed
    twice. Per-position buffers are unchanged by that; a sum over frames is not, so the
    job marks such a scan's result invalid and does not call it served (exit 1)."""
    import numpy as np

    from streams.accounting import ScanReport
    from streams.job.output import exit_status, scan_ok

    summing = load_analysis("udf:libertem.udf.sum:SumUDF")      # a sig buffer: the sum
    summing.prepare(GEOM)
    assert summing.duplicates_safe is False
    nav = load_analysis("udf:libertem.udf.sumsigudf:SumSigUDF")  # one value per position
    nav.prepare(GEOM)
    assert nav.duplicates_safe is True
    assert load_analysis("sum").duplicates_safe is True           # per-frame columns
    a = ScanReport.empty(GEOM)
    a.got[:] = True
    assert scan_ok(a) and exit_status([a], 1) == 0
    b = ScanReport.empty(GEOM)
    b.invalid = "2 frame(s) reached two receivers"
    merged = a.merge(b)
    assert merged.invalid == b.invalid and merged.ok
    assert not scan_ok(merged) and exit_status([merged], 1) == 1
    assert "RESULT INVALID: 2 frame(s)" in merged.summary()
    assert merged.to_dict()["result_invalid"] == b.invalid
    assert np.all(merged.got)
