"""What every stream protocol's socket hands the assembler: scan geometry, headers, reasons.

Whatever its wire format, a protocol's socket turns its messages into these
values -- :class:`Begin` (a producer announces a scan's :class:`ScanGeometry`),
:class:`Data` (rows of a sector of a frame), :class:`End` -- and names a rejected
message's :class:`Reason`; the :class:`~streams.assemble.Assembler` takes nothing
else. The native protocol's msgpack headers are
:mod:`streams.protocols.native.headers`, Stream V2's CBOR messages
:mod:`streams.protocols.stream2.streamv2`. Pure: no sockets, no numpy, no wire library.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Optional, Tuple, Union

from streams.errors import ProtocolError

__all__ = ["Reason", "ScanGeometry", "Begin", "Data", "End", "Header", "sector_rows",
           "check_scan_name", "check_dtype", "check_int", "SCAN_RE"]

#: Largest frame a receiver accepts (bytes): a sanity bound, not a tuning knob.
MAX_FRAME_BYTES = 1 << 31

#: What a scan name may be (:func:`check_scan_name` adds: no ``..``).
SCAN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
# numpy type strings of the element types a detector sends; multi-byte types
# must state their byte order, so a receiver never guesses it.
_DTYPE_RE = re.compile(r"(?:[<>|]?[ui]1|[<>](?:[ui][248]|f[48]))\Z")


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

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ScanGeometry:
    """What every ``begin`` of one scan must agree on.

    Attributes
    ----------
    scan : str
        Scan name (letters, digits, ``._-``; at most 128; starts alnum): it names files.
    producers : int
        Number of producers P; each sends ``begin`` and ``end`` to every receiver.
    frames : int
        Frames in the whole scan (over all receivers); equals ``ny * nx``.
    sectors : int
        Sectors per frame; sector s holds rows ``sector_rows(rows, sectors, s)``.
    shape : (int, int)
        Rows and columns of one whole frame.
    dtype : str
        numpy type string of one pixel (``"<u2"``, ``"|u1"``, ``"<f4"``, ...).
    scan_shape : (int, int)
        (ny, nx); frame f is scan position (f // nx, f % nx).
    """

    scan: str
    producers: int
    frames: int
    sectors: int
    shape: Tuple[int, int]
    dtype: str
    scan_shape: Tuple[int, int]

    def __post_init__(self) -> None:
        check_scan_name(self.scan)
        check_dtype(self.dtype)
        for name in ("producers", "frames", "sectors"):
            check_int(name, getattr(self, name), 1)
        rows, cols = _pair("shape", self.shape)
        ny, nx = _pair("scan_shape", self.scan_shape)
        # tuples of int, so that geometries from msgpack lists and from code compare equal
        object.__setattr__(self, "shape", (rows, cols))
        object.__setattr__(self, "scan_shape", (ny, nx))
        if ny * nx != self.frames:
            raise ProtocolError(Reason.MALFORMED, f"scan_shape {ny}x{nx} != frames "
                                f"{self.frames}", self.scan)
        if self.sectors > rows:
            raise ProtocolError(Reason.MALFORMED, f"{self.sectors} sectors for {rows} rows: "
                                "every sector needs at least one row", self.scan)
        if rows * cols * self.itemsize > MAX_FRAME_BYTES:
            raise ProtocolError(Reason.MALFORMED, f"frame of {rows}x{cols} {self.dtype} is "
                                f"over {MAX_FRAME_BYTES} bytes", self.scan)

    @property
    def itemsize(self) -> int:
        return int(self.dtype[-1])

    @property
    def frame_bytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.itemsize

    def sector_rows(self, sector: int) -> Tuple[int, int]:
        return sector_rows(self.shape[0], self.sectors, sector)

    def position(self, frame: int) -> Tuple[int, int]:
        """Scan position (y, x) of ``frame``."""
        return divmod(frame, self.scan_shape[1])


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
    """An ``end`` header: producer ``producer`` sent ``sent`` data messages to this receiver.

    ``sent`` is None only for ends that do not come from the native protocol (a
    Stream V2 ``end`` carries no count).
    """

    scan: str
    producer: int
    sent: Optional[int]


Header = Union[Begin, Data, End]


def sector_rows(rows: int, sectors: int, sector: int) -> Tuple[int, int]:
    """Rows ``[r0, r1)`` of ``sector`` when ``rows`` are split into ``sectors`` bands.

    The split is fixed by the protocol: ``r0 = sector * rows // sectors``.
    """
    return sector * rows // sectors, (sector + 1) * rows // sectors


def check_scan_name(scan: Any) -> str:
    """A scan name names files: 1-128 of ``[A-Za-z0-9._-]``, starting alphanumeric, no
    ``..`` (so never ``/``, never a path that climbs)."""
    if not isinstance(scan, str) or not SCAN_RE.match(scan) or ".." in scan:
        shown = scan if not isinstance(scan, str) or len(scan) <= 40 else \
            f"{scan[:40]}... ({len(scan)} characters)"
        raise ProtocolError(Reason.MALFORMED, f"scan name {shown!r} is not 1-128 characters "
                            "of letters, digits, '.', '_', '-' starting with a letter or digit "
                            "(and without '..')")
    return scan


def check_dtype(dtype: Any) -> str:
    if not isinstance(dtype, str) or not _DTYPE_RE.match(dtype):
        raise ProtocolError(Reason.MALFORMED, f"dtype {dtype!r} is not one of u1, i1, "
                            "<u2, <u4, <u8, <i2, <i4, <i8, <f4, <f8 (or '>' big-endian)")
    return dtype


def check_int(name: str, v: Any, lo: int = 0) -> int:
    """``v`` as an int ``>= lo`` (bools refused), else ``malformed_header`` naming ``name``."""
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        what = "a positive integer" if lo == 1 else f"an integer >= {lo}"
        raise ProtocolError(Reason.MALFORMED, f"{name} must be {what}, not {v!r}")
    return int(v)


def _pair(name: str, v: Any) -> Tuple[int, int]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ProtocolError(Reason.MALFORMED, f"{name} must be a list of two integers, not {v!r}")
    return check_int(f"{name}[0]", v[0], 1), check_int(f"{name}[1]", v[1], 1)
