"""Start, serve and stop a simulated PFS mount, and never leave one behind.

The FUSE daemon runs in its own process (multithreaded libfuse, so concurrent
readers compete for its one token bucket and one metadata server), started in
a new session so a terminal's Ctrl-C reaches only the benchmark, which then
unmounts cleanly and collects the counters. Unmounting falls back from
``fusermount3 -u`` to a lazy ``fusermount3 -uz`` and ``umount -l``, and the
daemon unmounts itself if its parent dies, so an interrupted or killed
benchmark leaves no mount.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "PFSConfig",
    "PFSError",
    "SimulatedPFS",
    "force_unmount",
    "fuse_mounts_under",
    "is_mounted",
    "serve",
]

_REPO = Path(__file__).resolve().parents[2]
_ENV_PREFIX = "SIMPFS_"


class PFSError(RuntimeError):
    """The simulated PFS could not be mounted or unmounted."""


def _parse_env(env: Mapping[str, str], name: str, kind: type) -> Any:
    raw = env.get(_ENV_PREFIX + name.upper())
    if raw is None or raw == "":
        return None
    try:
        return kind(raw)
    except ValueError as exc:
        raise PFSError(f"{_ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind.__name__}; "
                       f"unset it or give a number") from exc


@dataclass(frozen=True)
class PFSConfig:
    """How the simulated PFS behaves.

    Attributes
    ----------
    bandwidth : float
        Aggregate read cap in bytes/s shared by all readers; 0 = no cap.
    latency : float
        Service time of one metadata operation (stat/lookup, open, readdir), s.
    mds_slots : int
        Metadata operations served at once (1 = a single saturated server).
    burst : float or None
        Token bucket depth in bytes (default 10 ms of ``bandwidth``, >= 1 MiB).
    max_threads : int
        libfuse worker threads.
    allow_other : bool
        Mount with ``-o allow_other`` (needed only if readers run as another user).
    """

    bandwidth: float = 400e6
    latency: float = 0.002
    mds_slots: int = 1
    burst: float | None = None
    max_threads: int = 64
    allow_other: bool = False

    def __post_init__(self) -> None:
        if self.bandwidth < 0 or self.latency < 0:
            raise PFSError(f"bandwidth and latency must be >= 0 "
                           f"(got {self.bandwidth}, {self.latency})")
        if self.mds_slots < 1 or self.max_threads < 1:
            raise PFSError(f"mds_slots and max_threads must be >= 1 "
                           f"(got {self.mds_slots}, {self.max_threads})")

    @classmethod
    def resolve(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> PFSConfig:
        """Keyword > ``SIMPFS_BANDWIDTH``/``_LATENCY``/``_MDS_SLOTS`` > default."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, kind in (("bandwidth", float), ("latency", float), ("mds_slots", int)):
            from_env = _parse_env(env, name, kind)
            if from_env is not None:
                values[name] = from_env
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values)


# --- mount table -------------------------------------------------------------
def _unescape(field_: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    return field_.encode().decode("unicode_escape").encode("latin-1").decode()


def fuse_mounts_under(directory: str | os.PathLike[str]) -> list[str]:
    """Mount points of FUSE filesystems at or below ``directory``."""
    root = os.path.realpath(directory)
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            point = _unescape(left.split()[4])
            fstype = right.split()[0] if right else ""
            if fstype.startswith("fuse") and (point == root or point.startswith(root + os.sep)):
                found.append(point)
    return found


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    """True if a FUSE filesystem is mounted exactly at ``mountpoint``."""
    point = os.path.realpath(mountpoint)
    return point in fuse_mounts_under(point)


def force_unmount(mountpoint: str | os.PathLike[str], grace: float = 2.0) -> None:
    """Unmount ``mountpoint`` by whatever works: normal, then lazy, then ``umount -l``."""
    point = os.path.realpath(mountpoint)
    deadline = time.monotonic() + grace
    while is_mounted(point):
        subprocess.run(["fusermount3", "-u", "-q", point], check=False, capture_output=True)
        if not is_mounted(point) or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # busy: a reader still has a file open; give it a moment
    if is_mounted(point):
        subprocess.run(["fusermount3", "-u", "-z", "-q", point], check=False, capture_output=True)
    if is_mounted(point) and shutil.which("umount"):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    if is_mounted(point):
        raise PFSError(f"could not unmount {point}; run `umount -l {point}` as root")


# --- the daemon side ---------------------------------------------------------
def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _watch_parent(mountpoint: str, parent: int) -> None:
    # An orphaned daemon would keep its mount forever: unmount when the parent goes.
    while os.getppid() == parent:
        time.sleep(0.5)
    subprocess.run(["fusermount3", "-u", "-z", "-q", mountpoint], check=False, capture_output=True)


def serve(source: str, mountpoint: str, config: PFSConfig, counters: str | None = None,
          watch_parent: bool = False) -> dict[str, Any]:
    """Serve the simulated PFS in this process until it is unmounted; return the counters.

    libfuse's own SIGINT/SIGTERM/SIGHUP handlers end the loop and unmount; the
    counters are then written to ``counters`` (JSON) if given.
    """
    import mfusepy

    from .fs import PassthroughPFS, fuse_options
    from .throttle import MetadataServer, TokenBucket

    if not os.path.isdir(source):
        raise PFSError(f"source {source} is not a directory")
    os.makedirs(mountpoint, exist_ok=True)
    ops = PassthroughPFS(source, TokenBucket(config.bandwidth, config.burst),
                         MetadataServer(config.latency, config.mds_slots))
    if watch_parent:
        threading.Thread(target=_watch_parent, args=(mountpoint, os.getppid()), daemon=True).start()
    options = fuse_options(config.max_threads)
    if config.allow_other:
        options["allow_other"] = True
    try:
        mfusepy.FUSE(ops, mountpoint, foreground=True, nothreads=False, **options)
    finally:
        snapshot = ops.snapshot()
        snapshot["config"] = asdict(config)
        if counters:
            _write_json(counters, snapshot)
    return snapshot


# --- the controlling side ----------------------------------------------------
@dataclass
class SimulatedPFS:
    """A simulated PFS mount owned by this process; also a context manager.

    ``start()`` mounts ``source`` at ``mountpoint`` in a child process, ``stop()``
    unmounts it and returns the counters. Inside ``with``, SIGTERM and SIGHUP
    are turned into `KeyboardInterrupt` so the mount is removed on those too.
    """

    source: str
    mountpoint: str
    config: PFSConfig = field(default_factory=PFSConfig)
    counters_path: str | None = None
    start_timeout: float = 20.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _saved_handlers: dict[int, Any] = field(default_factory=dict, init=False, repr=False)

    def start(self) -> SimulatedPFS:
        if self._proc is not None:
            raise PFSError(f"{self.mountpoint} already started by this object")
        if not os.path.isdir(self.source):
            raise PFSError(f"source {self.source} is not a directory")
        os.makedirs(self.mountpoint, exist_ok=True)
        if is_mounted(self.mountpoint):  # left over from a killed run
            force_unmount(self.mountpoint)
        if self.counters_path is None:
            self.counters_path = os.path.join(os.path.dirname(os.path.realpath(self.mountpoint)),
                                              f".{os.path.basename(self.mountpoint)}.counters.json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.counters_path)
        c = self.config
        cmd = [sys.executable, "-m", "bench.pfs", "serve", self.source, self.mountpoint,
               "--bandwidth", repr(c.bandwidth), "--latency", repr(c.latency),
               "--mds-slots", str(c.mds_slots), "--max-threads", str(c.max_threads),
               "--counters", self.counters_path, "--watch-parent"]
        if c.burst is not None:
            cmd += ["--burst", repr(c.burst)]
        if c.allow_other:
            cmd.append("--allow-other")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
        self._proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while not is_mounted(self.mountpoint):
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                self._proc = None
                raise PFSError(f"simulated PFS failed to mount {self.source} at {self.mountpoint}: "
                               f"{err.strip() or 'no message'}")
            if time.monotonic() > deadline:
                self.stop()
                raise PFSError(f"simulated PFS did not mount at {self.mountpoint} "
                               f"within {self.start_timeout} s")
            time.sleep(0.02)
        return self

    def stop(self) -> dict[str, Any]:
        """Unmount (forcibly if needed), reap the daemon, return its counters ({} if none)."""
        proc, self._proc = self._proc, None
        try:
            force_unmount(self.mountpoint)
        finally:
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                if proc.stderr:
                    proc.stderr.close()
        if self.counters_path and os.path.exists(self.counters_path):
            with open(self.counters_path, encoding="utf-8") as fh:
                return json.load(fh)
        return {}

    def __enter__(self) -> SimulatedPFS:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._saved_handlers[sig] = signal.signal(sig, _raise_interrupt)
            except ValueError:  # not the main thread: leave handlers alone
                pass
        try:
            return self.start()
        except BaseException:
            self._restore_handlers()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.counters = self.stop()
        finally:
            self._restore_handlers()

    def _restore_handlers(self) -> None:
        for sig, handler in self._saved_handlers.items():
            signal.signal(sig, handler)
        self._saved_handlers.clear()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

