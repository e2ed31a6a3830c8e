"""Filter pipelines planned exactly, decoded in memory, and the decoding check of a copy.

Serial (no MPI): the set-up values of every filter available here
(:func:`stager.kinds.h5.filters.setup_values`), the in-memory chunk decoder
and :func:`stager.kinds.h5.check.check_file` on a copy written by
:class:`stager.kinds.h5.write.H5Output` from a plan whose values all travel
inline (so no collective read is needed).
"""
import os

import h5py
import numpy as np
import pytest

from hooks import parse_spec
from stager.planning import build_plan
from tests.data.h5kinds import filter_variants


def plan(text, base):
    return build_plan(parse_spec(text, path="t.hook", base_dir=str(base), env={}))


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    d = tmp_path_factory.mktemp("filters")
    stack = np.random.default_rng(3).poisson(30, (7, 12, 10)).astype(np.uint16)
    variants = filter_variants()
    with h5py.File(d / "f.h5", "w") as f:
        for name, kwargs, _ in variants:
            f.create_dataset(name, data=stack, chunks=(3, 12, 10), **kwargs)
    return d, stack, [v[0] for v in variants]


def test_bitshuffle_stored_values_are_not_passed_back_to_its_setup(filtered):
    """The issue's case: stored (0,v,4,0,2) given to H5Pset_filter again is stored doubled."""
    pytest.importorskip("hdf5plugin")
    d, _, names = filtered
    if "bitshuffle_lz4" not in names:
        pytest.skip("bitshuffle not available")
    p = plan("broadcast to /d h5 { f.h5:/bitshuffle_lz4 }", d)
    (flt,) = p.units("h5")[0].datasets[0].filters
    assert flt.code == 32008 and flt.values[2:] == (2, 0, 2)  # elem 2 bytes, block 0, LZ4
    assert flt.setup == flt.values[3:]  # the user's (block size, compression)
    with h5py.File(d / "probe.h5", "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((3, 12, 10))
        dcpl.set_filter(32008, flt.flags, flt.values)  # the old bug
        ds = h5py.h5d.create(f.id, b"x", h5py.h5t.STD_U16LE, h5py.h5s.create_simple((7, 12, 10)),
                             dcpl=dcpl)
        doubled = ds.get_create_plist().get_filter(0)[2]
    assert tuple(doubled) != flt.values and len(doubled) > len(flt.values)


def test_every_filter_here_gets_setup_values_that_store_the_source_values(filtered):
    from stager.kinds.h5.filters import pipeline_difference, stored_pipeline

    d, _, names = filtered
    body = " ".join(f"f.h5:/{n}" for n in names)
    p = plan(f"broadcast to /d h5 {{ {body} }}", d)
    with h5py.File(d / "f.h5", "r") as f, h5py.File(d / "again.h5", "w") as g:
        for ds in p.units("h5")[0].datasets:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk(ds.chunks)
            for flt in ds.filters:
                dcpl.set_filter(flt.code, flt.flags, flt.setup)
            new = h5py.h5d.create(g.id, ds.path[1:].encode(), h5py.h5t.decode(ds.h5type),
                                  h5py.h5s.create_simple(ds.shape), dcpl=dcpl)
            want = stored_pipeline(f[ds.path].id.get_create_plist())
            got = stored_pipeline(new.get_create_plist())
            assert pipeline_difference(want, got) is None, ds.path


def test_chunk_decoder_decodes_stored_chunks_of_every_filter(filtered):
    from stager.kinds.h5.check import ChunkDecoder

    d, stack, names = filtered
    p = plan("broadcast to /d h5 { " + " ".join(f"f.h5:/{n}" for n in names) + " }", d)
    with h5py.File(d / "f.h5", "r") as f:
        for ds in p.units("h5")[0].datasets:
            dec = ChunkDecoder(h5py.h5t.decode(ds.h5type), ds.chunks,
                               [(x.code, x.flags, x.setup) for x in ds.filters])
            try:
                mask, data = f[ds.path].id.read_direct_chunk((6, 0, 0))  # the edge chunk
                got = dec.decode(mask, data, (1, 12, 10))
            finally:
                dec.close()
            assert got.tobytes() == stack[6:7].tobytes(), ds.path


def _stage_inline(src_dir, entry, out):
    """Plan ``entry`` (everything inline) and write its copy with H5Output: no MPI."""
    from stager.kinds.h5.write import H5Output

    p = plan(f"broadcast to {out} h5 {{ {entry} }}", src_dir)
    (fp,) = p.units("h5")
    assert all(d.inline is not None for d in fp.datasets)
    os.makedirs(out, exist_ok=True)
    o = H5Output(fp, os.path.join(out, os.path.basename(fp.source)), "nodeX")
    try:
        o.commit({}, {})
    finally:
        o.abort()
    return o.dest


def test_copy_is_exact_and_a_damaged_copy_fails_the_decoding_check(tmp_path):
    from stager.kinds.h5.check import check_file
    from tests.data.h5kinds import build_strings, build_types
    from tests.h5same import group_differs

    build_strings(str(tmp_path / "strings.h5"))
    build_types(str(tmp_path / "types.h5"))
    with h5py.File(tmp_path / "g.h5", "w") as f:
        f.create_dataset("z", data=np.arange(4000, dtype="<i4").reshape(40, 100),
                         chunks=(10, 100), compression="gzip")
    for name in ("strings.h5", "types.h5", "g.h5"):
        dest = _stage_inline(tmp_path, f"{name}:/", str(tmp_path / "out"))
        with h5py.File(tmp_path / name, "r") as s, h5py.File(dest, "r") as c:
            assert group_differs(s["/"], c["/"], name) == []
        assert check_file(dest) == []
    dest = str(tmp_path / "out" / "g.h5")
    with h5py.File(dest, "r") as f:
        info = f["/z"].id.get_chunk_info(1)
    with open(dest, "r+b") as fh:
        fh.seek(info.byte_offset + 2)
        fh.write(b"\xff" * (info.size - 4))
    (bad,) = check_file(dest)
    assert bad.path == "/z" and "does not decode" in bad.reason


def test_comparison_sees_a_string_padding_change(tmp_path):
    """The test helper itself: a 20-byte null-terminated string copied as null-padded differs."""
    from tests.data.h5util import write_fixed_string
    from tests.h5same import dataset_same

    with h5py.File(tmp_path / "a.h5", "w") as a, h5py.File(tmp_path / "b.h5", "w") as b:
        write_fixed_string(a, "name", b"Simulated Synchrotr", 20, "nullterm", "ascii")
        write_fixed_string(b, "name", b"Simulated Synchrotr", 20, "nullpad", "ascii")
        assert any("H5Tequal" in p for p in dataset_same(a["name"], b["name"], "/name"))


def test_lossy_filters_move_as_stored_chunks_or_are_refused(tmp_path):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    from stager.errors import PlanError
    a = np.random.default_rng(1).random((7, 12, 10)).astype("f4")
    with h5py.File(tmp_path / "lossy.h5", "w") as f:
        f.create_dataset("zfp", data=a, chunks=(3, 12, 10), **hdf5plugin.Zfp(rate=8))
        f.create_dataset("so", data=a, chunks=(3, 12, 10), scaleoffset=2)
        f.create_dataset("so_int", data=(a * 100).astype("u2"), chunks=(3, 12, 10),
                         scaleoffset=0)
    p = plan("broadcast to /d h5 { lossy.h5:/zfp lossy.h5:/so[3:7] lossy.h5:/so_int[1:5] }",
             tmp_path)
    ds = {d.path: d for d in p.units("h5")[0].datasets}
    assert ds["/zfp"].inline is None and ds["/so"].inline is None  # small, yet not inline
    assert ds["/so_int"].inline is not None  # integer scale-offset, automatic bits: lossless
    for sel, name in (("zfp[1:5]", "32013"), ("so[0:7:2]", "6")):
        with pytest.raises(PlanError, match=rf"HDF5 filter {name} .* is lossy: the selection"):
            plan(f"broadcast to /d h5 {{ lossy.h5:/{sel} }}", tmp_path)


def test_references_to_an_object_with_two_names_pass_the_check(tmp_path):
    from stager.kinds.h5.check import check_file
    from tests.h5same import group_differs

    with h5py.File(tmp_path / "r.h5", "w") as f:
        f["a"] = np.arange(6).reshape(2, 3)
        f["b"] = f["a"]  # a second hard link
        f.create_dataset("refs", data=np.array([f["a"].ref, f["b"].ref, h5py.Reference()],
                                               dtype=h5py.ref_dtype))
        rr = f.create_dataset("rrefs", (1,), dtype=h5py.regionref_dtype)
        rr[0] = f["a"].regionref[0, 1:3]
    dest = _stage_inline(tmp_path, "r.h5:/", str(tmp_path / "out"))
    assert check_file(dest) == []
    with h5py.File(tmp_path / "r.h5", "r") as s, h5py.File(dest, "r") as c:
        assert group_differs(s["/"], c["/"], "r.h5") == []
        assert c.get("b", getlink=True).__class__.__name__ == "HardLink"
        assert c[c["rrefs"][0]].name in ("/a", "/b")
        assert (c["a"][c["rrefs"][0]] == [1, 2]).all()


def test_hdf5plugin_is_imported_only_when_a_dataset_needs_it(tmp_path):
    """In a fresh interpreter: planning a gzip dataset leaves hdf5plugin unimported; planning
    a bitshuffle one imports it (HDF5 then has filter 32008), and h5py stays the same build."""
    import subprocess
    import sys

    pytest.importorskip("hdf5plugin")
    import hdf5plugin
    with h5py.File(tmp_path / "g.h5", "w") as f:
        f.create_dataset("g", data=np.arange(40).reshape(4, 10), chunks=(1, 10),
                         compression="gzip")
        f.create_dataset("b", data=np.arange(40).reshape(4, 10), chunks=(1, 10),
                         **hdf5plugin.Bitshuffle(cname="lz4"))
    code = f"""
import sys, h5py
from hooks import parse_spec
from stager.planning import build_plan
mpi = h5py.get_config().mpi
def plan(e):
    return build_plan(parse_spec("broadcast to /d h5 {{ " + e + " }}", path="t.hook",
                                 base_dir={str(tmp_path)!r}, env={{}}))
plan("g.h5:/g")
print("after gzip:", "hdf5plugin" in sys.modules)
p = plan("g.h5:/b")
print("after bitshuffle:", "hdf5plugin" in sys.modules, h5py.h5z.filter_avail(32008))
print("same h5py:", h5py.get_config().mpi == mpi, p.units("h5")[0].datasets[0].filters[0].code)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["after gzip: False", "after bitshuffle: True True",
                                        "same h5py: True 32008"], r.stdout
