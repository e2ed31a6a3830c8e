"""The simulated PFS (bench/pfs): exact counters, shared cap, metadata server, clean unmount.

Serial tests. The FUSE ones need root and /dev/fuse (marker ``fuse``). No test
asserts a speed or a wall-clock time: the bucket's arithmetic is checked on a
fake clock, the mounts through the bucket's own accounting.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.pfs import (  # noqa: E402
    MetadataServer,
    PFSConfig,
    PFSError,
    SimulatedPFS,
    TokenBucket,
    fuse_mounts_under,
    is_mounted,
)
from bench.pfs.fs import ActivityClock  # noqa: E402

MiB = 1 << 20
CAN_FUSE = os.path.exists("/dev/fuse") and os.geteuid() == 0 and bool(
    subprocess.run(["which", "fusermount3"], capture_output=True, check=False).stdout)
needs_fuse = pytest.mark.skipif(not CAN_FUSE,
                                reason="needs /dev/fuse, fusermount3 (fuse3) and root")


# --- pure: the two shared resources ------------------------------------------
def test_bucket_consumes_exactly_what_is_taken():
    bucket = TokenBucket(None)
    sizes = [0, 1, 4096, 3 * MiB, 12345]
    for n in sizes:
        assert bucket.take(n) == 0.0
    st = bucket.stats()
    assert (st.consumed, st.requests, st.seconds_waited) == (sum(sizes), len(sizes), 0.0)


class FakeClock:
    """Stands in for ``time`` in bench.pfs.throttle: sleeping advances it, nothing else does."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    from bench.pfs import throttle
    fake = FakeClock()
    monkeypatch.setattr(throttle, "time", fake)
    return fake


def test_bucket_charges_debt_beyond_burst(clock):
    # 1 MB/s with a 1 MB burst: the first 1 MB is free, the next 0.05 MB costs 0.05 s of debt.
    bucket = TokenBucket(1e6, burst=1e6)
    assert bucket.take(1_000_000) == 0.0
    assert bucket.take(50_000) == pytest.approx(0.05)
    assert clock.now == pytest.approx(0.05)  # the caller slept its debt
    clock.now += 10.0  # an idle spell refills the bucket, but never beyond the burst
    assert bucket.take(1_000_000) == 0.0
    assert bucket.take(1) > 0.0
    st = bucket.stats()
    assert st.consumed == 2_050_001 and st.requests == 4
    assert st.seconds_waited == pytest.approx(0.05 + 1e-6)


@pytest.mark.parametrize("rate, burst", [(20e6, 1e6), (1e6, 0.0), (400e6, None)])
def test_bucket_never_passes_more_than_burst_plus_rate_times_time(clock, rate, burst):
    bucket = TokenBucket(rate, burst=burst)
    sizes = [131072, 4096, 1, 3 * MiB, 65536, 0, 777_777] * 3
    passed = 0
    for i, n in enumerate(sizes):
        bucket.take(n)
        passed += n
        # Everything let through so far fits in the burst plus what the rate earned.
        assert passed <= bucket.burst + rate * clock.now + 1e-3, i
        clock.now += 0.001 * (i % 3)  # some requests arrive after a pause
    assert bucket.stats().consumed == passed


def test_bucket_and_mds_reject_bad_values():
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(-1)
    with pytest.raises(ValueError, match="nbytes"):
        TokenBucket(1e6).take(-5)
    with pytest.raises(ValueError, match="slots"):
        MetadataServer(0.001, slots=0)
    with pytest.raises(ValueError, match="latency"):
        MetadataServer(-0.001)


def test_metadata_server_counts_ops_and_busy_time():
    mds = MetadataServer(0.001, slots=1)
    threads = [threading.Thread(target=mds.serve) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = mds.stats()
    assert st.ops == 6
    assert st.seconds_busy == pytest.approx(0.006)


def test_activity_clock_window_and_active_time():
    clock = ActivityClock()
    assert clock.snapshot() == {"first": None, "last": None, "active_s": 0.0}
    clock.begin()
    clock.begin()  # overlapping requests: one busy interval, not two
    clock.end()
    clock.end()
    clock.begin()
    clock.end()
    snap = clock.snapshot()
    assert snap["first"] is not None and snap["last"] is not None
    assert snap["last"] >= snap["first"]
    assert 0.0 <= snap["active_s"] <= snap["last"] - snap["first"]


def test_config_precedence_keyword_env_default():
    assert PFSConfig.resolve(env={}).bandwidth == 400e6
    assert PFSConfig.resolve(env={}).latency == 0.002
    env = {"SIMPFS_BANDWIDTH": "1e8", "SIMPFS_LATENCY": "0.01"}
    assert PFSConfig.resolve(env=env).bandwidth == 1e8
    assert PFSConfig.resolve(env=env, bandwidth=5e7).bandwidth == 5e7
    assert PFSConfig.resolve(env=env).latency == 0.01
    with pytest.raises(PFSError, match="SIMPFS_LATENCY"):
        PFSConfig.resolve(env={"SIMPFS_LATENCY": "fast"})
    with pytest.raises(PFSError, match="mds_slots"):
        PFSConfig(mds_slots=0)


# --- through a real FUSE mount -----------------------------------------------
@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "frames").mkdir(parents=True)
    (src / "small").mkdir()
    rng = os.urandom
    (src / "frames" / "a.bin").write_bytes(rng(3 * MiB + 17))
    (src / "frames" / "b.bin").write_bytes(rng(2 * MiB))
    for i in range(5):
        (src / "small" / f"s{i}.dat").write_bytes(rng(4096))
    return src, tmp_path / "mnt"


def _read_all(path: Path, block: int = 1 * MiB) -> int:
    n = 0
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(block):
            n += len(chunk)
    return n


@pytest.mark.fuse
@needs_fuse
def test_counters_are_exact(tree):
    src, mnt = tree
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=0, latency=0)) as pfs:
        assert (mnt / "frames" / "a.bin").read_bytes() == (src / "frames" / "a.bin").read_bytes()
        for _ in range(3):
            _read_all(mnt / "frames" / "b.bin")
        for _ in range(4):
            os.stat(mnt / "small" / "s0.dat")
        assert sorted(os.listdir(mnt / "small")) == [f"s{i}.dat" for i in range(5)]
    files = pfs.counters["files"]
    a, b = files["/frames/a.bin"], files["/frames/b.bin"]
    assert (a["bytes_read"], a["opens"]) == (3 * MiB + 17, 1)
    assert (b["bytes_read"], b["opens"]) == (3 * 2 * MiB, 3)
    # zero entry timeout: every path-based stat is one lookup, i.e. one counted stat.
    assert files["/small/s0.dat"] == {"bytes_read": 0, "opens": 0, "stats": 4}
    assert pfs.counters["directories"]["/small"]["readdirs"] == 1
    assert "/small" not in files and pfs.counters["directories"]["/small"]["stats"] >= 5
    totals = pfs.counters["totals"]
    assert totals["bytes_read"] == 3 * MiB + 17 + 6 * MiB
    assert totals["opens"] == 4


@pytest.mark.fuse
@needs_fuse
def test_bucket_accounting_matches_bytes_and_metadata_ops(tree):
    src, mnt = tree
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=200e6, latency=0.001)) as pfs:
        for p in sorted((mnt / "small").iterdir()):
            _read_all(p)
        _read_all(mnt / "frames" / "a.bin")
    c = pfs.counters
    assert c["bucket"]["tokens_consumed"] == c["totals"]["bytes_read"] == 5 * 4096 + 3 * MiB + 17
    assert c["bucket"]["requests"] == c["totals"]["read_requests"]
    ops = c["totals"]["stats"] + c["totals"]["opens"] + c["totals"]["readdirs"]
    assert c["metadata_server"]["ops"] == ops
    assert c["metadata_server"]["seconds_busy"] == pytest.approx(ops * 0.001)
    assert c["config"]["bandwidth"] == 200e6


@pytest.mark.fuse
@needs_fuse
def test_cap_is_shared_by_concurrent_readers(tree):
    """Two readers of a capped mount both draw on the one bucket."""
    src, mnt = tree
    rate, burst = 5e6, 1e6
    nbytes = {}

    def reader(name: str) -> None:
        nbytes[name] = _read_all(mnt / "frames" / name)

    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=rate, burst=burst, latency=0)) as pfs:
        threads = [threading.Thread(target=reader, args=(n,)) for n in ("a.bin", "b.bin")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    total = nbytes["a.bin"] + nbytes["b.bin"]
    assert total == 5 * MiB + 17
    # One bucket charged for both readers' bytes, and it made them wait: 4.2 MB beyond
    # the burst at 5 MB/s (the bucket's arithmetic itself is tested on a fake clock above).
    bucket = pfs.counters["bucket"]
    assert bucket["tokens_consumed"] == total
    assert bucket["requests"] == pfs.counters["totals"]["read_requests"]
    assert bucket["seconds_waited"] > 0


@pytest.mark.fuse
@needs_fuse
def test_busy_window_absent_until_used(tree):
    src, mnt = tree
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=0, latency=0)) as pfs:
        pass
    t = pfs.counters["timing"]
    keys = ("first_read", "last_read", "first_metadata_op", "last_metadata_op",
            "first_op", "last_op", "busy_s")
    assert {k: t[k] for k in keys} == dict.fromkeys(keys)
    assert (t["read_active_s"], t["metadata_active_s"], t["active_s"]) == (0.0, 0.0, 0.0)
    # Metadata only: the metadata window exists, the read window does not.
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=0, latency=0.001)) as pfs:
        os.stat(mnt / "small" / "s1.dat")
    t = pfs.counters["timing"]
    assert t["first_read"] is None and t["last_read"] is None
    assert t["last_metadata_op"] >= t["first_metadata_op"]
    assert (t["first_op"], t["last_op"]) == (t["first_metadata_op"], t["last_metadata_op"])


@pytest.mark.fuse
@needs_fuse
def test_busy_window_spans_first_to_last_request(tree):
    src, mnt = tree
    before = time.time()
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=50e6, latency=0.001)) as pfs:
        os.stat(mnt / "small" / "s0.dat")
        _read_all(mnt / "frames" / "a.bin")
        _read_all(mnt / "frames" / "b.bin")
    after = time.time()
    t = pfs.counters["timing"]
    assert before <= t["first_metadata_op"] <= t["first_read"] <= t["last_read"] <= after
    assert t["last_metadata_op"] >= t["first_metadata_op"]
    assert t["first_op"] == min(t["first_read"], t["first_metadata_op"])
    assert t["last_op"] == max(t["last_read"], t["last_metadata_op"])
    assert t["busy_s"] == pytest.approx(t["last_op"] - t["first_op"])
    # Active time is the part of the window with a request in service: never more.
    assert 0 < t["read_active_s"] <= t["last_read"] - t["first_read"]
    assert 0 < t["active_s"] <= t["busy_s"]


@pytest.mark.fuse
@needs_fuse
def test_mount_is_read_only(tree):
    src, mnt = tree
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=0, latency=0)):
        with pytest.raises(OSError) as info:
            with open(mnt / "frames" / "a.bin", "r+b"):
                pass
        assert info.value.errno in (errno.EROFS, errno.EACCES)
        with pytest.raises(OSError):
            (mnt / "new.txt").write_text("x")
    assert not (src / "new.txt").exists()


_HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from bench.pfs import SimulatedPFS, PFSConfig
    with SimulatedPFS({src!r}, {mnt!r}, PFSConfig(bandwidth=0, latency=0)):
        open({mnt!r} + "/frames/b.bin", "rb").read(10)
        print("mounted", flush=True)
        time.sleep(120)
""")


def _start_holder(src: Path, mnt: Path, **kw) -> subprocess.Popen[str]:
    code = _HOLDER.format(repo=str(REPO), src=str(src), mnt=str(mnt))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "mounted", proc.stderr.read() if proc.stderr else ""
    assert is_mounted(mnt)
    return proc


def _wait_unmounted(mnt: Path, limit: float = 15.0) -> bool:
    deadline = time.monotonic() + limit
    while is_mounted(mnt) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not is_mounted(mnt)


@pytest.mark.fuse
@needs_fuse
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_owner_leaves_no_mount_and_writes_counters(tree, sig):
    src, mnt = tree
    proc = _start_holder(src, mnt)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _wait_unmounted(mnt)
    assert fuse_mounts_under(mnt.parent) == []
    counters = json.loads((mnt.parent / ".mnt.counters.json").read_text())
    assert counters["files"]["/frames/b.bin"]["opens"] == 1


@pytest.mark.fuse
@needs_fuse
def test_killed_owner_daemon_unmounts_itself(tree):
    src, mnt = tree
    proc = _start_holder(src, mnt)
    proc.kill()  # no handler runs: the daemon's parent watch must clean up
    proc.wait(timeout=30)
    assert _wait_unmounted(mnt)


@pytest.mark.fuse
@needs_fuse
def test_stale_mount_is_replaced_and_cli_round_trip(tree):
    src, mnt = tree
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-m", "bench.pfs"]
    out = subprocess.run([*cli, "mount", str(src), str(mnt), "--latency", "0"], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    assert "mounted" in out.stdout and is_mounted(mnt)
    status = subprocess.run([*cli, "status", str(mnt.parent)], env=env, capture_output=True,
                            text=True, check=True, timeout=60)
    assert status.stdout.split() == [str(mnt)]
    # A second owner finds the stale mount, replaces it, and cleans up after itself.
    with SimulatedPFS(str(src), str(mnt), PFSConfig(bandwidth=0, latency=0)):
        assert _read_all(mnt / "frames" / "b.bin") == 2 * MiB
    assert not is_mounted(mnt)
    subprocess.run([*cli, "umount", str(mnt)], env=env, check=True, timeout=60)


def test_bad_source_is_a_clear_error(tmp_path):
    with pytest.raises(PFSError, match="not a directory"):
        SimulatedPFS(str(tmp_path / "missing"), str(tmp_path / "mnt")).start()
