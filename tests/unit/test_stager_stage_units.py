"""Pure pieces of the stager: task arithmetic, options, state, report meter, messages."""
import os

import pytest

from core.mpi.agree import describe, format_failures
from stager.errors import TransferError
from core.localfs import UnsafePathError
from stager.planning.plan import BlockPlan, FileEntry as Entry, Plan as Manifest
from stager.planning.kinds import options as kind_options
from stager.staging.options import StageOptions, resolve_options
from core.options import parse_size
from stager.staging.report import SourceMeter
from stager.nodelocal.roots import node_roots
from stager.staging.pipeline import node_targets
from stager.staging.transfer.tasks import (MAX_COUNT, chunk_ranges, make_tasks, owners_by_bytes,
                                           split_even)


def _check_tasks(sizes, n, chunk, thr, single=False):
    tasks = make_tasks(sizes, n, chunk, thr, single_reader=single)
    covered = {i: [] for i in range(len(sizes))}
    for t in tasks:
        assert t.nbytes <= chunk and t.nbytes <= MAX_COUNT
        assert len(t.counts) == n and sum(t.counts) == t.nbytes
        pos = 0
        for p in t.pieces:
            assert p.buf_offset == pos
            pos += p.length
            covered[p.file].append((p.offset, p.length))
        # each owner's pieces are contiguous, at its displacement, in rank order
        for r in range(n):
            mine = [p for p in t.pieces if p.owner == r]
            if mine:
                assert mine[0].buf_offset == t.displs[r]
                assert sum(p.length for p in mine) == t.counts[r]
            assert 0 <= t.displs[r] <= t.nbytes
        owners = [p.owner for p in t.pieces]
        assert owners == sorted(owners)
        if single:
            assert set(owners) == {0}
    for i, s in enumerate(sizes):
        spans = sorted(covered[i])
        assert sum(length for _, length in spans) == s
        pos = 0
        for off, length in spans:
            assert off == pos
            pos += length
        if s < thr:  # a small file is one piece: opened by one rank only
            assert len(spans) == 1
    return tasks


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_tasks_cover_every_byte_once(n):
    sizes = [0, 1, 5, 4096, 70_000, 1_000_000, 3, 0, 2_500_001, 10, 65_535]
    _check_tasks(sizes, n, chunk=1 << 20, thr=65_536)
    _check_tasks(sizes, n, chunk=1 << 20, thr=65_536, single=True)
    _check_tasks([0, 1, 5, 20, 3, 7, 8], n, chunk=7, thr=1)
    _check_tasks([0, 1, 5, 20, 3, 7, 8], n, chunk=7, thr=6)


def test_small_files_are_batched():
    tasks = _check_tasks([4096] * 10_000, 4, chunk=32 << 20, thr=1 << 20)
    assert len(tasks) == 2  # 8192 files per batch at most: not 10,000 rounds
    assert all(len({p.owner for p in t.pieces}) == 4 for t in tasks)


def test_huge_file_counts_stay_int32():
    size = 3 << 30
    tasks = make_tasks([size], 4, 1 << 30, 1 << 20)
    assert len(tasks) == 3
    assert all(c < 2**31 for t in tasks for c in t.counts)
    with pytest.raises(ValueError):
        make_tasks([1], 1, 2**31, 1)


def test_arithmetic_helpers():
    assert split_even(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert chunk_ranges(0, 4) == [(0, 0)]
    assert chunk_ranges(10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert owners_by_bytes([10, 10, 10, 10], 2) == [0, 0, 1, 1]
    assert owners_by_bytes([0, 0, 0], 2) == [0, 0, 1]
    assert owners_by_bytes([100, 1, 1], 2) == [0, 1, 1]


def test_options_precedence_and_strict_parsing():
    env = {"STAGER_METHOD": "bcast", "STAGER_CHUNK_SIZE": "4M", "STAGER_FORCE": "yes"}
    o = resolve_options(env=env)
    assert (o.method, o.chunk_size, o.force) == ("bcast", 4 << 20, True)
    o = resolve_options(env=env, method="naive", chunk_size=1024, force=False)
    assert (o.method, o.chunk_size, o.force) == ("naive", 1024, False)
    assert resolve_options(env={}) == StageOptions(
        kind_options={o.name: o.default for o in kind_options()})
    assert parse_size("32MiB") == parse_size("32M") == 32 << 20
    for bad in ({"method": "fast"}, {"chunk_size": "lots"}, {"chunk_size": 0},
                {"chunk_size": 2**31}, {"force": "maybe"}):
        with pytest.raises(ValueError):
            resolve_options(env={}, **bad)
    with pytest.raises(ValueError):
        resolve_options(env={"STAGER_METHOD": "fast"})
    with pytest.raises(TypeError, match="unknown"):
        resolve_options(env={}, methd="stripe")
    with pytest.raises(TypeError, match="unknown staging option"):   # the job's, not these
        resolve_options(env={}, node_id="emulate:2")


def test_meter_counts_only_metered_reads(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(os.urandom(300_000))
    m = SourceMeter()
    if not m.available:
        pytest.skip("/proc/self/io is not readable here")
    with open(p, "rb", buffering=0) as f:
        with m:
            f.read(100_000)
        f.read(200_000)  # not metered
    assert m.bytes == 100_000
    m.close()


def test_failure_messages_name_ranks_and_merge():
    msg = format_failures([(0, "h", "bad a"), (2, "h", "bad a"), (3, "g", "bad b")], "staging")
    assert msg == "staging failed: ranks 0,2 on h: bad a; rank 3 on g: bad b"
    assert describe(OSError(2, "No such file", "/x")).startswith("FileNotFoundError: ")
    assert describe(TransferError("plain")) == "plain"


def _manifest(dest, rel):
    return Manifest("s", (BlockPlan(dest=dest, kind="files", location="s:1:1"),),
                    {"files": (Entry(source="/s/x", dest=f"{dest}/{rel}", size=1, mode=0o644,
                                     mtime_ns=1),)})


def _targets(m, node):
    return node_targets(m, m.units("files"), node)


def test_node_targets_expand_and_refuse_escapes():
    t = _targets(_manifest("/l/%n/d", "a/x"), "node1")
    assert t.dests == ["/l/node1/d/a/x"] and t.roots == ["/l/node1/d"] and t.rels == ["a/x"]
    with pytest.raises(UnsafePathError):
        _targets(_manifest("/l/%n/d", "../../etc/x"), "node1")
    with pytest.raises(UnsafePathError, match="state directory"):
        _targets(_manifest("/l/%n/d", ".stager/lock"), "node1")
    assert _targets(_manifest("/l/%n/d", "a/.stager"), "node1").rels == ["a/.stager"]
    # only the block's template is expanded: a source named run%n.dat keeps its name
    t = _targets(_manifest("/l/%n/d", "run%n.dat"), "node1")
    assert t.dests == ["/l/node1/d/run%n.dat"]
    assert node_roots(["/a/%n", "/a/%n/", "/b"], "n0") == ["/a/n0", "/b"]
