"""How a copy is committed: where its temporary file lives, and what surrounds its rename.

Every copy the stager writes -- a whole file (:class:`core.localfs.AtomicFile`) or an
HDF5 copy (:mod:`stager.kinds.h5.write`) -- is written under a temporary name
(:func:`temp_path`) and renamed onto its final name by :func:`rename`, which runs the
active session's ``before_rename`` first (a staging run journals the copy there, so it
cannot appear under its final name unrecorded) and its ``after_rename`` after. A staging
run activates its session around the transfer (``with commit.session(s):``,
:mod:`stager.staging.commits`); outside one (``drain``, tests) the temporary file goes
next to its destination and the rename is plain. So writers know nothing of records,
and every block kind gets the same crash safety from the same code.

Temporary names never contain the final name: ``.stager-tmp-<token>-<n>`` is at most
48 bytes, so every legal name (up to NAME_MAX) can be staged; ``TEMP_MARK`` marks them.
"""
from __future__ import annotations

import contextvars
import itertools
import os
import secrets
from contextlib import contextmanager
from typing import Iterator, Optional, Protocol

__all__ = ["TEMP_MARK", "Session", "session", "active", "temp_path", "default_temp_path",
           "rename"]

#: Every temporary file name starts with this, so leftovers are recognisable.
TEMP_MARK = ".stager-tmp-"

_RANDOM = secrets.token_hex(4)
_counter = itertools.count()


class Session(Protocol):
    """What a staging run does around each commit (see :mod:`stager.staging.commits`)."""

    def temp_path(self, dest: str) -> Optional[str]:
        """The temporary path for ``dest``, or ``None`` for the default (next to it)."""

    def before_rename(self, dest: str, tmp: str, st: os.stat_result,
                      checksum: Optional[str]) -> None:
        """Called with the finished temporary file's ``stat``; raising aborts the commit."""

    def after_rename(self, dest: str) -> None:
        """Called once ``dest`` holds the copy."""


_active: contextvars.ContextVar[Optional[Session]] = contextvars.ContextVar(
    "stager_commit_session", default=None)


@contextmanager
def session(s: Session) -> Iterator[Session]:
    """Make ``s`` the session of every commit in this context."""
    token = _active.set(s)
    try:
        yield s
    finally:
        _active.reset(token)


def active() -> Optional[Session]:
    """The active session, if any."""
    return _active.get()


def default_temp_path(dest: str) -> str:
    """``DIR/.stager-tmp-<pid><random>-<n>`` next to ``dest``: short whatever ``dest`` is."""
    return os.path.join(os.path.dirname(dest),
                        f"{TEMP_MARK}{os.getpid():x}{_RANDOM}-{next(_counter)}")


def temp_path(dest: str) -> str:
    """Where the temporary file of ``dest`` is created (the active session decides)."""
    s = _active.get()
    p = s.temp_path(dest) if s is not None else None
    return p if p is not None else default_temp_path(dest)


def rename(tmp: str, dest: str, st: Optional[os.stat_result] = None,
           checksum: Optional[str] = None) -> None:
    """Commit: ``before_rename`` (journal), ``os.rename(tmp, dest)``, ``after_rename``.

    Parameters
    ----------
    tmp, dest : str
    st : os.stat_result, optional
        The finished temporary file's ``fstat`` (taken here with ``lstat`` if not given).
    checksum : str, optional
        The copy's hex checksum, when the writer knows it already.
    """
    s = _active.get()
    if s is None:
        os.rename(tmp, dest)
        return
    s.before_rename(dest, tmp, st if st is not None else os.lstat(tmp), checksum)
    os.rename(tmp, dest)
    s.after_rename(dest)
