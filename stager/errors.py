"""The stager's error hierarchy: every failure a user can cause or meet is one of these.

Messages name the rank, host and file where they apply, and say what to do.
"""
from __future__ import annotations

__all__ = ["StagerError", "OptionError", "PlanError", "OutputError", "CapacityError",
           "TransferError", "VerifyError", "Interrupted"]


class StagerError(Exception):
    """Base class of every error the stager raises on purpose.

    Collective functions raise the same ``StagerError`` (same message) on every
    rank of the communicator, so callers may handle it identically everywhere.
    """


class OptionError(StagerError):
    """An option, or the environment it names, cannot be used on some rank (an unset
    ``--node-id-env`` variable); the same on every rank. Bad input: commands exit 2."""


class PlanError(StagerError):
    """The spec expanded to an impossible or empty plan (no match, a conflict)."""


class OutputError(PlanError):
    """An output would be written over an input, or over a file this project did not write
    (:mod:`stager.outputs`); nothing was written. Bad input: commands exit 2."""


class CapacityError(StagerError):
    """A node has not enough free space at a destination; nothing was written."""


class TransferError(StagerError):
    """Reading, exchanging, writing or checking a file failed on some rank."""


class VerifyError(StagerError):
    """A staged copy no longer matches its manifest."""


class Interrupted(StagerError):
    """SIGINT or SIGTERM stopped a run; every complete copy is recorded, a re-run resumes.

    ``signum`` is the signal (``None`` when only the message crossed ranks).
    """

    def __init__(self, message: str, signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = signum
