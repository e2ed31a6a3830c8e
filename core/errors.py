"""The root of every error mpistage raises on purpose, and the errors of the shared base.

Each package has its own hierarchy under :class:`MpistageError`: the stager's
``StagerError``, the stream layer's ``StreamError``, the workflow runtime's
``WorkflowError`` are siblings, so a command line that handles "ours" catches
the root and prints the message, and a test or caller that cares catches one
package's class. The errors here are those the base itself raises: a job that
cannot be laid out, a local path that cannot be trusted (``core.localfs``,
``core.trusted``), an interrupted run (``core.interrupt``), a name missing from
a plug-in table (``core.table``), an output over an input (``core.outputs``).

Messages name the rank, host and file where they apply, and say what to do.
"""
from __future__ import annotations

__all__ = ["MpistageError", "Refused", "JobError", "LocalFileError", "Interrupted", "UnknownName",
           "OutputError"]


class MpistageError(Exception):
    """Base class of every error mpistage raises on purpose.

    Collective functions raise the same error (same class and message) on every
    rank of the communicator (``core.mpi.agree``), so callers may handle it
    identically everywhere.
    """


class Refused(MpistageError):
    """A value refused for a named reason: ``reason`` is what a receiver counts the
    rejection under, ``detail`` which field and why, ``scan`` and ``kind`` (where known)
    which scan and which message carried it. The stream layer's protocol and codec
    errors and the analyses' geometry error are its kinds."""

    def __init__(self, reason: str, detail: str, scan: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.scan = scan
        self.kind = kind


class JobError(MpistageError):
    """The ranks cannot form nodes as asked (a node id variable unset on some rank,
    a node name unusable as a directory name); the same on every rank. Bad input:
    commands exit 2."""


class LocalFileError(MpistageError):
    """A node-local file or directory could not be written, read or trusted."""


class Interrupted(MpistageError):
    """SIGINT or SIGTERM stopped a run; every complete copy is recorded, a re-run resumes.

    ``signum`` is the signal (``None`` when only the message crossed ranks).
    """

    def __init__(self, message: str, signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = signum


class UnknownName(MpistageError, ValueError):
    """A name that is not a row of a plug-in table (:class:`core.table.Table`); the
    message lists the known names. A ``ValueError`` too: a bad option value."""


class OutputError(MpistageError, ValueError):
    """An output would be written over an input, or over a file this project did not write
    (:mod:`core.outputs`); nothing was written. Bad input (a ``ValueError``): commands
    exit 2."""
