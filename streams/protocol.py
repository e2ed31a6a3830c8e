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
    """Why a receiver rejected a message. The value is the name in reports and JSON."""

    MALFORMED = "malformed_header"
    """Not two frames; header not a msgpack map of at most 4096 bytes; ``kind`` unknown;
    a required field missing or of the wrong type; a value impossible on its own
    (negative index, empty rows, bad scan name or dtype); payload of begin/end not empty."""
    ENCODING = "unknown_encoding"
    """``encoding`` is a string but not ``raw``, ``lz4`` or ``bslz4``."""
    UNKNOWN_SCAN = "unknown_scan"
    """``data`` or ``end`` for a scan of which no ``begin`` arrived."""
    LATE = "late"
    """A message for a scan that this receiver has already closed (end or timeout), or
    a sector of a partition already delivered because the memory budget was full."""
    WRONG_RECEIVER = "wrong_receiver"
    """``frame mod R`` is not this receiver's index (the producer routed it wrong)."""
    OUT_OF_RANGE = "out_of_range"
    """``frame`` >= frames, ``sector`` >= sectors, ``rows`` not the sector's rows, or
    ``producer`` >= producers."""
    DUPLICATE = "duplicate"
    """A sector that already arrived, or a second ``begin``/``end`` from one producer."""
    CONFLICT = "conflict"
    """A ``begin`` whose geometry differs from the scan's first ``begin``."""
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    """A second copy of a sector whose content differs from the first (digests compared):
    the frame is marked conflicting and the scan's result is invalid (never served)."""
    TOKEN = "wrong_token"
    """A ``begin`` without the job's token, or with another job's (a replay of an earlier
    job's stream, a producer pointed at the wrong job)."""
    NAME_USED = "scan_name_used"
    """A ``begin`` for a scan name this job has already served: every scan needs a new name."""
    PAYLOAD_SIZE = "wrong_payload_size"
    """The (decoded) payload is not rows x cols x itemsize bytes."""
    CORRUPT = "corrupt_payload"
    """An ``lz4``/``bslz4`` payload that does not decode."""
    BUSY = "busy"
    """A ``begin`` for a new scan while the receiver already holds ``--max-open-scans``
    open scans, or after the job finalized its ``--scans``; the open scans go on."""
    TOO_LARGE = "too_large"
    """A ``begin`` for a scan whose whole cost here (:func:`streams.bounds.scan_cost`: two
    partitions, the accounting, the analysis's state, live snapshot and output) is more
    than ``--memory``. Refused before anything is allocated."""
    SCAN_SHAPE = "scan_shape"
    """A detector's series (acquisition) whose image count the job's scan shape
    (``--dectris-scan-shape``, ``--merlin-scan-shape``) does not hold: refused at its
    arming, and the job ends saying so (it would never be received)."""

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

