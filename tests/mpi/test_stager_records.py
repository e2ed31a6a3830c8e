"""Records keyed by spec, shared destinations, ownership, source identity (``@pytest.mark.mpi``).

Every test passes at any rank count (1..4) with
``min(2, size)`` emulated nodes; rank 0 prepares and inspects, every verdict goes
through ``assert_all``.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.mpiutil import assert_all, emulated, shared_tmpdir

pytestmark = pytest.mark.mpi


@pytest.fixture
def tmp(comm):
    d = shared_tmpdir(comm, "mpistage-records-")
    yield Path(d)
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _k(comm):
    return min(2, comm.size)


def _files(comm, d: Path, names, size=5000):
    if comm.rank == 0:
        d.mkdir(parents=True, exist_ok=True)
        for n in names:
            (d / n).write_bytes(os.urandom(size))
    comm.Barrier()


def _spec(comm, path: Path, dest: str, pattern: str) -> str:
    if comm.rank == 0:
        path.write_text(f"broadcast to {dest} files {{\n  {pattern}\n}}\n")
    comm.Barrier()
    return str(path)


def _on0(comm, fn):
    ok, msg = True, ""
    if comm.rank == 0:
        try:
            ok, msg = fn()
        except Exception as e:  # a failed check on rank 0 fails every rank
            ok, msg = False, f"{type(e).__name__}: {e}"
    assert_all(comm, ok, msg)


def _outcome(fn):
    try:
        return fn(), None
    except Exception as e:
        return None, e


def test_two_specs_share_a_root_and_touch_only_their_own_files(comm, tmp):
    from stager import clean, stage, verify
    from stager.errors import VerifyError
    k = _k(comm)
    _files(comm, tmp / "a", ["a1.bin", "a2.bin"])
    _files(comm, tmp / "b", ["b1.bin"])
    spec_a = _spec(comm, tmp / "a.hook", f"{tmp}/out/%n", f"{tmp}/a/*.bin")
    spec_b = _spec(comm, tmp / "b.hook", f"{tmp}/out/%n", f"{tmp}/b/*.bin")
    stage(spec_a, emulated(comm, k), progress=False)
    stage(spec_b, emulated(comm, k), progress=False)
    va, vb = verify(spec_a, emulated(comm, k)), verify(spec_b, emulated(comm, k))
    assert_all(comm, (va.files_checked, vb.files_checked) == (2 * k, k), f"{va} {vb}")
    if comm.rank == 0:  # one of B's copies changes: verify A must not notice
        (tmp / "out" / "node0" / "b1.bin").write_bytes(b"changed")
    comm.Barrier()
    verify(spec_a, emulated(comm, k))
    _, err = _outcome(lambda: verify(spec_b, emulated(comm, k)))
    assert_all(comm, isinstance(err, VerifyError) and "b1.bin" in str(err), repr(err))
    rep = clean(spec_a, emulated(comm, k))
    assert_all(comm, rep.files_removed == 2 * k, str(rep))

    def left():
        names = sorted(p.name for p in (tmp / "out").rglob("*.bin"))
        return names == ["b1.bin"] * k, f"after clean A: {names}"
    _on0(comm, left)
    rep = clean(spec_b, emulated(comm, k))
    _on0(comm, lambda: (not any(p.name.endswith(".bin") and p.name != "b1.bin"
                                for p in (tmp / "out").rglob("*")), "clean B"))
    # node0's b1.bin was modified: left and reported; everything else is gone
    assert_all(comm, any("b1.bin" in s and "modified" in s for s in rep.skipped), str(rep))
    _on0(comm, lambda: (sorted(str(p.relative_to(tmp)) for p in (tmp / "out").rglob("*"))
                        == ["out/node0", "out/node0/b1.bin"], "clean left more than b1.bin"))


def test_destination_shared_by_nodes_has_one_writer(comm, tmp):
    from stager import clean, stage, verify
    k = _k(comm)
    _files(comm, tmp / "src", ["x.bin", "y.bin"], size=70_000)
    spec = _spec(comm, tmp / "s.hook", f"{tmp}/shared", f"{tmp}/src/*.bin")  # no %n
    rep = stage(spec, emulated(comm, k), progress=False)
    assert_all(comm, rep.bytes_written == 140_000, f"written {rep.bytes_written}, one copy wanted")
    shared = rep.extra["records"]["shared_roots"]
    assert_all(comm, len(shared) == (1 if k > 1 else 0), str(shared))
    again = stage(spec, emulated(comm, k), progress=False)
    assert_all(comm, again.bytes_written == 0 and again.files_skipped == 2, str(again))
    v = verify(spec, emulated(comm, k))
    assert_all(comm, v.files_checked == 2, str(v))
    c = clean(spec, emulated(comm, k))
    assert_all(comm, c.files_removed == 2 and not c.skipped, str(c))
    _on0(comm, lambda: (not (tmp / "shared").exists(), "clean left the shared destination"))


def test_a_file_that_is_not_ours_is_never_replaced(comm, tmp):
    from stager import clean, stage
    from stager.errors import TransferError
    k = _k(comm)
    _files(comm, tmp / "a", ["same.bin"])
    _files(comm, tmp / "b", ["same.bin"])
    spec_a = _spec(comm, tmp / "a.hook", f"{tmp}/out/%n", f"{tmp}/a/*.bin")
    spec_b = _spec(comm, tmp / "b.hook", f"{tmp}/out/%n", f"{tmp}/b/*.bin")
    stage(spec_a, emulated(comm, k), progress=False)
    _, err = _outcome(lambda: stage(spec_b, emulated(comm, k), progress=False))
    msg = str(err)
    assert_all(comm, isinstance(err, TransferError) and "staged there by another spec" in msg
               and str(tmp / "a.hook") in msg, msg)
    _on0(comm, lambda: ((tmp / "out/node0/same.bin").read_bytes()
                        == (tmp / "a/same.bin").read_bytes(), "B replaced A's copy"))
    clean(spec_a, emulated(comm, k))
    if comm.rank == 0:  # the user's own file where a copy would go
        (tmp / "out" / "node0").mkdir(parents=True)
        (tmp / "out" / "node0" / "same.bin").write_bytes(b"mine")
    comm.Barrier()
    _, err = _outcome(lambda: stage(spec_b, emulated(comm, k), progress=False))
    assert_all(comm, isinstance(err, TransferError) and "not a copy this spec staged" in str(err),
               repr(err))
    _on0(comm, lambda: ((tmp / "out/node0/same.bin").read_bytes() == b"mine", "overwritten"))


def test_clean_never_follows_a_symlinked_directory(comm, tmp):
    """A staged directory moved away and replaced by a symlink to it: the recorded copy
    (same device, inode, size, mtime) is reachable only through the link, and a path
    ``lstat`` would follow the link and delete it. The walk with O_NOFOLLOW directory
    descriptors refuses the link and leaves the file."""
    from stager import clean, stage
    k = _k(comm)
    _files(comm, tmp / "src" / "sub", ["keep.bin"])
    spec = _spec(comm, tmp / "s.hook", f"{tmp}/out/%n", f"{tmp}/src/**")
    stage(spec, emulated(comm, k), progress=False)
    moved = tmp / "elsewhere"
    if comm.rank == 0:
        os.rename(tmp / "out" / "node0" / "sub", moved)
        os.symlink(moved, tmp / "out" / "node0" / "sub")
    comm.Barrier()
    rep = clean(spec, emulated(comm, k))
    _on0(comm, lambda: ((moved / "keep.bin").exists(), "clean deleted through a symlink"))
    assert_all(comm, any("symlink" in s for s in rep.skipped), str(rep.skipped))


def test_same_size_rewrite_with_the_old_mtime_is_detected(comm, tmp):
    from stager import plan, stage
    from stager.errors import TransferError
    from core.mpi.agree import bcast_result
    k = _k(comm)
    _files(comm, tmp / "src", ["d.bin"], size=300_000)
    spec = _spec(comm, tmp / "s.hook", f"{tmp}/out/%n", f"{tmp}/src/*.bin")
    src = tmp / "src" / "d.bin"

    def rewrite():
        if comm.rank == 0:
            st = src.stat()
            data = bytearray(src.read_bytes())
            data[1000] ^= 0xFF
            src.write_bytes(bytes(data))  # same size ...
            os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the old mtime
        comm.Barrier()

    # between planning and reading: the transfer refuses it
    planned = bcast_result(comm, plan, spec)
    rewrite()
    _, err = _outcome(lambda: stage(planned, emulated(comm, k), progress=False,
                                    chunk_size=64 << 10, small_file_threshold=1024))
    assert_all(comm, isinstance(err, TransferError) and "changed" in str(err)
               and "ctime_ns" in str(err), repr(err))
    # after staging: the re-run sees it and stages it again (not "current")
    stage(spec, emulated(comm, k), progress=False)
    rewrite()
    rep = stage(spec, emulated(comm, k), progress=False)
    assert_all(comm, rep.files_transferred == 1 and rep.files_skipped == 0, str(rep))
    _on0(comm, lambda: ((tmp / "out/node0/d.bin").read_bytes() == src.read_bytes(),
                        "the copy does not match the rewritten source"))


def test_verify_source_finds_a_source_that_differs_from_its_copies(comm, tmp):
    """``--verify-source`` reads every source again: a passing run reports what it read;
    a source that differs from its copies has them removed and the run fails."""
    from stager import stage
    from stager.errors import TransferError
    from core.nodes import node_layout
    from stager.planning import spec_key
    from stager.staging.commits import NodeRecords
    from stager.staging.pipeline import node_targets
    from stager.staging.sourcecheck import verify_sources
    from core.mpi.agree import agreed, bcast_result
    from stager import plan as plan_of
    k = _k(comm)
    _files(comm, tmp / "src", ["p.bin", "q.bin", "r.bin"], size=9000)
    spec = _spec(comm, tmp / "s.hook", f"{tmp}/out/%n", f"{tmp}/src/*.bin")
    rep = stage(spec, emulated(comm, k), progress=False, verify_source=True)
    assert_all(comm, rep.extra["verify_source"]["files"] >= 1, str(rep.extra))
    if comm.rank == 0:  # after staging, q.bin is rewritten in place
        (tmp / "src" / "q.bin").write_bytes(os.urandom(9000))
    comm.Barrier()
    p = bcast_result(comm, plan_of, spec)
    layout = node_layout(comm, f"emulate:{k}")
    err = None
    try:
        with agreed(comm, "checking the sources again"):
            if layout.is_leader:
                units = [("files", i, u) for i, u in enumerate(p.units("files"))]
                t = node_targets(p, p.units("files"), layout.name)
                recs = NodeRecords(p.units("files"), t.dests, t.roots, t.rels, spec_key(spec), spec,
                                   "test", layout.name)
                recs.open()
                try:
                    for g in range(len(p.units("files"))):
                        recs.decide(g, force=False)
                    recs.done.update(range(len(p.units("files"))))
                    verify_sources(layout.leader_comm, list(range(3)),
                                   [(_Files, i, u) for _, i, u in units], recs)
                finally:
                    recs.close()
    except TransferError as e:
        err = e
    finally:
        layout.free()
    assert_all(comm, err is not None and "q.bin" in str(err) and "differs" in str(err), repr(err))
    _on0(comm, lambda: (not (tmp / "out/node0/q.bin").exists()
                        and (tmp / "out/node0/p.bin").exists(), "q.bin's copy was not removed"))
    again = stage(spec, emulated(comm, k), progress=False)
    assert_all(comm, again.files_transferred == 1, str(again))


class _Files:
    name = "files"


def test_names_of_255_bytes_are_staged_and_drained(comm, tmp):
    from stager import clean, drain, stage, verify
    k = _k(comm)
    long_name = "L" * 251 + ".bin"  # NAME_MAX: the temporary name must not grow it
    odd = ["100%new.txt", "run%n.dat", "%%.bin"]
    _files(comm, tmp / "src", [long_name, *odd], size=3000)
    spec = _spec(comm, tmp / "s.hook", f"{tmp}/out/%n", f"{tmp}/src/*")
    stage(spec, emulated(comm, k), progress=False)
    v = verify(spec, emulated(comm, k))
    assert_all(comm, v.files_checked == 4 * k, str(v))
    _on0(comm, lambda: (sorted(os.listdir(tmp / "out" / "node0")) ==
                        sorted([".stager", long_name, *odd]), "names not kept exactly"))
    rep = drain(f"{tmp}/out/%n", str(tmp / "drained"), emulated(comm, k))
    assert_all(comm, rep.files >= 4 * k, rep.summary())
    _on0(comm, lambda: ((tmp / "drained" / "node0" / long_name).read_bytes()
                        == (tmp / "src" / long_name).read_bytes(), "long name not drained"))
    clean(spec, emulated(comm, k))
    _on0(comm, lambda: (not (tmp / "out").exists(), "clean left files"))
