"""Errors of the analyses: one hierarchy under the project's root (core.errors): an
analysis or source that cannot be used, and a :class:`GeometryError` (a receiving
job rejects such a ``begin`` as ``malformed_header``)."""
from __future__ import annotations

from core.errors import MpistageError, Refused

__all__ = ["AnalysisError", "GeometryError", "UDFError"]


class AnalysisError(MpistageError):
    """Base class of every error the analyses raise on purpose."""


class GeometryError(AnalysisError, Refused, ValueError):
    """A scan geometry, scan name or pixel type that is not allowed (:class:`Refused`:
    ``reason`` is the rejection's name on a stream, ``detail`` which field and why). A
    ``ValueError`` too: a bad value."""


class UDFError(AnalysisError):
    """A UDF cannot run here (the message names the UDF and the feature)."""
