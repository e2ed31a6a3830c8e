"""The stager's error hierarchy: every failure a user can cause or meet is one of these
(or one of the shared base's, :mod:`core.errors`: a job that cannot be laid out, an
untrusted local path, an interrupted run).

Messages name the rank, host and file where they apply, and say what to do.
"""
from __future__ import annotations

from core.errors import Interrupted, MpistageError, OutputError

__all__ = ["StagerError", "PlanError", "CapacityError", "TransferError", "VerifyError",
           "KEPT"]


class StagerError(MpistageError):
    """Base class of every error the stager raises on purpose.

    Collective functions raise the same ``StagerError`` (same message) on every
    rank of the communicator, so callers may handle it identically everywhere.
    """


class PlanError(StagerError):
    """The spec expanded to an impossible or empty plan (no match, a conflict)."""


class CapacityError(StagerError):
    """A node has not enough free space at a destination; nothing was written."""


class TransferError(StagerError):
    """Reading, exchanging, writing or checking a file failed on some rank."""


class VerifyError(StagerError):
    """A staged copy no longer matches its manifest."""


#: What keeps its class when the stager's ranks agree on a failure (``agreed(base=KEPT)``):
#: the stager's own errors, an interrupt, an output over an input; anything else -- an
#: untrusted local path, an ``OSError`` -- becomes the phase's error (``TransferError``).
KEPT = (StagerError, Interrupted, OutputError)
