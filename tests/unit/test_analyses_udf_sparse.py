"""Sparse partitions into LiberTEM UDFs: sparse tiles where a UDF takes them, dense otherwise.

A TPX3-like scan (:func:`streams.protocols.asi_tpx3.simulator.sparse_scan`, CSR) is cut
as two receivers cut it (strided frames, partitions of 5, some frames incomplete) into
:class:`analyses.sparse.CSRFrames` and run through :mod:`analyses.udf`: ``SumUDF`` and
``ApplyMasksUDF`` (which declare sparse backends) get ``scipy.sparse`` tiles, a UDF that
takes only dense tiles gets dense ones from LiberTEM's own ``sparseconverter``, and every
result equals LiberTEM's ``run_udf`` on the dense equivalent (``roi=`` the complete
frames) bit for bit (integer counts, 0/1 masks).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libertem")

from libertem.udf.sum import SumUDF

from analyses.loading import load_analysis
from analyses.sparse import CSRFrames
from streams.protocol import ScanGeometry
from streams.protocols.asi_tpx3.simulator import sparse_scan

NAV, SIG = (6, 8), (32, 48)
F = NAV[0] * NAV[1]
GEOM = ScanGeometry("s", 1, F, 1, SIG, "<u4", NAV)
TILES = []      # (UDF class name, tile type name): the runner is inline, in this process


class SeenSum(SumUDF):
    def process_tile(self, tile):
        TILES.append(("SeenSum", type(tile).__name__))
        super().process_tile(tile)


class DenseSum(SeenSum):
    def get_backends(self):
        return (self.BACKEND_NUMPY,)

    def process_tile(self, tile):
        TILES.append(("DenseSum", type(tile).__name__))
        SumUDF.process_tile(self, tile)


def _scan():
    ip, ix, v = sparse_scan(NAV, SIG, 60.0, seed=3)
    return ip.astype(np.int64), ix, v


def _part(ip, ix, v, frames):
    """CSRFrames of ``frames`` (any order), as a SparseAssembler delivers them."""
    rows = [(ix[ip[f]:ip[f + 1]], v[ip[f]:ip[f + 1]]) for f in frames]
    indptr = np.concatenate([[0], np.cumsum([len(r[0]) for r in rows])]).astype(np.int64)
    return CSRFrames(indptr, np.concatenate([r[0] for r in rows]),
                     np.concatenate([r[1] for r in rows]), (len(frames), *SIG))


def _masks(tmp_path):
    yy, xx = np.mgrid[:SIG[0], :SIG[1]]
    d2 = (yy - SIG[0] / 2) ** 2 + (xx - SIG[1] / 2) ** 2
    path = tmp_path / "masks.npy"
    np.save(path, np.stack([d2 < 8 ** 2, (d2 >= 9 ** 2) & (d2 < 20 ** 2)]).astype("<f4"))
    return path


def _reference(dense, valid, masks):
    from libertem.api import Context
    from libertem.udf.masks import ApplyMasksUDF

    ctx = Context.make_with("inline")
    ds = ctx.load("memory", data=dense.reshape(*NAV, *SIG), sig_dims=2)
    m = np.load(masks)
    res = ctx.run_udf(ds, [SumUDF(), ApplyMasksUDF(mask_factories=[lambda a=a: a for a in m])],
                      roi=valid.reshape(NAV))
    return [np.asarray(r["intensity"].data) for r in res]


@pytest.mark.parametrize("order", ["strided", "reversed"])
def test_sparse_tiles_where_a_udf_takes_them_equal_libertem_on_the_dense_scan(tmp_path, order):
    ip, ix, v = _scan()
    dense = np.stack([_part(ip, ix, v, [f]).dense()[0] for f in range(F)])
    valid = np.ones(F, bool)
    valid[[0, 7, 20, 21]] = False
    masks = _masks(tmp_path)
    want = _reference(dense, valid, masks)
    here = "tests.unit.test_analyses_udf_sparse"
    a = load_analysis(f"udf:{here}:SeenSum,libertem.udf.masks:ApplyMasksUDF,{here}:DenseSum",
                      [{}, {"masks": str(masks)}, {}])
    assert not a.sparse                      # no scan yet
    a.prepare(GEOM)
    assert a.sparse                          # the job hands it CSR partitions as they are
    TILES.clear()
    total = a.empty()
    for r in range(2):                       # two receivers: frames r, r + 2, ...
        idx = np.arange(r, F, 2)
        for s in range(0, len(idx), 5):
            f = idx[s:s + 5][::-1] if order == "reversed" else idx[s:s + 5]
            total = a.merge(total, a.process_partition(_part(ip, ix, v, f), f, valid[f]))
    got = a.results(total)
    assert set(TILES) == {("SeenSum", "csr_matrix"), ("DenseSum", "ndarray")}, set(TILES)
    assert (total.seen(F) == valid).all()
    for mine, ref in ((got[0]["intensity"], want[0]), (got[1]["intensity"], want[1]),
                      (got[2]["intensity"], want[0])):
        arr = np.asarray(mine.data)
        assert arr.dtype == ref.dtype and np.array_equal(arr, ref, equal_nan=True)


def test_dense_only_udfs_and_corrections_take_dense_frames(tmp_path):
    here = "tests.unit.test_analyses_udf_sparse"
    a = load_analysis(f"udf:{here}:DenseSum")
    a.prepare(GEOM)
    assert not a.sparse                      # frames_for densifies, as before
    mask = np.zeros(SIG, np.uint8)
    mask[3, 4] = 1
    np.save(tmp_path / "pixels.npy", mask)
    b = load_analysis(f"udf:{here}:SeenSum", corrections=str(tmp_path / "pixels.npy"))
    b.prepare(GEOM)
    assert not b.sparse                      # LiberTEM corrects dense tiles only
    ip, ix, v = _scan()
    TILES.clear()
    f = np.arange(4)
    res = b.results(b.process_partition(_part(ip, ix, v, f), f, np.ones(4, bool)), GEOM)
    assert set(TILES) == {("SeenSum", "ndarray")}
    assert np.isfinite(np.asarray(res[0]["intensity"].data)).all()
