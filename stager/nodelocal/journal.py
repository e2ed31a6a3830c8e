"""An append-only journal: one JSON object per line, each line one ``write(2)``.

What survives what (docs/staging-state.md, section 3): a line appended with a single
``write`` on an ``O_APPEND`` descriptor is in the file once ``write`` returns, whatever
kills the writer; a line that could not be written whole is cut off again at once and
the caller gets the error; a reader ignores a last line without its newline, and the
next writer cuts it off. Durability across a power loss needs ``fsync=True`` (one
``fsync`` a line; staging only with ``--fsync``, since the copies are not flushed
either). A complete line that does not parse is corruption: reading fails naming the
file and line.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from stager.errors import StagerError
from core.trusted import check_trusted, read_file

__all__ = ["Journal", "read_events", "encode"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_TAIL = 1 << 16


def encode(event: Dict[str, Any]) -> bytes:
    """One journal line (compact JSON, sorted keys, newline-terminated)."""
    return (json.dumps(event, separators=(",", ":"), sort_keys=True) + "\n").encode()


class Journal:
    """An open journal, for appending (one writer at a time: the root's lock holder).

    Parameters
    ----------
    dir_fd : int
        The (trusted) directory that holds it.
    name : str
        File name in that directory.
    path : str
        Full path, for messages.
    fsync : bool
        ``fsync`` after every line.
    """

    def __init__(self, dir_fd: int, name: str, path: str, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.fd: Optional[int] = os.open(
            name, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | _CLOEXEC, 0o600,
            dir_fd=dir_fd)
        try:
            st = os.fstat(self.fd)
            check_trusted(st, path, "journal")
            self.size = self._repair(st.st_size)
        except BaseException:
            self.close()
            raise

    def _repair(self, size: int) -> int:
        """Cut a torn last line (no newline) off; return the size kept."""
        assert self.fd is not None
        if size == 0:
            return 0
        start = max(0, size - _TAIL)
        tail = os.pread(self.fd, size - start, start)
        if tail.endswith(b"\n"):
            return size
        cut = tail.rfind(b"\n")
        keep = start + cut + 1 if cut >= 0 else (0 if start == 0 else size)
        if keep != size:
            os.ftruncate(self.fd, keep)
        return keep

    def append(self, event: Dict[str, Any]) -> None:
        """Append one event as one line; on any failure the file is as it was before.

        Raises
        ------
        OSError
            The write failed (``ENOSPC``...); nothing of this line stays in the file.
        """
        assert self.fd is not None, "journal closed"
        line = encode(event)
        try:
            n = os.write(self.fd, line)
            if n != len(line):
                raise OSError(28, "No space left on device (short write)", self.path)
            if self.fsync:
                os.fsync(self.fd)
        except BaseException:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass
            raise
        self.size += n

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


def read_events(dir_fd: int, name: str, path: str) -> List[Dict[str, Any]]:
    """Every complete event of a journal (``[]`` if it does not exist).

    Raises
    ------
    StagerError
        A complete line is not a JSON object (corruption), or the file is not trusted.
    """
    try:
        data = read_file(name, dir_fd, path, "journal")
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        lines[-1] = b""  # a torn last line: the writer died inside write()
    out = []
    for i, line in enumerate(lines[:-1], 1):
        try:
            ev = json.loads(line)
            if not isinstance(ev, dict):
                raise ValueError("not an object")
        except ValueError as e:
            raise StagerError(f"journal {path} is corrupt at line {i} ({e}); remove the "
                              "destination's files and its .stager directory, then stage "
                              "again") from e
        out.append(ev)
    return out
