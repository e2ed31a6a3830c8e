"""stem4d's errors: one class under the project's root (:class:`core.errors.MpistageError`,
so a receiving job or a command reports it as any error of ours) and a ``ValueError``."""
from __future__ import annotations

from core.errors import MpistageError

__all__ = ["Stem4DError"]


class Stem4DError(MpistageError, ValueError):
    """A parameter, an input file or the frames cannot give a correct result;
    the message names what and says what to pass instead."""
