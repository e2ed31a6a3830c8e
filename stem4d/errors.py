"""stem4d's errors: one class, a :class:`streams.errors.StreamError` (so a
receiving job reports it like any analysis error) and a ``ValueError``."""
from __future__ import annotations

from streams.errors import StreamError

__all__ = ["Stem4DError"]


class Stem4DError(StreamError, ValueError):
    """A parameter, an input file or the frames cannot give a correct result;
    the message names what and says what to pass instead."""
