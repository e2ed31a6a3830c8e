"""Errors of the analyses: one hierarchy under the project's root (core.errors).

An analysis that cannot run (a bad name, options it refuses, inputs it cannot
read), a source it cannot read, and a scan geometry that breaks the rules every
analysis relies on (:class:`GeometryError`: a receiving job rejects such a
``begin`` as ``malformed_header``).
"""
from __future__ import annotations

from core.errors import MpistageError

__all__ = ["AnalysisError", "GeometryError", "UDFError"]


class AnalysisError(MpistageError):
    """Base class of every error the analyses raise on purpose."""


class GeometryError(AnalysisError, ValueError):
    """A scan geometry, scan name or pixel type that is not allowed (the message says
    which field and why). ``reason`` is the rejection's name on a stream; ``scan`` and
    ``kind`` say, where known, which scan and which message carried it. A ``ValueError``
    too: a bad value."""

    def __init__(self, reason: str, detail: str, scan: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.scan = scan
        self.kind = kind


class UDFError(AnalysisError):
    """A UDF cannot run here (the message names the UDF and the feature)."""
