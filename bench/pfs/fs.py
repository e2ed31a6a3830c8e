"""The FUSE operations of the simulated PFS: a read-only passthrough that counts.

Every request the kernel sends reaches this object because the mount disables
the kernel's caches (``direct_io``, zero entry/attribute timeouts; see
`fuse_options`): each application ``read`` becomes one or more READ requests
charged to the shared `TokenBucket`, each ``stat``/``open``/``readdir`` one
request served by the `MetadataServer` (directory lookups are counted but
not charged; see `PassthroughPFS.getattr`). Per-file counters (bytes read, opens,
stats) and the totals are what `snapshot` returns and what the server writes
as JSON at unmount, with the PFS's *busy window*: wall-clock times of the first
and last data read and the first and last charged metadata operation (see
`ActivityClock`), from which a benchmark gets how long the shared filesystem
was serving a method -- the paper's "input time".
"""
from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections import defaultdict
from typing import Any

import mfusepy

from .throttle import MetadataServer, TokenBucket

__all__ = ["ActivityClock", "PassthroughPFS", "fuse_options"]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_STAT_KEYS = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev",
              "st_blocks", "st_blksize")


def fuse_options(max_threads: int = 64) -> dict[str, Any]:
    """Mount options that make every application request visible to the simulator.

    ``direct_io`` stops the kernel page cache from answering repeat reads (on a
    real PFS, N nodes reading one file is N reads of the servers, not one);
    zero timeouts make every path lookup and stat a request. ``max_threads``
    lets many readers wait on the shared bucket at once instead of queueing on
    libfuse's default of 10 worker threads.
    """
    return {
        "ro": True,
        "direct_io": True,
        "entry_timeout": 0,
        "attr_timeout": 1.0,
        "negative_timeout": 0,
        "max_threads": max_threads,
        "fsname": "simpfs",
        "subtype": "simpfs",
    }


class ActivityClock:
    """First start, last end and time with at least one request in flight, per kind.

    Times are ``time.time()`` (Unix epoch seconds), so another process can
    relate them to its own clock. ``first`` is when the earliest request
    arrived, ``last`` when the latest one finished (a read's bandwidth wait
    included), and ``active_s`` the union of the intervals with at least one
    request of that kind in service: ``last - first`` minus the idle gaps.
    Nothing served means all three are ``None`` / 0.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first: float | None = None
        self.last: float | None = None
        self.active_s = 0.0
        self._in_flight = 0
        self._since = 0.0

    def begin(self) -> None:
        now = time.time()
        with self._lock:
            if self.first is None:
                self.first = now
            if self._in_flight == 0:
                self._since = now
            self._in_flight += 1

    def end(self) -> None:
        now = time.time()
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.active_s += now - self._since
            self.last = now if self.last is None else max(self.last, now)

    def snapshot(self) -> dict[str, float | None]:
        with self._lock:
            return {"first": self.first, "last": self.last, "active_s": self.active_s}


def _window(*clocks: dict[str, float | None]) -> dict[str, float | None]:
    firsts = [c["first"] for c in clocks if c["first"] is not None]
    lasts = [c["last"] for c in clocks if c["last"] is not None]
    first, last = (min(firsts), max(lasts)) if firsts and lasts else (None, None)
    return {"first": first, "last": last,
            "busy_s": None if first is None or last is None else last - first}


class PassthroughPFS(mfusepy.Operations):
    """Read-only view of ``source`` with a bandwidth cap, metadata latency and counters.

    Parameters
    ----------
    source : str
        Directory whose tree the mount shows.
    bucket : TokenBucket
        Shared aggregate bandwidth cap (charged per READ request).
    mds : MetadataServer
        Shared metadata service time (charged per getattr/lookup, open, readdir).
    """

    use_ns = True

    def __init__(self, source: str, bucket: TokenBucket, mds: MetadataServer) -> None:
        self.source = os.path.realpath(source)
        self.bucket = bucket
        self.mds = mds
        self._lock = threading.Lock()
        self._bytes: defaultdict[str, int] = defaultdict(int)
        self._opens: defaultdict[str, int] = defaultdict(int)
        self._stats: defaultdict[str, int] = defaultdict(int)
        self._readdirs: defaultdict[str, int] = defaultdict(int)
        self._dir_stats: defaultdict[str, int] = defaultdict(int)
        self._reads = 0
        self._fds: dict[int, str] = {}
        self.read_clock = ActivityClock()
        self.metadata_clock = ActivityClock()
        # Requests of either kind: the shared filesystem was "serving" in this window.
        self.any_clock = ActivityClock()

    def _serve_metadata(self) -> None:
        for clock in (self.metadata_clock, self.any_clock):
            clock.begin()
        try:
            self.mds.serve()
        finally:
            for clock in (self.metadata_clock, self.any_clock):
                clock.end()

    def _real(self, path: str) -> str:
        # The kernel hands us absolute paths below the mount root; ".." never
        # reaches a FUSE daemon, so joining cannot escape ``source``.
        return os.path.join(self.source, path.lstrip("/"))

    # --- metadata: each call is one metadata-server operation ----------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        if stat.S_ISDIR(st.st_mode):
            # Counted, not charged: a real client caches a directory's entry under a
            # lock after its first lookup, but here one kernel serves every emulated
            # node with zero timeouts, so each path walk re-looks-up every directory.
            with self._lock:
                self._dir_stats[path] += 1
        else:
            self._serve_metadata()
            with self._lock:
                self._stats[path] += 1
        attrs = {key: getattr(st, key) for key in _STAT_KEYS}
        # Read-only filesystem: show no write bits.
        attrs["st_mode"] &= ~0o222
        for key in ("st_atime", "st_mtime", "st_ctime"):
            attrs[key] = getattr(st, key + "_ns")
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        self._serve_metadata()
        with self._lock:
            self._readdirs[path] += 1
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path: str) -> str:
        self._serve_metadata()
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._real(path))
        return {key: getattr(sv, key) for key in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
            "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    def open(self, path: str, flags: int) -> int:
        if flags & _WRITE_FLAGS:
            raise mfusepy.FuseOSError(errno.EROFS)
        self._serve_metadata()
        fd = os.open(self._real(path), os.O_RDONLY)
        with self._lock:
            self._opens[path] += 1
            self._fds[fd] = path
        return fd

    def release(self, path: str, fh: int) -> int:
        with self._lock:
            self._fds.pop(fh, None)
        os.close(fh)
        return 0

    # --- data: every byte passes the shared bucket ---------------------------
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        for clock in (self.read_clock, self.any_clock):
            clock.begin()
        try:
            data = os.pread(fh, size, offset)
            # Charge what is actually delivered, so bytes counted == tokens consumed.
            self.bucket.take(len(data))
        finally:
            for clock in (self.read_clock, self.any_clock):
                clock.end()
        with self._lock:
            self._bytes[self._fds.get(fh, path)] += len(data)
            self._reads += 1
        return data

    # --- read-only: refuse every modification --------------------------------
    def _rofs(self, *args: Any, **kwargs: Any) -> int:
        raise mfusepy.FuseOSError(errno.EROFS)

    create = mkdir = unlink = rmdir = rename = write = truncate = _rofs
    chmod = chown = symlink = link = mknod = utimens = _rofs

    # --- reporting -----------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Counters so far as plain JSON-able data."""
        bucket = self.bucket.stats()
        mds = self.mds.stats()
        with self._lock:
            paths = sorted(set(self._bytes) | set(self._opens) | set(self._stats))
            files = {p: {"bytes_read": self._bytes.get(p, 0), "opens": self._opens.get(p, 0),
                         "stats": self._stats.get(p, 0)} for p in paths}
            dirs = {p: {"stats": self._dir_stats.get(p, 0), "readdirs": self._readdirs.get(p, 0)}
                    for p in sorted(set(self._dir_stats) | set(self._readdirs))}
            reads = self._reads
        read_t, meta_t, any_t = (c.snapshot() for c in
                                 (self.read_clock, self.metadata_clock, self.any_clock))
        window = _window(read_t, meta_t)
        return {
            "source": self.source,
            "totals": {
                "bytes_read": sum(f["bytes_read"] for f in files.values()),
                "opens": sum(f["opens"] for f in files.values()),
                "stats": sum(f["stats"] for f in files.values()),
                "readdirs": sum(d["readdirs"] for d in dirs.values()),
                "dir_stats": sum(d["stats"] for d in dirs.values()),
                "read_requests": reads,
            },
            "bucket": {"rate": bucket.rate, "burst": bucket.burst,
                       "tokens_consumed": bucket.consumed, "requests": bucket.requests,
                       "seconds_waited": bucket.seconds_waited},
            "metadata_server": {"latency": mds.latency, "slots": mds.slots, "ops": mds.ops,
                                "seconds_busy": mds.seconds_busy},
            # Busy window of the shared filesystem (time.time() seconds): first
            # request in, last request out, and seconds with a request in service.
            "timing": {
                "clock": "time.time() (Unix epoch seconds)",
                "first_read": read_t["first"], "last_read": read_t["last"],
                "read_active_s": read_t["active_s"],
                "first_metadata_op": meta_t["first"], "last_metadata_op": meta_t["last"],
                "metadata_active_s": meta_t["active_s"],
                "first_op": window["first"], "last_op": window["last"],
                "busy_s": window["busy_s"],
                "active_s": any_t["active_s"],
            },
            "files": files,
            "directories": dirs,
        }
