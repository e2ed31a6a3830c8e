"""hedm's errors: one root under the project's (:class:`core.errors.MpistageError`), so a
receiving job, a flow and a command report them as any error of ours; a test or caller
that cares catches :class:`HedmError`."""
from __future__ import annotations

from core.errors import MpistageError

__all__ = ["HedmError"]


class HedmError(MpistageError):
    """Base class of every error the HEDM analyses and flows raise on purpose: a parameter,
    a background or dark, or the frames cannot give a correct result (the message says
    what to give instead)."""
