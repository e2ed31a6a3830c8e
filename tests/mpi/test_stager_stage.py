"""Collective staging under mpirun: copies, resume, verify, clean, capacity, failures.

Every test works at any rank count (1..4); node counts above ``comm.size``
are skipped. Rank 0 builds the data and checks every node's directory (the
emulated nodes share this machine's /tmp).
"""
import os
import shutil
import stat
import subprocess

import pytest

from tests.mpiutil import assert_all, emulated, shared_tmpdir

pytestmark = pytest.mark.mpi

CHUNK = 256 << 10      # small, so files span several chunks
SMALL = 64 << 10       # below this: batched


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.fixture
def workdir():
    comm = _comm()
    d = shared_tmpdir(comm, "mpistage-stage-")
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _make_dataset(d, comm):
    """Nested sources (for ``**``), sizes around chunk/threshold edges, modes and mtimes."""
    files = {}
    if comm.rank == 0:
        rng = __import__("random").Random(7)
        layout = {"top.cfg": 300, "a/empty.bin": 0, "a/one.bin": 1, "a/b/small.bin": 4096,
                  "a/b/edge.bin": SMALL, "a/b/c/big.bin": 3 * CHUNK + 17,
                  "a/exact.bin": 2 * CHUNK, "z/many/0.bin": 10}
        for i in range(40):
            layout[f"z/many/{i}.bin"] = rng.randrange(0, 9000)
        for k, (rel, size) in enumerate(sorted(layout.items())):
            p = os.path.join(d, "src", rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(os.urandom(size))
            os.chmod(p, [0o644, 0o600, 0o755, 0o440][k % 4])
            os.utime(p, ns=(1_500_000_000_000_000_000 + k, 1_500_000_000_000_000_000 + k * 1001))
            files[rel] = p
    spec = os.path.join(d, "stage.hook")
    if comm.rank == 0:
        with open(spec, "w") as f:
            f.write(f"broadcast to {d}/nodes/%n/data files {{\n  {d}/src/**/*.bin\n}}\n"
                    f"broadcast to {d}/nodes/%n/etc files {{\n  {d}/src/top.cfg\n}}\n")
    comm.Barrier()
    return spec, comm.bcast(files, root=0)


def _dest(d, node, rel):
    return os.path.join(d, "nodes", node, "etc" if rel == "top.cfg" else "data", rel)


def _check_copies(d, files, nodes):
    """Rank 0: every node has byte-identical copies with mode and mtime kept."""
    bad = []
    for node in nodes:
        for rel, src in files.items():
            dst = _dest(d, node, rel)
            try:
                s, t = os.stat(src), os.lstat(dst)
            except FileNotFoundError:
                bad.append(f"{node}: {rel} missing")
                continue
            if open(src, "rb").read() != open(dst, "rb").read():
                bad.append(f"{node}: {rel} differs")
            if stat.S_IMODE(s.st_mode) != stat.S_IMODE(t.st_mode) or s.st_mtime_ns != t.st_mtime_ns:
                bad.append(f"{node}: {rel} mode/mtime not kept")
        leftovers = [n for _, _, fs in os.walk(os.path.join(d, "nodes", node)) for n in fs
                     if ".stager-tmp-" in n]
        if leftovers:
            bad.append(f"{node}: temporary files left: {leftovers}")
    return bad


def _nodes_or_skip(comm, k):
    if k > comm.size:
        pytest.skip(f"{k} emulated nodes need at least {k} ranks (running {comm.size})")


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("method, shared", [("stripe", True), ("stripe", False),
                                            ("readall", True), ("bcast", True),
                                            ("bcast", False), ("naive", True)])
def test_every_method_replicates_byte_identical_copies(workdir, method, shared, k):
    """``shared``: emulated leaders exchange through a shared-memory window (the default
    on one host) or, as leaders on different hosts do, with messages."""
    from stager import clean, stage
    comm = _comm()
    _nodes_or_skip(comm, k)
    spec, files = _make_dataset(workdir, comm)
    rep = stage(spec, emulated(comm, k), method=method, chunk_size=CHUNK,
                small_file_threshold=SMALL, progress=False, shared_exchange=shared)
    want = ("shared memory" if shared and k > 1 and method in ("stripe", "bcast")
            else {"stripe": "Iallgatherv", "bcast": "Ibcast", "readall": "Read_at_all",
                  "naive": "none"}[method])
    assert_all(comm, rep.extra["files"]["exchange"].startswith(want), str(rep.extra))
    bad = _check_copies(workdir, files, rep.nodes) if comm.rank == 0 else []
    assert_all(comm, not bad, "; ".join(bad[:5]))
    total = sum(os.path.getsize(p) for p in files.values()) if comm.rank == 0 else 0
    total = comm.bcast(total, root=0)
    assert_all(comm, rep.nodes == tuple(f"node{i}" for i in range(k)), str(rep.nodes))
    got = (rep.files, rep.bytes_per_node, rep.bytes_written)
    assert_all(comm, got == (len(files), total, k * total), str(rep))
    # the plan it staged travels with the report (what runs next needs not plan again),
    # but not into the JSON report
    staged = {u.dest for u in rep.plan.units("files")} if rep.plan is not None else set()
    assert_all(comm, len(staged) == len(files) and "plan" not in rep.to_dict(), str(staged))
    amp = rep.amplification
    if amp is not None:  # /proc/self/io readable: the measured fact, per method
        expected = {"stripe": (1.0, 1.0), "bcast": (1.0, 1.0), "naive": (k, k),
                    "readall": (1.0, k)}[method]
        ok = expected[0] - 0.01 <= amp <= expected[1] + 0.01
        assert_all(comm, ok, f"{method} on {k} node(s): amplification {amp}")
    clean(spec, emulated(comm, k))
    comm.Barrier()
    gone = not os.path.exists(os.path.join(workdir, "nodes")) if comm.rank == 0 else True
    assert_all(comm, gone, "clean left the nodes directory behind")


def test_resume_skips_unchanged_and_force_restages(workdir):
    from stager import stage, verify
    comm = _comm()
    k = min(2, comm.size)
    spec, files = _make_dataset(workdir, comm)
    kw = dict(chunk_size=CHUNK, small_file_threshold=SMALL, progress=False)
    job = emulated(comm, k)
    first = stage(spec, job, **kw)
    assert_all(comm, first.files_skipped == 0 and first.files_transferred == len(files), str(first))
    again = stage(spec, job, **kw)
    assert_all(comm, again.files_skipped == len(files) and again.bytes_written == 0, str(again))
    if comm.rank == 0:  # one source changes: only it moves
        p = files["a/b/small.bin"]
        os.utime(p, ns=(1, 2))
    comm.Barrier()
    third = stage(spec, job, **kw)
    assert_all(comm, third.files_transferred == 1 and third.bytes_written == 4096 * k, str(third))
    if comm.rank == 0:  # a copy removed on one node: the file moves again, to that node only
        os.unlink(_dest(workdir, f"node{k - 1}", "a/b/c/big.bin"))
    comm.Barrier()
    fourth = stage(spec, job, **kw)
    assert_all(comm, fourth.files_transferred == 1 and fourth.bytes_written == 3 * CHUNK + 17,
               str(fourth))
    # every node's state has a correct checksum for every file, including the one
    # re-sent to one node only (its checksum may come from a leader that did not write it)
    checked = verify(spec, job)
    assert_all(comm, checked.files_checked == k * len(files), str(checked))
    forced = stage(spec, job, force=True, **kw)
    ok = forced.files_skipped == 0 and forced.files_transferred == len(files)
    assert_all(comm, ok, str(forced))
    bad = _check_copies(workdir, files, forced.nodes) if comm.rank == 0 else []
    assert_all(comm, not bad, "; ".join(bad[:5]))


def test_verify_catches_a_flipped_byte(workdir):
    from stager import stage, verify
    from stager.errors import VerifyError
    comm = _comm()
    k = min(2, comm.size)
    spec, files = _make_dataset(workdir, comm)
    stage(spec, emulated(comm, k), chunk_size=CHUNK, small_file_threshold=SMALL, progress=False)
    ok = verify(spec, emulated(comm, k))
    assert_all(comm, ok.files_checked == k * len(files), str(ok))
    victim = _dest(workdir, f"node{k - 1}", "a/b/c/big.bin")
    if comm.rank == 0:
        with open(victim, "r+b") as f:
            f.seek(CHUNK + 5)
            b = f.read(1)
            f.seek(CHUNK + 5)
            f.write(bytes([b[0] ^ 0x01]))
    comm.Barrier()
    with pytest.raises(VerifyError) as info:
        verify(spec, emulated(comm, k))
    msgs = comm.allgather(str(info.value))
    assert_all(comm, len(set(msgs)) == 1, "ranks got different verify errors")
    assert_all(comm, f"node node{k - 1}: {victim}" in msgs[0], msgs[0])
    assert_all(comm, [m.path for m in info.value.mismatches] == [victim], msgs[0])


def test_clean_removes_exactly_what_was_staged(workdir):
    from stager import clean, stage
    comm = _comm()
    spec, files = _make_dataset(workdir, comm)
    foreign = os.path.join(workdir, "nodes", "node0", "data", "a", "mine.txt")
    if comm.rank == 0:
        os.makedirs(os.path.dirname(foreign), mode=0o700)
        with open(foreign, "w") as f:
            f.write("not staged")
    comm.Barrier()
    stage(spec, emulated(comm, 1), progress=False)
    rep = clean(spec, emulated(comm, 1))
    assert_all(comm, rep.files_removed == len(files), str(rep))
    if comm.rank == 0:
        left = sorted(os.path.relpath(os.path.join(r, f), workdir)
                      for r, _, fs in os.walk(os.path.join(workdir, "nodes")) for f in fs)
        ok = (left == ["nodes/node0/data/a/mine.txt"]
              and not os.path.exists(os.path.join(workdir, "nodes", "node0", "etc")))
    else:
        ok, left = True, []
    assert_all(comm, ok, f"left after clean: {left}")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_tiny_tmpfs_fails_capacity_check_before_any_write(workdir):
    from stager import stage
    from stager.errors import CapacityError
    comm = _comm()
    k = min(2, comm.size)
    mnt = os.path.join(workdir, "mnt")
    mounted = False
    if comm.rank == 0:
        os.mkdir(mnt)
        for i in range(3):  # 9 MiB per node > 8 MiB tmpfs
            os.makedirs(os.path.join(workdir, "src"), exist_ok=True)
            with open(os.path.join(workdir, "src", f"f{i}.bin"), "wb") as f:
                f.truncate(3 << 20)
        with open(os.path.join(workdir, "tiny.hook"), "w") as f:
            f.write(f"broadcast to {mnt}/%n files {{\n  {workdir}/src/*.bin\n}}\n")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt],
                           capture_output=True, text=True)
        mounted = r.returncode == 0
        why = r.stderr.strip()
    else:
        why = ""
    mounted = comm.bcast(mounted, root=0)
    why = comm.bcast(why, root=0)
    if not mounted:
        pytest.skip(f"mount -t tmpfs failed here: {why}")
    try:
        with pytest.raises(CapacityError) as info:
            stage(os.path.join(workdir, "tiny.hook"), emulated(comm, k), progress=False)
        msg = str(info.value)
        msgs = comm.allgather(msg)
        assert_all(comm, len(set(msgs)) == 1, "ranks got different capacity errors")
        assert_all(comm, "node node0" in msg and f"{mnt}/node0" in msg and "short by" in msg, msg)
        written = os.listdir(mnt) if comm.rank == 0 else []
        assert_all(comm, written == [], f"capacity failure still wrote: {written}")
    finally:
        comm.Barrier()
        if comm.rank == 0:
            subprocess.run(["umount", mnt], check=False)


def test_planted_symlink_is_refused_and_its_target_untouched(workdir):
    from stager import stage
    from stager.errors import TransferError
    comm = _comm()
    k = min(2, comm.size)
    spec, files = _make_dataset(workdir, comm)
    victim = os.path.join(workdir, "victim.txt")
    link = _dest(workdir, f"node{k - 1}", "a/one.bin")
    if comm.rank == 0:
        with open(victim, "w") as f:
            f.write("precious")
        os.makedirs(os.path.dirname(link), mode=0o700)
        os.symlink(victim, link)
    comm.Barrier()
    with pytest.raises(TransferError) as info:
        stage(spec, emulated(comm, k), progress=False)
    msg = str(info.value)
    assert_all(comm, len(set(comm.allgather(msg))) == 1, "ranks got different errors")
    assert_all(comm, f"node node{k - 1}" in msg and link in msg and "symlink" in msg, msg)
    ok = open(victim).read() == "precious" and os.path.islink(link) if comm.rank == 0 else True
    assert_all(comm, ok, "the symlink's target was modified or the link replaced")


@pytest.mark.parametrize("method, shared", [("stripe", True), ("stripe", False),
                                            ("readall", True), ("bcast", True),
                                            ("naive", True)])
@pytest.mark.parametrize("how", ["removed", "grown"])
def test_bad_source_fails_on_every_rank_without_hang(workdir, method, shared, how):
    from stager import stage
    from stager.errors import TransferError
    from stager import plan
    from core.mpi.agree import bcast_result
    comm = _comm()
    k = min(2, comm.size)
    spec, files = _make_dataset(workdir, comm)
    manifest = bcast_result(comm, plan, spec)  # planned now (rank 0), source broken afterwards
    broken = files["a/b/c/big.bin" if method != "naive" else "a/b/small.bin"]
    if comm.rank == 0:
        if how == "removed":
            os.unlink(broken)
        else:
            with open(broken, "ab") as f:
                f.write(b"more")
    comm.Barrier()
    with pytest.raises(TransferError) as info:
        stage(manifest, emulated(comm, k), method=method, chunk_size=CHUNK,
              small_file_threshold=SMALL, progress=False, shared_exchange=shared)
    msg = str(info.value)
    assert_all(comm, len(set(comm.allgather(msg))) == 1, "ranks got different errors")
    assert_all(comm, broken in msg and "rank " in msg, msg)
    if comm.rank == 0:
        leftovers = [n for _, _, fs in os.walk(os.path.join(workdir, "nodes")) for n in fs
                     if ".stager-tmp-" in n]
    else:
        leftovers = []
    assert_all(comm, leftovers == [], f"temporary files left: {leftovers}")


def test_errors_before_any_collective_are_the_same_everywhere(workdir):
    from stager import stage
    from stager.errors import PlanError
    comm = _comm()
    with pytest.raises(ValueError, match="emulated nodes"):
        stage("unused.hook", emulated(comm, comm.size + 1))
    with pytest.raises(ValueError, match="method"):
        stage("unused.hook", comm, method="teleport")
    spec = os.path.join(workdir, "nomatch.hook")
    if comm.rank == 0:
        with open(spec, "w") as f:
            f.write(f"broadcast to {workdir}/out files {{\n  {workdir}/nothing/*.bin\n}}\n")
    comm.Barrier()
    with pytest.raises(PlanError) as info:
        stage(spec, comm, progress=False)
    assert_all(comm, len(set(comm.allgather(str(info.value)))) == 1, str(info.value))


def test_node_layouts():
    from core.nodes import node_layout
    comm = _comm()
    lay = node_layout(comm, "host")  # one machine: one shared-memory node
    assert_all(comm, lay.n_nodes == 1 and lay.is_leader == (comm.rank == 0), str(lay))
    lay.free()
    os.environ["MPISTAGE_TEST_NODE"] = f"n{comm.rank % 2}"
    try:
        lay = node_layout(comm, "env:MPISTAGE_TEST_NODE")
    finally:
        del os.environ["MPISTAGE_TEST_NODE"]
    want_n = min(2, comm.size)
    ok = (lay.n_nodes == want_n and lay.name == f"n{comm.rank % 2}"
          and lay.is_leader == (comm.rank < 2) and lay.leader_ranks == tuple(range(want_n))
          and lay.node_comm.size == len(range(comm.rank % 2, comm.size, 2)))
    if lay.is_leader:
        ok = ok and lay.leader_comm.size == want_n and lay.leader_comm.rank == lay.index
    assert_all(comm, ok, str(lay))
    lay.free()
    from core.errors import JobError
    if comm.rank == comm.size - 1:
        os.environ["MPISTAGE_TEST_NODE"] = "x"
    try:
        with pytest.raises(JobError, match="unset") if comm.size > 1 else _nullctx():
            node_layout(comm, "env:MPISTAGE_TEST_NODE").free()
    finally:
        os.environ.pop("MPISTAGE_TEST_NODE", None)


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_agreement_names_the_failing_rank():
    from core.mpi.agree import agreed
    from stager.errors import StagerError, TransferError
    comm = _comm()
    last = comm.size - 1
    with pytest.raises(TransferError) as info:
        with agreed(comm, "phase", default=TransferError):
            if comm.rank == last:
                open("/nonexistent/mpistage-file")
    msg = str(info.value)
    assert_all(comm, f"rank {last} on " in msg and "/nonexistent/mpistage-file" in msg, msg)
    with agreed(comm, "quiet phase"):
        pass
    with pytest.raises(StagerError):
        with agreed(comm, "phase"):
            if comm.rank == 0:
                raise StagerError("only rank 0")


@pytest.mark.slow
def test_sparse_file_over_2gib(workdir):
    """A file larger than 2 GiB: every count stays below 2**31 (destinations under /tmp).
    2 GiB and 1 MiB: a byte on each side of 2**31 and one past it (a third GiB of zeros
    went through the same pieces)."""
    from stager import clean, stage
    from core import checksum
    from tests.stagerun import read_record
    from stager.planning import spec_key
    comm = _comm()
    k = min(2, comm.size)
    src = os.path.join(workdir, "src", "sparse.bin")
    size = (2 << 30) + (1 << 20)
    marks = [0, (2 << 30) - 1, 2 << 30, size - 1]
    if comm.rank == 0:
        os.makedirs(os.path.dirname(src))
        with open(src, "wb") as f:
            f.truncate(size)
            for m in marks:
                f.seek(m)
                f.write(b"\xa5")
        with open(os.path.join(workdir, "big.hook"), "w") as f:
            f.write(f"broadcast to {workdir}/nodes/%n files {{\n  {src}\n}}\n")
    comm.Barrier()
    spec = os.path.join(workdir, "big.hook")
    try:
        rep = stage(spec, emulated(comm, k), progress=False)
        assert_all(comm, rep.bytes_written == k * size, str(rep))
        if comm.rank == 0:
            want = checksum.file_hexdigest(src)
            bad = []
            for node in rep.nodes:
                dst = os.path.join(workdir, "nodes", node, "sparse.bin")
                with open(dst, "rb") as f:
                    for m in marks:
                        f.seek(m)
                        if f.read(1) != b"\xa5":
                            bad.append(f"{node}: byte {m}")
                if os.path.getsize(dst) != size:
                    bad.append(f"{node}: size")
                rec = read_record(os.path.dirname(dst), spec_key(spec)).files["sparse.bin"]
                if rec.checksum != want:
                    bad.append(f"{node}: checksum")
        else:
            bad = []
        assert_all(comm, not bad, "; ".join(bad))
    finally:
        clean(spec, emulated(comm, k))
