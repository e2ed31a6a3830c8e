"""Errors of the live-stream layer: one hierarchy under the project's root (core.errors).

A message a receiver cannot use is not an error: it is rejected and counted with
its :class:`~streams.protocol.Reason`. These are the caller's mistakes and what
stops a producer or receiver.
"""
from __future__ import annotations

from core.errors import MpistageError, Refused

__all__ = ["StreamError", "ProtocolError", "RendezvousError", "CodecError", "MissingDependency"]


class StreamError(MpistageError):
    """Base class of every error the stream layer raises on purpose."""


class ProtocolError(StreamError, Refused):
    """A message or value breaks docs/stream-protocol.md: raised by the encoders and
    decoders; receivers turn it into a rejection with its ``reason``."""


class CodecError(StreamError, Refused):
    """A payload could not be encoded or decoded (corrupt or wrong size)."""


class RendezvousError(StreamError):
    """The rendezvous file is missing, unreadable or not ``mpistage-stream/1``."""


class MissingDependency(StreamError):
    """An optional package the stream layer needs is not installed."""

    def __init__(self, package: str, purpose: str) -> None:
        super().__init__(f"{purpose} needs the Python package {package!r}: "
                         f"pip install {package}")
        self.package = package
