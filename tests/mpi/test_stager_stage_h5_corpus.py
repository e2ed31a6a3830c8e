"""Every HDF5 file of the conformance corpus staged to emulated nodes, compared to its source.

The corpus (:mod:`tests.data.corpus`: Eiger masters with external links to
bitshuffle+LZ4 data files, an NXmx VDS over several files, every string
flavour, every datatype and dataspace, one dataset per lossless filter here,
real files h5py ships, the readers' layouts) is built once on rank 0. Each
copyable entry is staged three ways in one run -- the whole file, each of its
datasets, and a selection that is not chunk-aligned -- to min(2, ranks)
emulated nodes, and every copy is compared to its source by
:mod:`tests.h5same` (types, values, chunks, filter pipelines, attributes,
links). ``stager verify`` then passes, and a copy tampered so that it no longer
decodes makes it fail naming node, file and dataset. Entries the corpus marks
as refused are refused at planning, on every rank, with the names it lists.
"""
import os
import shutil

import numpy as np
import pytest

from tests.mpiutil import assert_all, emulated, shared_tmpdir
import stager.planning.kinds  # noqa: F401  (registers the block kinds parse_spec reads)

pytestmark = pytest.mark.mpi


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.fixture(scope="module")
def corpus():
    comm = _comm()
    d = shared_tmpdir(comm, "mpistage-corpus-")
    manifest, err = None, ""
    if comm.rank == 0:
        try:
            from tests.data.corpus import build
            manifest = build(os.path.join(d, "corpus"))
        except Exception as e:  # every rank must learn it
            err = f"{type(e).__name__}: {e}"
    manifest, err = comm.bcast((manifest, err), root=0)
    assert_all(comm, not err, f"corpus build failed: {err}")
    yield manifest, d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _h5_entries(manifest, expect):
    return [e for e in manifest["entries"]
            if e["format"] == "hdf5" and e["stage"]["expect"] in expect]


def _selections(e):
    """Non-chunk-aligned selections: the corpus's own, else [1:n-1] of every stack."""
    if e["stage"].get("selections"):
        return ["/" + s.lstrip("/") for s in e["stage"]["selections"]]
    out = []
    for path, d in sorted(e["datasets"].items()):
        shape = d.get("shape") or []
        if len(shape) >= 1 and shape[0] >= 3 and d.get("type_class") != "reference":
            out.append(f"{path}[1:{shape[0] - 1}]")
    return out


def _parts(e):
    return {"whole": ["/"], "datasets": sorted(e["datasets"]), "selection": _selections(e)}


def _spec_text(manifest, out, entries):
    blocks = []
    for e in entries:
        for part, sels in _parts(e).items():
            if sels:
                body = "\n".join(f'  "{e["path"]}:{s}"' for s in sels)
                blocks.append(f"broadcast to {out}/{e['name']}/{part}/%n h5 {{\n{body}\n}}\n")
    return "".join(blocks)


def _compare(manifest, out, entries, nodes):
    import h5py

    from tests.h5same import dataset_same, group_differs

    problems = []
    root = manifest["root"]
    for e in entries:
        src_path = os.path.join(root, e["path"])
        name = os.path.basename(e["path"])
        for part, sels in _parts(e).items():
            if not sels:
                continue
            for node in nodes:
                cp = os.path.join(out, e["name"], part, node, name)
                with h5py.File(src_path, "r") as s, h5py.File(cp, "r") as c:
                    for sel in sels:
                        where = f"{e['name']}/{part}/{node}:{sel}"
                        path, _, rng = sel.partition("[")
                        if path == "/":
                            problems += group_differs(s["/"], c["/"], where)
                            continue
                        idx = None
                        if rng:
                            a, b = (int(x) for x in rng.rstrip("]").split(":"))
                            idx = np.s_[a:b]
                        problems += dataset_same(s[path], c[path], where, idx)
    return problems


def test_every_corpus_file_staged_equal_to_source_and_verified(corpus):
    """Whole files, whole datasets and unaligned selections: equal; verify passes; a copy
    tampered so it no longer decodes fails verify naming node, file and dataset."""
    from hooks import parse_spec
    from stager import stage, verify
    from stager.errors import VerifyError

    manifest, d = corpus
    comm = _comm()
    k = min(2, comm.size)
    out = os.path.join(d, "out")
    entries = _h5_entries(manifest, ("copy", "translate-or-refuse"))
    names = {e["name"] for e in entries}
    assert_all(comm, {"eiger_u32", "nxmx_vds", "strings", "types", "filters"} <= names,
               f"corpus entries missing (hdf5plugin not installed?): {sorted(names)}")
    spec = parse_spec(_spec_text(manifest, out, entries), path="corpus.hook",
                      base_dir=manifest["root"], env={})
    rep = stage(spec, emulated(comm, k), progress=False, h5_memory="256K",
                h5_inline_bytes=0)  # every dataset through the read path
    h5 = rep.extra.get("h5", {})
    import h5py
    want_read = "independent+mpio" if h5py.get_config().mpi else "independent"
    assert_all(comm, h5.get("read") == want_read and h5.get("h5py_mpi") == bool(
        h5py.get_config().mpi), f"read path reported {h5}")
    assert_all(comm, rep.files_transferred == rep.files and len(rep.nodes) == k, str(rep))

    problems = ["not checked"]
    if comm.rank == 0:
        try:
            problems = _compare(manifest, out, entries, rep.nodes)
        except Exception as e:
            problems = [f"{type(e).__name__}: {e}"]
    problems = comm.bcast(problems, root=0)
    assert_all(comm, not problems, "; ".join(problems[:20]))

    v = verify(spec, emulated(comm, k))
    assert_all(comm, v.files_checked == rep.files * k, f"verify checked {v.files_checked}")

    # tamper: overwrite the middle of one stored gzip chunk of the last node's copy
    bad_node = rep.nodes[-1]
    victim = os.path.join(out, "filters", "whole", bad_node, "filters.h5")
    if comm.rank == 0:
        with h5py.File(victim, "r") as f:
            info = f["/gzip"].id.get_chunk_info(0)
        with open(victim, "r+b") as fh:
            fh.seek(info.byte_offset + 4)
            fh.write(b"\xff" * max(1, info.size - 8))
    comm.Barrier()
    msg = "no error"
    try:
        verify(spec, emulated(comm, k))
    except VerifyError as e:
        msg = str(e)
    assert_all(comm, f"node {bad_node}" in msg or bad_node in msg, msg)
    assert_all(comm, victim in msg and "/gzip" in msg and "does not decode" in msg, msg)


@pytest.mark.parametrize("name", ["eiger_missing_data_file", "nxmx_vds_missing_source",
                                  "missing_filter"])
def test_corpus_refusals_at_planning_on_every_rank(corpus, name):
    from hooks import parse_spec
    from stager import stage
    from stager.errors import PlanError

    manifest, d = corpus
    comm = _comm()
    es = [e for e in manifest["entries"] if e["name"] == name]
    if not es:
        pytest.skip(f"corpus entry {name} not built here: {manifest['skipped']}")
    e = es[0]
    out = os.path.join(d, "refused", name)
    spec = parse_spec(f'broadcast to {out}/%n h5 {{\n  "{e["path"]}:/"\n}}\n', path="r.hook",
                      base_dir=manifest["root"], env={})
    msg = "no error"
    try:
        stage(spec, emulated(comm, min(2, comm.size)), progress=False)
    except PlanError as ex:
        msg = str(ex)
    msgs = comm.allgather(msg)
    assert_all(comm, len(set(msgs)) == 1 and msg.startswith("r.hook:2:3"), msg)
    assert_all(comm, all(m in msg for m in e["stage"]["match"]), f"{e['stage']['match']}: {msg}")
    assert_all(comm, not os.path.exists(out), "a refused plan wrote files")


def _filter_names():
    try:
        from tests.data.h5kinds import filter_variants
        return [v[0] for v in filter_variants()]
    except Exception:  # h5py missing: the corpus test reports it
        return []


@pytest.mark.parametrize("name", _filter_names())
def test_each_filter_whole_and_unaligned_selection(corpus, name):
    """Whole dataset (stored chunks copied) and [1:5] of 3-frame chunks (re-encoded): the
    copy's pipeline stores the source's values, and decodes to the source's values."""
    import h5py

    from hooks import parse_spec
    from stager import stage

    manifest, d = corpus
    comm = _comm()
    k = min(2, comm.size)
    src = os.path.join(manifest["root"], "filters.h5")
    out = os.path.join(d, "each", name)
    text = (f'broadcast to {out}/whole/%n h5 {{\n  "{src}:/{name}"\n}}\n'
            f'broadcast to {out}/sel/%n h5 {{\n  "{src}:/{name}[1:5]"\n}}\n')
    rep = stage(parse_spec(text, path="f.hook", base_dir=d, env={}), emulated(comm, k),
                progress=False, h5_inline_bytes=0)

    def check():
        from tests.h5same import dataset_same
        problems = []
        with h5py.File(src, "r") as s:
            stored = s[name].id.get_create_plist()
            want = [stored.get_filter(i)[:3] for i in range(stored.get_nfilters())]
            for node in rep.nodes:
                for part, idx, scheme in (("whole", None, "chunks"),
                                          ("sel", np.s_[1:5], "values")):
                    with h5py.File(os.path.join(out, part, node, "filters.h5"), "r") as c:
                        ds = c[name]
                        problems += dataset_same(s[name], ds, f"{part}/{node}", idx)
                        tag = ds.attrs["stager_checksum"]
                        if not tag.startswith(f"xxh3_128:{scheme}:"):
                            problems.append(f"{part}/{node}: moved as {tag}")
                        got = ds.id.get_create_plist()
                        got = [got.get_filter(i)[:3] for i in range(got.get_nfilters())]
                        if part == "whole" and [(a, b, tuple(v)[2:]) for a, b, v in got] != \
                                [(a, b, tuple(v)[2:]) for a, b, v in want]:
                            problems.append(f"{part}/{node}: pipeline {got}, source {want}")
                        if name == "bitshuffle_lz4" and tuple(got[0][2])[4] != 2:
                            problems.append(f"{part}/{node}: bitshuffle not LZ4: {got}")
        return problems

    problems = ["not checked"]
    if comm.rank == 0:
        try:
            problems = check()
        except Exception as e:
            problems = [f"{type(e).__name__}: {e}"]
    problems = comm.bcast(problems, root=0)
    assert_all(comm, not problems, "; ".join(problems))


def test_lossy_filters_are_copied_as_stored_chunks_exactly(corpus):
    """zfp (fixed rate) and float scale-offset: never re-encoded, so the copy decodes to
    exactly the source's values (a re-encoding would lose precision again)."""
    import h5py

    from hooks import parse_spec
    from stager import stage

    manifest, d = corpus
    comm = _comm()
    have = comm.bcast(bool(__import__("importlib").util.find_spec("hdf5plugin")), root=0)
    if not have:
        pytest.skip("hdf5plugin (zfp) is not installed")
    src = os.path.join(d, "lossy.h5")
    if comm.rank == 0:
        import hdf5plugin
        a = np.random.default_rng(5).random((7, 12, 10)).astype("f4")
        with h5py.File(src, "w") as f:
            f.create_dataset("zfp", data=a, chunks=(3, 12, 10), **hdf5plugin.Zfp(rate=8))
            f.create_dataset("so", data=a, chunks=(3, 12, 10), scaleoffset=2)
    comm.Barrier()
    out = os.path.join(d, "lossy")
    text = f'broadcast to {out}/%n h5 {{\n  "{src}:/zfp"\n  "{src}:/so[3:7]"\n}}\n'
    rep = stage(parse_spec(text, path="l.hook", base_dir=d, env={}),
                emulated(comm, min(2, comm.size)), progress=False)
    problems = ["not checked"]
    if comm.rank == 0:
        from tests.h5same import dataset_same
        problems = []
        with h5py.File(src, "r") as s:
            for node in rep.nodes:
                with h5py.File(os.path.join(out, node, "lossy.h5"), "r") as c:
                    problems += dataset_same(s["zfp"], c["zfp"], f"{node}:/zfp")
                    problems += dataset_same(s["so"], c["so"], f"{node}:/so", np.s_[3:7])
                    if not c["zfp"].attrs["stager_checksum"].startswith("xxh3_128:chunks:"):
                        problems.append("zfp was not moved as stored chunks")
    problems = comm.bcast(problems, root=0)
    assert_all(comm, not problems, "; ".join(problems))


def test_a_source_chunk_that_does_not_decode_stops_every_leader_and_leaves_nothing(corpus):
    """Stored chunks are decoded where they are read: a damaged source chunk is an agreed
    error naming the file, dataset and chunk; no copy (nor temporary file) is left."""
    import h5py

    from hooks import parse_spec
    from stager import stage
    from stager.errors import TransferError

    manifest, d = corpus
    comm = _comm()
    src = os.path.join(d, "damaged.h5")
    if comm.rank == 0:
        with h5py.File(src, "w") as f:
            f.create_dataset("x", data=np.arange(6 * 50 * 40, dtype="<u2").reshape(6, 50, 40),
                             chunks=(1, 50, 40), compression="gzip")
            info = f["x"].id.get_chunk_info(4)
        with open(src, "r+b") as fh:
            fh.seek(info.byte_offset + 4)
            fh.write(b"\xff" * (info.size - 8))
    comm.Barrier()
    out = os.path.join(d, "damaged-out")
    spec = parse_spec(f'broadcast to {out}/%n h5 {{\n  "{src}:/x"\n}}\n', path="d.hook",
                      base_dir=d, env={})
    msg = "no error"
    try:
        stage(spec, emulated(comm, min(2, comm.size)), progress=False, h5_inline_bytes=0)
    except TransferError as e:
        msg = str(e)
    msgs = comm.allgather(msg)
    assert_all(comm, len(set(msgs)) == 1, f"ranks disagree: {msgs}")
    assert_all(comm, f"{src}:/x: the stored chunk at (4, 0, 0) does not decode" in msg, msg)
    left = []
    if comm.rank == 0 and os.path.isdir(out):
        left = [os.path.join(r, n) for r, _, fs in os.walk(out) for n in fs
                if ".stager" not in r]
    assert_all(comm, not left, f"left behind: {left}")
