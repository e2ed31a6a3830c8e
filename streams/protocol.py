"""What every stream protocol's socket hands the assembler: scan geometry, headers, reasons.

Whatever its wire format, a protocol's socket turns its messages into
:class:`Begin` (a scan's :class:`ScanGeometry`), :class:`Data` (rows of a sector
of a frame) and :class:`End`, and names a rejection's :class:`Reason`; the
:class:`~streams.assemble.Assembler` takes nothing else. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Optional, Union

from analyses.errors import GeometryError
from analyses.geometry import (SCAN_RE, ScanGeometry, check_dtype, check_int, check_scan_name,
                               sector_rows)
from streams.errors import ProtocolError

__all__ = ["Reason", "ScanGeometry", "Begin", "Data", "End", "Header", "sector_rows",
           "check_scan_name", "check_dtype", "check_int", "SCAN_RE", "rejection"]


class Reason(str, Enum):
    """Why a receiver rejected a message; the value is the name in reports and JSON, and
    ``docs/stream-protocol.md`` section 5 says when each applies."""

    MALFORMED = "malformed_header"
    ENCODING = "unknown_encoding"
    UNKNOWN_SCAN = "unknown_scan"
    LATE = "late"
    WRONG_RECEIVER = "wrong_receiver"
    OUT_OF_RANGE = "out_of_range"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    TOKEN = "wrong_token"
    NAME_USED = "scan_name_used"
    PAYLOAD_SIZE = "wrong_payload_size"
    CORRUPT = "corrupt_payload"
    BUSY = "busy"
    TOO_LARGE = "too_large"
    SCAN_SHAPE = "scan_shape"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Begin:
    """A ``begin`` header: one producer announces a scan to one receiver.

    ``token`` is the receiving job's token as the producer read it from the rendezvous
    file (None: the protocol carries none, as Stream V2's start)."""

    producer: int
    geometry: ScanGeometry
    token: Optional[str] = None

    @property
    def scan(self) -> str:
        return self.geometry.scan


class Data(NamedTuple):
    """A ``data`` header: rows ``r0:r1`` of sector ``sector`` of frame ``frame``."""

    scan: str
    frame: int
    sector: int
    r0: int
    r1: int
    encoding: str


@dataclass(frozen=True)
class End:
    """An ``end`` header: ``producer`` sent ``sent`` data messages to this receiver (None:
    a protocol whose ``end`` carries no count, as Stream V2's)."""

    scan: str
    producer: int
    sent: Optional[int]


Header = Union[Begin, Data, End]


def rejection(e: Union[GeometryError, ProtocolError]) -> ProtocolError:
    """A scan geometry's broken rule as the protocol error a receiver rejects it with."""
    return e if isinstance(e, ProtocolError) else ProtocolError(Reason(e.reason), e.detail,
                                                                e.scan, e.kind)

