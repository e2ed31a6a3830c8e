"""The state directory of one destination root: ``ROOT/.stager/``, opened safely.

Its layout (lock, holder, dirs, ``KEY.record``/``KEY.journal``, ``tmp/``) and the trust
rules: docs/staging-state.md, section 1. A staging run creates the root and the state
directory, takes the lock, removes what dead runs left in ``tmp/`` and journals every
directory it makes in ``dirs`` before making it; ``clean`` removes a spec's record, the
recorded directories that are empty and, when no record is left, the state directory,
the root and the parents the stager made. Nothing here follows a symlink or trusts a
directory that is someone else's or writable by others (:mod:`core.trusted`).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import List, Optional, Tuple

from core import localfs
from stager.nodelocal import record as records
from stager.nodelocal.journal import Journal, read_events
from stager.nodelocal.lock import HOLDER_NAME, LOCK_NAME, Holder, RootLock, acquire
from core.trusted import open_below, open_dir

__all__ = ["STATE_DIR", "DIRS_NAME", "TMP_DIR", "RootState"]

STATE_DIR = ".stager"
DIRS_NAME = "dirs"
TMP_DIR = "tmp"


class RootState:
    """An open (trusted) destination root and its state directory. Close it once.

    Attributes
    ----------
    root : str
        The root's normalised absolute path.
    root_fd, fd : int
        Descriptors of the root and of ``ROOT/.stager``.
    path : str
        ``ROOT/.stager``.
    lock : RootLock or None
        Held after :meth:`lock`.
    """

    def __init__(self, root: str, root_fd: int, fd: int) -> None:
        self.root = root
        self.root_fd = root_fd
        self.fd = fd
        self.path = os.path.join(root, STATE_DIR)
        self.lock: Optional[RootLock] = None
        self._dirs: Optional[Journal] = None

    # -- opening ---------------------------------------------------------
    @classmethod
    def create(cls, root: str) -> RootState:
        """Make (if needed) and open ``root`` and its state directory.

        Missing directories, the root's parents included, are made ``0700`` and
        recorded in ``dirs``. The root must be trusted (yours, not a symlink, not
        writable by others).

        Raises
        ------
        localfs.UnsafePathError
            The root (or a level above it that had to be checked) is not trusted.
        OSError
            Making a directory failed (permission, disk full).
        """
        root = os.path.normpath(os.path.abspath(root))
        made: List[str] = []
        localfs.ensure_dir(root, root, made)
        root_fd = open_dir(root, path=root, what="destination root")
        try:
            try:
                os.mkdir(STATE_DIR, 0o700, dir_fd=root_fd)
            except FileExistsError:
                pass
            fd = open_dir(STATE_DIR, root_fd, path=os.path.join(root, STATE_DIR),
                          what="state directory")
        except BaseException:
            os.close(root_fd)
            raise
        state = cls(root, root_fd, fd)
        try:
            try:
                os.mkdir(TMP_DIR, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            for d in made:
                state.add_dir(d)
        except BaseException:
            state.close()
            raise
        return state

    @classmethod
    def open(cls, root: str) -> Optional[RootState]:
        """Open an existing root's state directory; ``None`` if the root or its state is missing.

        Raises
        ------
        core.trusted.Untrusted
            The root or its state directory is a symlink, someone else's, or
            writable by others.
        """
        root = os.path.normpath(os.path.abspath(root))
        try:
            root_fd = open_dir(root, path=root, what="destination root")
        except FileNotFoundError:
            return None
        try:
            fd = open_dir(STATE_DIR, root_fd, path=os.path.join(root, STATE_DIR),
                          what="state directory")
        except FileNotFoundError:
            os.close(root_fd)
            return None
        except BaseException:
            os.close(root_fd)
            raise
        return cls(root, root_fd, fd)

    def close(self) -> None:
        """Release the lock (if held) and close the descriptors."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self._dirs is not None:
            self._dirs.close()
            self._dirs = None
        for fd in (self.fd, self.root_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.root_fd = -1

    # -- the lock ----------------------------------------------------------
    def take_lock(self, holder: Holder, wait: float = 0.0,
                  check=None) -> Optional[Holder]:
        """Take the root's lock; return ``None``, or the holder of *our own run* (the root
        is shared with another node of this run, which writes it).

        Raises
        ------
        stager.nodelocal.lock.LockBusy
            Another run holds it.
        """
        lock, same_run = acquire(self.fd, self.path, holder, wait=wait, check=check)
        self.lock = lock
        return same_run

    # -- created directories ------------------------------------------------
    def add_dir(self, path: str) -> None:
        """Journal that a stager run makes directory ``path`` (call before ``mkdir``)."""
        if self._dirs is None:
            self._dirs = Journal(self.fd, DIRS_NAME, os.path.join(self.path, DIRS_NAME))
        self._dirs.append({"op": "dir", "path": os.path.normpath(path)})

    def created_dirs(self) -> List[str]:
        """Every directory recorded in ``dirs`` (absolute paths, in order, no repeats)."""
        evs = read_events(self.fd, DIRS_NAME, os.path.join(self.path, DIRS_NAME))
        return list(dict.fromkeys(str(e["path"]) for e in evs if e.get("op") == "dir"))

    # -- temporary files ------------------------------------------------------
    @property
    def tmp_path(self) -> str:
        return os.path.join(self.path, TMP_DIR)

    def clear_tmp(self) -> int:
        """Remove every temporary file in ``tmp/``: call only with the lock held (then no
        run that made them is alive). Returns how many were removed."""
        try:
            fd = open_dir(TMP_DIR, self.fd, path=self.tmp_path)
        except FileNotFoundError:
            return 0
        n = 0
        try:
            for name in os.listdir(fd):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    os.unlink(name, dir_fd=fd)
                    n += 1
        finally:
            os.close(fd)
        return n

    # -- records ---------------------------------------------------------------
    def spec_keys(self) -> List[str]:
        """Keys of every spec with a record or journal here."""
        return records.keys_in(os.listdir(self.fd))

    def load(self, key: str) -> records.SpecRecord:
        return records.load(self.fd, self.path, key, self.root)

    # -- removal -----------------------------------------------------------------
    def remove_dirs(self, final: bool) -> Tuple[int, List[str]]:
        """rmdir the recorded directories that are empty, deepest first.

        With ``final`` (no spec has a record here any more) the state directory goes
        first, then the root and the parents the stager made, if empty. Returns
        ``(directories removed, ancestors of the root that are still there)``;
        the latter are retried by the caller once other nodes sharing them are done.
        """
        made = self.created_dirs()
        inside = [d for d in made if d != self.root and d.startswith(self.root + "/")]
        outside = [d for d in made if d not in inside]
        removed = 0
        kept = []
        for d in sorted(inside, key=lambda p: (p.count("/"), p), reverse=True):
            parent, name = os.path.split(os.path.relpath(d, self.root))
            try:
                pfd = open_below(self.root_fd, parent, self.root)
            except OSError:
                kept.append(d)  # gone, or no longer trusted: keep its entry if it exists
                continue
            try:
                os.rmdir(name, dir_fd=pfd)
                removed += 1
            except OSError as e:
                if e.errno != errno.ENOENT:
                    kept.append(d)
            finally:
                os.close(pfd)
        if not final:
            self._rewrite_dirs([d for d in made if d in kept or d in outside])
            return removed, []
        self._remove_state()
        left: List[str] = []
        for d in sorted(outside, key=lambda p: (p.count("/"), p), reverse=True):
            if d != self.root and not self.root.startswith(d + "/"):
                continue
            try:
                os.rmdir(d)
                removed += 1
            except OSError as e:
                if e.errno not in (errno.ENOENT,):
                    left.append(d)
        return removed, left

    def _rewrite_dirs(self, keep: List[str]) -> None:
        if self._dirs is not None:
            self._dirs.close()
            self._dirs = None
        tmp = f"{DIRS_NAME}.tmp-{os.getpid()}"
        j = Journal(self.fd, tmp, os.path.join(self.path, tmp))
        try:
            for d in keep:
                j.append({"op": "dir", "path": d})
        finally:
            j.close()
        os.rename(tmp, DIRS_NAME, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def _remove_state(self) -> None:
        """Remove the state directory (lock last: the caller holds it)."""
        if self._dirs is not None:
            self._dirs.close()
            self._dirs = None
        self.clear_tmp()
        try:
            os.rmdir(TMP_DIR, dir_fd=self.fd)
        except OSError:
            pass
        for name in os.listdir(self.fd):
            if name in (LOCK_NAME, HOLDER_NAME, TMP_DIR):
                continue
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                os.unlink(name, dir_fd=self.fd)
        # the lock's name goes while we hold it: a run that opened it meanwhile finds,
        # once it gets the lock, that the name is gone and starts again
        try:
            os.unlink(LOCK_NAME, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        try:
            os.rmdir(STATE_DIR, dir_fd=self.root_fd)
        except OSError:
            pass
