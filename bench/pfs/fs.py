"""The FUSE operations of the simulated PFS: a read-only passthrough that counts.

Every request the kernel sends reaches this object because the mount disables
the kernel's caches (``direct_io``, zero entry/attribute timeouts; see
`fuse_options`): each application ``read`` becomes one or more READ requests
charged to the shared `TokenBucket`, each ``stat``/``open``/``readdir`` one
request served by the `MetadataServer` (directory lookups are counted but
not charged; see `PassthroughPFS.getattr`). Per-file counters (bytes read, opens,
stats) and the totals are what `snapshot` returns and what the server writes
as JSON at unmount.
"""
from __future__ import annotations

import errno
import os
import stat
import threading
from collections import defaultdict
from typing import Any

import mfusepy

from .throttle import MetadataServer, TokenBucket

__all__ = ["PassthroughPFS", "fuse_options"]

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
            self.mds.serve()
            with self._lock:
                self._stats[path] += 1
        attrs = {key: getattr(st, key) for key in _STAT_KEYS}
        # Read-only filesystem: show no write bits.
        attrs["st_mode"] &= ~0o222
        for key in ("st_atime", "st_mtime", "st_ctime"):
            attrs[key] = getattr(st, key + "_ns")
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        self.mds.serve()
        with self._lock:
            self._readdirs[path] += 1
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path: str) -> str:
        self.mds.serve()
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._real(path))
        return {key: getattr(sv, key) for key in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
            "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    def open(self, path: str, flags: int) -> int:
        if flags & _WRITE_FLAGS:
            raise mfusepy.FuseOSError(errno.EROFS)
        self.mds.serve()
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
        data = os.pread(fh, size, offset)
        # Charge what is actually delivered, so bytes counted == tokens consumed.
        self.bucket.take(len(data))
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
            "files": files,
            "directories": dirs,
        }
