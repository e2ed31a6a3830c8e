"""One run at a time per destination root: a lock that names its holder.

``flock(LOCK_EX)`` on ``ROOT/.stager/lock`` by the leader that stages, verifies or
cleans there; the holder is written to ``ROOT/.stager/holder`` so a second run can say
whom it waits for (docs/staging-state.md, section 5). The kernel frees an ``flock`` when
its holder dies, however it died; a lock file created with ``O_EXCL`` would outlive a
killed holder and need a liveness guess that cannot be made across hosts. A filesystem
without ``flock`` (Lustre mounted without it) is refused rather than staged unlocked.
"""
from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import socket
import stat
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Tuple

from stager.errors import StagerError
from core.trusted import Untrusted, check_trusted, read_file, write_file

__all__ = ["LOCK_NAME", "HOLDER_NAME", "Holder", "LockBusy", "RootLock", "acquire"]

LOCK_NAME = "lock"
HOLDER_NAME = "holder"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: How long a run looks again when the lock is taken but its holder is not yet named
#: (the holder writes the file just after taking the lock).
SETTLE = 1.0
_POLL = 0.02


class LockBusy(StagerError):
    """Another run holds the lock of a destination root."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a root's lock."""

    user: str
    uid: int
    host: str
    pid: int
    started: float
    run: str
    node: str
    spec: str

    @classmethod
    def here(cls, run: str, node: str, spec: str) -> Holder:
        try:
            user = getpass.getuser()
        except Exception:
            user = str(os.geteuid())
        return cls(user=user, uid=os.geteuid(), host=socket.gethostname(), pid=os.getpid(),
                   started=time.time(), run=run, node=node, spec=spec)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (f"user {self.user} (uid {self.uid}) on host {self.host}, pid {self.pid}, "
                f"since {when} (node {self.node}, spec {self.spec})")

    def alive_here(self) -> Optional[bool]:
        """Whether the holder's process exists (``None``: it is on another host)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _read_holder(state_fd: int, state_path: str) -> Optional[Holder]:
    try:
        data = read_file(HOLDER_NAME, state_fd, f"{state_path}/{HOLDER_NAME}", "lock holder")
        return Holder(**json.loads(data))
    except (OSError, ValueError, TypeError, Untrusted):
        return None


class RootLock:
    """A held lock (release it with :meth:`release`, once)."""

    def __init__(self, fd: int, state_fd: int, path: str, previous: Optional[Holder]) -> None:
        self.fd: Optional[int] = fd
        self.state_fd = state_fd
        self.path = path
        #: the holder named in the lock when it was taken: a run that died holding it
        self.previous = previous

    def release(self) -> None:
        """Forget the holder and release the lock (idempotent)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.unlink(HOLDER_NAME, dir_fd=self.state_fd)
        except OSError:
            pass
        os.close(fd)  # releases the flock


def _try_lock(state_fd: int, state_path: str) -> Optional[int]:
    """The locked descriptor of ``lock``, or ``None`` if another process holds it."""
    path = f"{state_path}/{LOCK_NAME}"
    fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _CLOEXEC, 0o600,
                 dir_fd=state_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"refusing to use lock {path}: not a regular file")
        check_trusted(st, path, "lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise StagerError(
                    f"cannot lock {path}: this filesystem does not support flock "
                    f"({e.strerror}); stage to node-local storage, or mount the filesystem "
                    "with flock support (Lustre: -o flock)") from e
            raise
        # the name may have been removed (a clean) between our open and our lock
        try:
            now = os.stat(LOCK_NAME, dir_fd=state_fd, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            return -1
        return fd
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise


def acquire(state_fd: int, state_path: str, holder: Holder, *, wait: float = 0.0,
            check: Optional[Callable[[], None]] = None
            ) -> Tuple[Optional[RootLock], Optional[Holder]]:
    """Take the lock of the root whose state directory is ``state_fd``.

    Parameters
    ----------
    state_fd : int
        The root's (trusted) ``.stager`` directory.
    state_path : str
        Its path, for messages.
    holder : Holder
        Who we are.
    wait : float
        Seconds to wait for another run to finish; ``0``: fail at once; negative: forever.
    check : callable, optional
        Called while waiting (raises to stop: an interrupt).

    Returns
    -------
    (RootLock, None)
        The lock is ours (``lock.previous`` names a dead run it was taken over from).
    (None, Holder)
        The lock is held by *our own run* (same ``run``, another node): the root is
        shared by several nodes, and that node writes it.

    Raises
    ------
    LockBusy
        Another run holds it (after ``wait`` seconds), naming that run.
    """
    start = time.monotonic()
    settle_until = start + SETTLE
    while True:
        fd = _try_lock(state_fd, state_path)
        if fd == -1:
            continue
        if fd is not None:
            previous = _read_holder(state_fd, state_path)
            try:
                write_file(HOLDER_NAME, state_fd, json.dumps(asdict(holder)).encode(),
                           f"{HOLDER_NAME}.{holder.run}.{os.getpid()}")
            except BaseException:
                os.close(fd)
                raise
            if previous is not None and previous.run == holder.run:
                previous = None
            return RootLock(fd, state_fd, state_path, previous), None
        other = _read_holder(state_fd, state_path)
        if other is not None and other.run == holder.run and other.pid != holder.pid:
            return None, other
        now = time.monotonic()
        # the holder names itself just after locking: a missing or dead-looking name
        # is looked at again for a moment before it is reported
        unsure = other is None or other.alive_here() is False
        out_of_time = wait >= 0 and now - start >= wait
        if out_of_time and not (unsure and now < settle_until):
            who = other.describe() if other is not None else "a run that has not named itself"
            hint = ("wait for it (stager ... --wait), or stage to another destination"
                    if wait == 0 else f"waited {wait:g} s")
            raise LockBusy(f"destination {os.path.dirname(state_path)} is in use by another "
                           f"stager run: {who}; {hint}")
        if check is not None:
            check()
        time.sleep(_POLL if now < settle_until else min(0.5, _POLL * 10))
