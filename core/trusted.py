"""Opening what the stager owns without following anything another user planted.

``clean`` deletes files, and the lock, the records and the journals decide which,
so everything they rest on is opened under one rule:

* a directory or file is opened with ``O_NOFOLLOW``: a symlink in its place is
  refused, never followed. Below a destination root, paths are walked one
  component at a time relative to the parent's descriptor (``dir_fd``), so
  nothing is re-resolved between a check and its use, and a symlinked parent
  cannot redirect an ``unlink``;
* it must be *trusted*: owned by the effective user and not writable by group
  or others. A directory that is not is reported, and nothing below it is used.

The components above a destination root are resolved by the kernel as usual
(``/tmp`` may be a link, ``/scratch`` a mount); the root itself and everything
below it are not. All the stager's state lives inside the root, so a root that
only its owner can write cannot be given a planted record.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Collection, List, Optional, Tuple

from core.localfs import UnsafePathError, describe_untrusted

__all__ = ["Untrusted", "DIR_FLAGS", "describe_untrusted", "check_trusted", "open_dir",
           "open_below", "read_file", "write_file", "is_missing", "describe_shared_dir",
           "check_tree", "read_trusted"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Flags of every directory the stager opens below a root.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


class Untrusted(UnsafePathError):
    """A directory or file the stager would rely on is a symlink, someone else's, or
    writable by others."""


def check_trusted(st: os.stat_result, path: str, what: str = "directory",
                  owners: Optional[Collection[int]] = None) -> None:
    """Raise :class:`Untrusted` naming ``path`` if ``st`` is not trusted (owned by the
    effective user, or one of ``owners``; not writable by group or others)."""
    why = describe_untrusted(st, owners)
    if why is not None:
        raise Untrusted(f"refusing to use {what} {path}: {why}")


def is_missing(e: OSError) -> bool:
    """``e`` says a path is not there (it, or a directory on its way, does not exist)."""
    return e.errno in (errno.ENOENT, errno.ENOTDIR)


def open_dir(name: str, dir_fd: Optional[int] = None, *, path: Optional[str] = None,
             what: str = "directory", owners: Optional[Collection[int]] = None) -> int:
    """Open directory ``name`` (relative to ``dir_fd``) without following a symlink; check it.

    Returns a descriptor the caller closes.

    Raises
    ------
    FileNotFoundError
        It does not exist.
    Untrusted
        It is a symlink, not a directory, someone else's, or writable by others.
    """
    shown = path or name
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                raise e from None
            if stat.S_ISLNK(st.st_mode):
                raise Untrusted(f"refusing to use {what} {shown}: it is a symlink "
                                "(possibly planted by another user)") from e
            raise Untrusted(f"refusing to use {what} {shown}: it is not a directory") from e
        raise
    try:
        check_trusted(os.fstat(fd), shown, what, owners)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_below(root_fd: int, rel_dir: str, root: str) -> int:
    """Open directory ``root/rel_dir`` component by component, each trusted. Caller closes.

    ``rel_dir`` is relative and normalised (no ``..``); ``""`` or ``"."`` is the root.
    """
    fd = os.dup(root_fd)
    if rel_dir in ("", "."):
        return fd
    cur = root
    try:
        for part in rel_dir.split("/"):
            if part in ("", ".", ".."):
                raise Untrusted(f"refusing to walk {root}/{rel_dir}: not a plain relative path")
            cur = f"{cur}/{part}"
            nxt = open_dir(part, fd, path=cur)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(name: str, dir_fd: int, path: str, what: str = "file") -> bytes:
    """The bytes of regular file ``name`` in ``dir_fd``, opened without following a
    symlink and trusted.

    Raises
    ------
    FileNotFoundError
        It does not exist.
    Untrusted
        A symlink, not a regular file, someone else's or writable by others.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Untrusted(f"refusing to read {what} {path}: it is a symlink") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"refusing to read {what} {path}: not a regular file")
        check_trusted(st, path, what)
        chunks: List[bytes] = []
        while True:
            b = os.read(fd, max(st.st_size + 1, 1 << 16))
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def write_file(name: str, dir_fd: int, data: bytes, tmp: str, fsync: bool = False) -> None:
    """Replace file ``name`` in ``dir_fd`` by ``data`` atomically.

    The bytes go to ``tmp`` (created ``0600`` in ``dir_fd`` without following a
    symlink; flushed to the device with ``fsync``), which is then renamed onto
    ``name``; if anything fails, ``tmp`` is removed and ``name`` is left as it was.
    """
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | _CLOEXEC, 0o600,
                 dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def describe_shared_dir(st: os.stat_result) -> Tuple[Optional[str], Optional[str]]:
    """(refusal, warning) for a file that lives in a directory with ``st``. Pure.

    A directory anyone may write without the sticky bit lets anyone rename or
    replace the files in it: refused. With the sticky bit (``/tmp``) only a file's
    owner may, so its files can be trusted by their own owner and mode, but anyone
    may create one first under a name not yet taken: warned.
    """
    if not st.st_mode & 0o002:
        return None, None
    mode = f"{stat.S_IMODE(st.st_mode):04o}"
    if not st.st_mode & stat.S_ISVTX:
        return (f"it is writable by everyone without the sticky bit (mode {mode}): anyone "
                "can replace the files in it; use a directory of your own"), None
    return None, (f"it is writable by everyone (mode {mode}, sticky): another user can "
                  "create a file there under a name not yet taken; prefer a directory "
                  "of your own")


def check_tree(path: str, what: str = "directory",
               owners: Optional[Collection[int]] = None) -> None:
    """``path`` and everything below it trusted (owned by the effective user or one of
    ``owners``, not writable by group or others), regular files or directories only;
    no link followed. Raises :class:`Untrusted` naming the first that is not.

    For a directory a job is about to rely on (``--authorized-keys``, its node-local
    outputs) that another user could have prepared before it started.
    """
    fd = open_dir(path, what=what, owners=owners)
    try:
        for name in sorted(os.listdir(fd)):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            shown = os.path.join(path, name)
            if stat.S_ISDIR(st.st_mode):
                check_tree(shown, what, owners)
            elif not stat.S_ISREG(st.st_mode):
                raise Untrusted(f"refusing to use {what} {path}: {shown} is not a regular "
                                "file (a symlink?)")
            else:
                check_trusted(st, shown, f"a file of {what}", owners)
    finally:
        os.close(fd)


def read_trusted(path: str, owners: Collection[int] = (), what: str = "file",
                 limit: int = 1 << 20) -> Tuple[bytes, List[str]]:
    """The bytes of a small file others hand us (a rendezvous file), and warnings.

    The file is opened without following a symlink and must be a regular file owned
    by the effective user or one of ``owners``, not writable by group or others; its
    directory must not let anyone replace it (:func:`describe_shared_dir`: refused
    without the sticky bit, warned with it). At most ``limit`` bytes are read.

    Raises
    ------
    FileNotFoundError
        It does not exist.
    Untrusted
        It, or its directory, is not to be trusted (the message names it and why).
    """
    d = os.path.dirname(os.path.abspath(path))
    refusal, warning = describe_shared_dir(os.stat(d))
    if refusal is not None:
        raise Untrusted(f"refusing to use {what} {path}: its directory {d}: {refusal}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Untrusted(f"refusing to use {what} {path}: it is a symlink (possibly "
                            "planted by another user)") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"refusing to use {what} {path}: not a regular file")
        check_trusted(st, path, what, owners)
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Untrusted(f"refusing to use {what} {path}: larger than {limit} bytes")
    return data, [f"{what} {path}: its directory {d}: {warning}"] if warning else []
