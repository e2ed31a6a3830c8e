"""stager drain: the collective stage-out (``@pytest.mark.mpi``).

MPI tests pass at any rank count: they use min(2, size) emulated nodes.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stager.errors import TransferError
from core import checksum, localfs
from stager.stageout import RECORD_PREFIX, list_results
from tests.mpiutil import emulated

# ---------------------------------------------------------------- collective


def _setup(comm, tmp: str, unique: bool = True) -> tuple[str, str, int]:
    """Rank 0 writes node-local results for each emulated node; returns (src, dest, k)."""
    k = min(2, comm.size)
    src = os.path.join(tmp, "local", "%n", "results")
    if comm.rank == 0:
        for i in range(k):
            d = Path(tmp, "local", f"node{i}", "results")
            (d / "sub").mkdir(parents=True)
            (d / "common.txt").write_bytes(f"node{i} says hi\n".encode())
            (d / "sub" / f"part-{i}.bin").write_bytes(os.urandom(200_000 + i))
            if unique:
                (d / "common.txt").rename(d / f"common-{i}.txt")
    comm.Barrier()
    return src, os.path.join(tmp, "shared", "out"), k


@pytest.fixture
def tmp(comm):
    from tests.mpiutil import shared_tmpdir
    path = shared_tmpdir(comm, prefix="drain-test-")
    yield path
    comm.Barrier()
    if comm.rank == 0:
        import shutil
        shutil.rmtree(path, ignore_errors=True)


def _run(fn, comm):
    """Run ``fn`` on every rank; return (result, error) without raising."""
    try:
        return fn(), None
    except Exception as e:
        return None, e


@pytest.mark.mpi
def test_drain_per_node_copies_bytes_and_records_checksums(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    src, dest, k = _setup(comm, tmp, unique=False)
    report = drain(src, dest, emulated(comm, k))
    ok, msg = True, ""
    if comm.rank == 0:
        for i in range(k):
            node = f"node{i}"
            local = Path(tmp, "local", node, "results")
            record = json.loads(Path(dest, f"{RECORD_PREFIX}{node}.json").read_text())
            for f in list_results(str(local)):
                shared = Path(dest, node, f.rel)
                if shared.read_bytes() != (local / f.rel).read_bytes():
                    ok, msg = False, f"{shared} differs from {local / f.rel}"
                rec = record["files"][f"{node}/{f.rel}"]
                want = checksum.file_hexdigest(local / f.rel)
                if rec["checksum"] != want or rec["size"] != f.size:
                    ok, msg = False, f"record of {node}/{f.rel} is wrong: {rec}"
            leftovers = [p for p in Path(dest).rglob("*") if localfs.TEMP_MARK in p.name]
            if leftovers:
                ok, msg = False, f"temporary files left: {leftovers}"
    assert_all(comm, ok, msg)
    summaries = comm.allgather((report.files, report.bytes, report.summary()[:40]))
    assert_all(comm, len(set(summaries)) == 1, f"reports differ across ranks: {summaries}")
    want_bytes = sum(len(f"node{i} says hi\n") + 200_000 + i for i in range(k))
    assert_all(comm, report.files == 2 * k and report.bytes == want_bytes
               and [n.node for n in report.nodes] == [f"node{i}" for i in range(k)],
               f"report: {report.files} files, {report.bytes} bytes, {report.nodes}")


@pytest.mark.mpi
def test_drain_refuses_to_overwrite_then_overwrites_when_asked(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    src, dest, k = _setup(comm, tmp)
    drain(src, dest, emulated(comm, k))
    victim = Path(dest, "node0", "common-0.txt")
    if comm.rank == 0:
        victim.write_bytes(b"edited by hand")
    comm.Barrier()
    _, err = _run(lambda: drain(src, dest, emulated(comm, k)), comm)
    assert_all(comm, isinstance(err, TransferError) and "--overwrite" in str(err)
               and "common-0.txt" in str(err), f"expected an overwrite refusal, got {err!r}")
    assert_all(comm, victim.read_bytes() == b"edited by hand", "refused drain still wrote")
    drain(src, dest, emulated(comm, k), overwrite=True)
    assert_all(comm, victim.read_bytes() == b"node0 says hi\n", "overwrite did not replace it")


@pytest.mark.mpi
def test_drain_merge_puts_unique_names_together(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    src, dest, k = _setup(comm, tmp, unique=True)
    report = drain(src, dest, emulated(comm, k), merge=True)
    names = sorted(str(p.relative_to(dest)) for p in Path(dest).rglob("*")
                   if p.is_file() and not p.name.startswith(RECORD_PREFIX))
    want = sorted([f"common-{i}.txt" for i in range(k)] + [f"sub/part-{i}.bin" for i in range(k)])
    assert_all(comm, names == want, f"merged layout {names} != {want}")
    assert report.merge and report.files == 2 * k


@pytest.mark.mpi
def test_drain_merge_conflict_fails_everywhere_and_writes_nothing(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    if comm.size < 2:
        pytest.skip("a name clash between nodes needs 2 emulated nodes, i.e. at least 2 ranks")
    src, dest, k = _setup(comm, tmp, unique=False)
    _, err = _run(lambda: drain(src, dest, emulated(comm, k), merge=True), comm)
    assert_all(comm, isinstance(err, TransferError) and "common.txt (node0/node1)" in str(err),
               f"expected a merge conflict, got {err!r}")
    written = [p for p in Path(dest).rglob("*") if p.is_file()] if os.path.isdir(dest) else []
    assert_all(comm, written == [], f"conflicting merge wrote {written}")


@pytest.mark.mpi
def test_drain_failure_on_one_node_is_agreed(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    src, dest, k = _setup(comm, tmp)
    last = f"node{k - 1}"
    if comm.rank == 0:
        # A directory where the last node's file must go: its copy fails, the others' do not.
        Path(dest, last, f"common-{k - 1}.txt").mkdir(parents=True)
    comm.Barrier()
    _, err = _run(lambda: drain(src, dest, emulated(comm, k), overwrite=True), comm)
    assert_all(comm, isinstance(err, TransferError) and "drain (copying) failed" in str(err)
               and f"common-{k - 1}.txt" in str(err), f"expected an agreed failure, got {err!r}")
    messages = comm.allgather(str(err))
    assert_all(comm, len(set(messages)) == 1, "ranks disagree on the error message")


@pytest.mark.mpi
def test_drain_symlink_in_results_fails_before_writing(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    src, dest, k = _setup(comm, tmp)
    if comm.rank == 0:
        Path(tmp, "local", "node0", "results", "link").symlink_to("/etc/hostname")
    comm.Barrier()
    _, err = _run(lambda: drain(src, dest, emulated(comm, k)), comm)
    assert_all(comm, isinstance(err, TransferError) and "link is a symlink" in str(err),
               f"expected a symlink refusal, got {err!r}")
    assert_all(comm, not os.path.exists(dest), "nothing may be written when listing fails")


@pytest.mark.mpi
def test_drain_missing_results(comm, tmp) -> None:
    from stager.stageout import drain
    from tests.mpiutil import assert_all
    k = min(2, comm.size)
    src = os.path.join(tmp, "none", "%n")
    _, err = _run(lambda: drain(src, os.path.join(tmp, "out"), emulated(comm, k)), comm)
    assert_all(comm, isinstance(err, TransferError) and "does not exist on any node" in str(err),
               f"got {err!r}")
    if k == 2:
        if comm.rank == 0:
            Path(tmp, "none", "node1").mkdir(parents=True)
            Path(tmp, "none", "node1", "r.txt").write_bytes(b"r")
        comm.Barrier()
        report = drain(src, os.path.join(tmp, "out"), emulated(comm, k))
        assert_all(comm, [n.missing for n in report.nodes] == [True, False] and report.files == 1,
                   f"unexpected report {report.nodes}")
