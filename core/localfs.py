"""Safe local writes: private directories, no symlinks, temp file + atomic rename.

Node-local storage is shared by every job that lands on the node, so a
destination is treated as hostile until checked:

* directories the stager creates are ``0700``;
* the destination root (a spec block's directory, ``%n`` expanded) and every
  directory below it must be real directories owned by the effective user;
* no destination may resolve outside its root (``..`` or an absolute path in a
  relative part);
* a symlink already sitting at a destination path is refused and never
  followed, so its target is untouched;
* bytes go to a temporary file (``O_EXCL | O_NOFOLLOW``, mode ``0600``) with a
  short name whatever the final one (``.stager-tmp-...``: NAME_MAX), next to the
  destination or, inside a staging run, in its root's ``.stager/tmp``
  (:mod:`core.commit`), and reach the final name by ``rename``, which
  is atomic within a filesystem: a reader sees the old file or the whole new one,
  never a partial file. Mode and mtime are set on the temporary file before the
  rename, and a staging run journals the copy just before it.

``fsync`` is off by default for staging: the staged bytes are a replica of a
source that stays on the shared filesystem, and a node crash loses the job
anyway, so durability buys nothing while costing a flush per file on disks
(``bench/results/history.md``). ``stager drain`` writes the only copy of
results and passes ``fsync=True``.

Used by staging, ``drain``, the stream job and the workflow results alike:
:func:`ensure_dir`, :class:`AtomicFile`, :func:`write_bytes_atomic`,
:func:`copy_file_atomic`. Free space is the stager's (``stager.nodelocal.space``).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Collection, List, Optional, Union

from core.errors import LocalFileError
from core import checksum, commit
from core.commit import TEMP_MARK

__all__ = ["UnsafePathError", "TEMP_MARK", "inside", "describe_untrusted", "ensure_dir",
           "check_dest", "AtomicFile", "write_bytes_atomic", "copy_file_atomic"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_COPY_SIZE = 8 << 20

PathLike = Union[str, "os.PathLike[str]"]


class UnsafePathError(LocalFileError):
    """A destination path is a symlink, escapes its root, or is owned by someone else."""


def inside(root: PathLike, path: PathLike) -> str:
    """Normalised absolute ``path``, which must be ``root`` or lie below it.

    Pure string check (no filesystem access): ``..`` components are resolved
    lexically, which is what the stager creates, and symlinks are refused
    separately by :func:`ensure_dir` and :class:`AtomicFile`.

    Raises
    ------
    UnsafePathError
        If ``path`` escapes ``root``.
    """
    r = os.path.normpath(os.path.abspath(os.fspath(root)))
    p = os.path.normpath(os.path.join(r, os.fspath(path)))
    if p != r and os.path.commonpath([r, p]) != r:
        raise UnsafePathError(
            f"destination {os.fspath(path)!r} escapes its directory {r}: "
            "fix the spec pattern so every match stays below the block's destination")
    return p


def describe_untrusted(st: os.stat_result,
                       owners: Optional[Collection[int]] = None) -> Optional[str]:
    """Why a directory or file with ``st`` cannot be trusted, or ``None``. Pure.

    Trusted: not a symlink, owned by the effective user (or by one of ``owners``
    when given: uids whose files are trusted too, like root's or a named
    ``--trust-owner``), not writable by group or others -- nobody else can plant
    or swap anything in it.
    """
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink (possibly planted by another user)"
    if st.st_uid != os.geteuid() and (owners is None or st.st_uid not in owners):
        others = sorted(set(owners or ()) - {os.geteuid()})
        also = " nor by " + ", ".join(f"uid {u}" for u in others) if others else ""
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}){also}"
    if st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else \
            ("group" if st.st_mode & 0o020 else "others")
        return (f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): "
                "'chmod go-w' it, or let the stager create it")
    return None


def _check_own_dir(path: str, strict: bool = True) -> None:
    st = os.lstat(path)
    if not stat.S_ISLNK(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} exists and is not a directory; "
                              "remove it or change the destination")
    why = describe_untrusted(st)
    if why is not None and not strict and not stat.S_ISLNK(st.st_mode) \
            and st.st_uid == os.geteuid():
        why = None  # only writable by others: allowed where the caller says so (drain)
    if why is not None:
        raise UnsafePathError(f"refusing to write into {path}: {why}; "
                              "choose a destination of your own")


def ensure_dir(root: PathLike, path: PathLike, created: Optional[List[str]] = None,
               announce: Optional[Callable[[str], None]] = None, strict: bool = True) -> str:
    """Create directory ``path`` (``root`` or below it), checking every level.

    Missing directories, including missing ancestors of ``root``, are created
    with mode ``0700`` and appended to ``created`` (outermost first) so that
    ``stager clean`` can remove exactly them. ``root`` and every existing
    directory between it and ``path`` must be a real directory owned by the
    effective user, and not writable by group or others. ``announce(path)`` is
    called before each directory is made (a staging run journals it there, so a
    kill right after the ``mkdir`` cannot leave a directory nobody knows of).
    ``strict=False`` (``drain``: a shared project directory is often group-writable)
    lets existing levels be writable by group or others.

    Returns
    -------
    str
        The normalised absolute path.

    Raises
    ------
    UnsafePathError
        A level is a symlink, not a directory, owned by another user, or
        ``path`` escapes ``root``.
    OSError
        Creating a directory failed (permission, disk full).
    """
    r = os.path.normpath(os.path.abspath(os.fspath(root)))
    p = inside(r, path)
    missing = []
    probe = r
    while not os.path.lexists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for d in reversed(missing):
        _mkdir(d, created, announce)
    _check_own_dir(r, strict)
    rel = os.path.relpath(p, r)
    cur = r
    if rel != ".":
        for part in rel.split(os.sep):
            cur = os.path.join(cur, part)
            if not os.path.lexists(cur):
                _mkdir(cur, created, announce)
            _check_own_dir(cur, strict)
    return p


def _mkdir(d: str, created: Optional[List[str]],
           announce: Optional[Callable[[str], None]] = None) -> None:
    if announce is not None:
        announce(d)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        return  # another rank of the same node (or a racing job) made it; checked by caller
    if created is not None:
        created.append(d)


def check_dest(dest: str) -> None:
    """Refuse a destination that exists as a symlink or a directory."""
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            f"refusing to write {dest}: a symlink is already there (its target is left "
            "untouched); remove it and stage again")
    if stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"cannot write file {dest}: a directory is there; remove it")


_UMASK = os.umask(0o022)  # read once at import (os.umask can only be read by setting it)
os.umask(_UMASK)


class AtomicFile:
    """A file written under a temporary name, renamed into place on :meth:`commit`.

    Use as a context manager: leaving the block without ``commit`` (or with an
    exception) removes the temporary file.

    Parameters
    ----------
    dest : str
        Final absolute path; its directory must exist (see :func:`ensure_dir`).
    mode : int, optional
        Permission bits for the final file (default ``0600``).
    mtime_ns : int, optional
        Modification time to set (access time is set to the same value).
    fsync : bool
        Flush data to the device before renaming (see module docstring).
    hash : bool
        Keep an incremental checksum of sequential :meth:`write` calls.
    precheck : bool
        Refuse a symlink (or directory) at ``dest`` before creating the
        temporary file and again just before the rename. ``rename`` replaces a
        symlink rather than following it, so its target is never written
        either way; the checks turn the silent replacement into an error.
        Callers that checked the whole directory at once (the stager's
        prepare phase, one ``scandir``) pass ``False`` to save two ``lstat``
        per file.
    """

    def __init__(self, dest: str, mode: Optional[int] = None, mtime_ns: Optional[int] = None,
                 fsync: bool = False, hash: bool = True, precheck: bool = True) -> None:
        if precheck:
            check_dest(dest)
        self.precheck = precheck
        self.dest = dest
        self.mode = 0o600 if mode is None else stat.S_IMODE(mode) & 0o777
        self.mtime_ns = mtime_ns
        self.fsync = fsync
        self.hasher = checksum.new() if hash else None
        # a short name whatever the final one (NAME_MAX), unique per process, O_EXCL for
        # the rest; a staging run puts it in its root's state directory (core.commit)
        self.tmp = commit.temp_path(dest)
        # created with its final mode when the umask allows it (saves an fchmod per file);
        # nobody else can reach it meanwhile: the temporary name lives in a 0700 directory of ours
        self._chmod = self.mode & ~_UMASK != self.mode
        self.fd: Optional[int] = os.open(
            self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC,
            self.mode if not self._chmod else 0o600)
        self.nbytes = 0

    def write(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Append ``data`` (and hash it, if hashing)."""
        self.write_at(self.nbytes, data)
        if self.hasher is not None:
            self.hasher.update(data)

    def write_at(self, offset: int, data: Union[bytes, bytearray, memoryview]) -> None:
        """Write ``data`` at ``offset`` (not hashed); loops over short writes."""
        assert self.fd is not None, "file already committed or aborted"
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            n = os.pwrite(self.fd, view[done:], offset + done)
            if n == 0:
                raise OSError(errno.ENOSPC, "short write", self.tmp)
            done += n
        self.nbytes = max(self.nbytes, offset + done)

    def hexdigest(self) -> str:
        assert self.hasher is not None
        return self.hasher.hexdigest()

    def commit(self, checksum: Optional[str] = None) -> None:
        """Set mode and mtime, optionally fsync, and rename onto ``dest``.

        The rename goes through :func:`core.commit.rename`: inside a
        staging run the copy is journaled (with ``checksum``, or this file's own
        incremental checksum) before it appears under its final name.
        """
        assert self.fd is not None
        fd, self.fd = self.fd, None
        renamed = False
        try:
            try:
                if self._chmod:
                    os.fchmod(fd, self.mode)
                if self.mtime_ns is not None:
                    os.utime(fd, ns=(self.mtime_ns, self.mtime_ns))
                if self.fsync:
                    os.fsync(fd)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            if self.precheck:
                check_dest(self.dest)  # a symlink planted while we wrote is refused too
            if checksum is None and self.hasher is not None:
                checksum = self.hasher.hexdigest()
            commit.rename(self.tmp, self.dest, st, checksum)
            renamed = True
        finally:
            if not renamed:
                _unlink_quiet(self.tmp)

    def abort(self) -> None:
        """Close and remove the temporary file (idempotent)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)
            _unlink_quiet(self.tmp)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_bytes_atomic(dest: str, data: Union[bytes, bytearray, memoryview], *,
                       mode: Optional[int] = None, mtime_ns: Optional[int] = None,
                       fsync: bool = False) -> str:
    """Write ``data`` to ``dest`` atomically; return its hex checksum."""
    with AtomicFile(dest, mode=mode, mtime_ns=mtime_ns, fsync=fsync) as f:
        f.write(data)
        f.commit()
        return f.hexdigest()


def copy_file_atomic(src: str, dest: str, *, fsync: bool = False,
                     keep_mode: bool = True, keep_mtime: bool = True) -> str:
    """Copy ``src`` to ``dest`` atomically, checksumming what is read; return the checksum.

    The checksum is computed over the bytes read from ``src`` and written to
    ``dest`` (one buffer serves both). ``src`` is re-``fstat``-ed after the
    copy: a source that changed size or mtime meanwhile raises
    :class:`~core.errors.LocalFileError` and nothing is left at ``dest``.
    """
    fd = os.open(src, os.O_RDONLY | _CLOEXEC)
    try:
        st = os.fstat(fd)
        with AtomicFile(dest, mode=st.st_mode if keep_mode else None,
                        mtime_ns=st.st_mtime_ns if keep_mtime else None, fsync=fsync) as out:
            buf = bytearray(min(_COPY_SIZE, max(st.st_size, 1)))
            view = memoryview(buf)
            while True:
                n = os.readv(fd, [view])
                if n == 0:
                    break
                out.write(view[:n])
            st2 = os.fstat(fd)
            same = (st2.st_size, st2.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
            if not same or out.nbytes != st.st_size:
                raise LocalFileError(f"{src} changed while being copied; "
                                    "copy again when it is stable")
            out.commit()
            return out.hexdigest()
    finally:
        os.close(fd)
