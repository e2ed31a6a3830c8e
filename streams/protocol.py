"""The native wire protocol ``mpistage-stream/1``: header schema, encoding, validation.

Every message is two ZeroMQ frames: a msgpack header and a payload. This module
turns header bytes into typed values (:class:`Begin`, :class:`Data`, :class:`End`)
and back, and names the reasons a receiver may reject a message
(:class:`Reason`). It is pure: no sockets, no numpy; msgpack is imported by the
functions that use it. ``docs/stream-protocol.md`` is the normative text; the
rules below implement it one to one.

Range checks that need the scan's geometry (frame < frames, a sector's rows)
belong to the assembler, which knows the geometry from ``begin``; this module
checks what one header alone can tell.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Optional, Tuple, Union

from streams.errors import ProtocolError

__all__ = [
    "PROTOCOL", "ENCODINGS", "MAX_HEADER_BYTES", "Reason", "ScanGeometry", "Begin", "Data",
    "End", "Header", "decode_header", "encode_begin", "encode_data", "encode_end",
    "sector_rows", "route", "check_scan_name", "check_dtype",
]

PROTOCOL = "mpistage-stream/1"
ENCODINGS = ("raw", "lz4", "bslz4")
#: A header longer than this is rejected unread (``malformed_header``).
MAX_HEADER_BYTES = 4096
#: Largest frame a receiver accepts (bytes): a sanity bound, not a tuning knob.
MAX_FRAME_BYTES = 1 << 31

_SCAN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
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
    PAYLOAD_SIZE = "wrong_payload_size"
    """The (decoded) payload is not rows x cols x itemsize bytes."""
    CORRUPT = "corrupt_payload"
    """An ``lz4``/``bslz4`` payload that does not decode."""
    BUSY = "busy"
    """A ``begin`` for a new scan while the receiver already holds its maximum of open scans."""
    TOO_LARGE = "too_large"
    """A ``begin`` for a scan this receiver cannot hold within its memory bound: two
    partitions of its frames, or its accounting (``frames x (sectors + 3)`` bytes), are
    more than ``--memory``. Refused before anything is allocated."""

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
        _positive("producers", self.producers)
        _positive("frames", self.frames)
        _positive("sectors", self.sectors)
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
    """A ``begin`` header: one producer announces a scan to one receiver."""

    producer: int
    geometry: ScanGeometry

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


def route(frame: int, receivers: int) -> int:
    """Index of the receiver that gets every sector of ``frame``: ``frame mod R``."""
    return frame % receivers


def check_scan_name(scan: Any) -> str:
    """A scan name names files: 1-128 of ``[A-Za-z0-9._-]``, starting alphanumeric, no
    ``..`` (so never ``/``, never a path that climbs)."""
    if not isinstance(scan, str) or not _SCAN_RE.match(scan) or ".." in scan:
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


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive(name: str, v: Any) -> int:
    if not _is_int(v) or v < 1:
        raise ProtocolError(Reason.MALFORMED, f"{name} must be a positive integer, not {v!r}")
    return int(v)


def _index(name: str, v: Any) -> int:
    if not _is_int(v) or v < 0:
        raise ProtocolError(Reason.MALFORMED, f"{name} must be an integer >= 0, not {v!r}")
    return int(v)


def _pair(name: str, v: Any) -> Tuple[int, int]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ProtocolError(Reason.MALFORMED, f"{name} must be a list of two integers, not {v!r}")
    return _positive(f"{name}[0]", v[0]), _positive(f"{name}[1]", v[1])


def _field(h: dict, key: str) -> Any:
    try:
        return h[key]
    except KeyError:
        raise ProtocolError(Reason.MALFORMED, f"{h.get('kind')} header has no {key!r}",
                            h.get("scan") if isinstance(h.get("scan"), str) else None) from None


def decode_header(buf: Any) -> Header:
    """Parse and check one header frame.

    Parameters
    ----------
    buf : bytes-like
        The first frame of a message.

    Returns
    -------
    Begin | Data | End

    Raises
    ------
    ProtocolError
        With ``reason`` ``malformed_header`` or ``unknown_encoding`` and, when the
        header names a well-formed scan, ``scan``.
    """
    import msgpack

    if len(buf) > MAX_HEADER_BYTES:
        raise ProtocolError(Reason.MALFORMED, f"header of {len(buf)} bytes (max "
                            f"{MAX_HEADER_BYTES})")
    try:
        h = msgpack.unpackb(buf, raw=False, use_list=True, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(Reason.MALFORMED, f"header is not msgpack ({type(e).__name__}: "
                            f"{e})") from None
    if not isinstance(h, dict):
        raise ProtocolError(Reason.MALFORMED, f"header is a msgpack {type(h).__name__}, "
                            "not a map")
    kind = h.get("kind")
    scan = h.get("scan")
    scan_ok = isinstance(scan, str) and _SCAN_RE.match(scan) is not None and ".." not in scan
    try:
        if kind == "data":
            scan = check_scan_name(scan)
            encoding = _field(h, "encoding")
            frame = _index("frame", _field(h, "frame"))
            sector = _index("sector", _field(h, "sector"))
            rows = _field(h, "rows")
            if not isinstance(rows, list) or len(rows) != 2:
                raise ProtocolError(Reason.MALFORMED, f"rows must be [r0, r1], not {rows!r}")
            r0, r1 = _index("rows[0]", rows[0]), _index("rows[1]", rows[1])
            if r1 <= r0:
                raise ProtocolError(Reason.MALFORMED, f"rows [{r0}, {r1}] is empty")
            if not isinstance(encoding, str):
                raise ProtocolError(Reason.MALFORMED, f"encoding must be a string, not "
                                    f"{encoding!r}")
            if encoding not in ENCODINGS:
                raise ProtocolError(Reason.ENCODING, f"encoding {encoding!r} is not one of "
                                    f"{', '.join(ENCODINGS)}")
            return Data(scan, frame, sector, r0, r1, encoding)
        if kind == "begin":
            geometry = ScanGeometry(
                scan=check_scan_name(scan),
                producers=_positive("producers", _field(h, "producers")),
                frames=_positive("frames", _field(h, "frames")),
                sectors=_positive("sectors", _field(h, "sectors")),
                shape=_pair("shape", _field(h, "shape")),
                dtype=check_dtype(_field(h, "dtype")),
                scan_shape=_pair("scan_shape", _field(h, "scan_shape")))
            return Begin(_index("producer", _field(h, "producer")), geometry)
        if kind == "end":
            return End(check_scan_name(scan), _index("producer", _field(h, "producer")),
                       _index("sent", _field(h, "sent")))
    except ProtocolError as e:
        if e.scan is None and scan_ok:
            e.scan = scan
        e.kind = kind if isinstance(kind, str) else None
        raise
    raise ProtocolError(Reason.MALFORMED, f"kind {kind!r} is not 'begin', 'data' or 'end'",
                        scan if scan_ok else None)


def _pack(h: dict) -> bytes:
    import msgpack

    return msgpack.packb(h, use_bin_type=True)


def encode_begin(geometry: ScanGeometry, producer: int) -> bytes:
    """Header of a ``begin`` message from ``producer`` (payload: empty)."""
    if not _is_int(producer) or not 0 <= producer < geometry.producers:
        raise ProtocolError(Reason.OUT_OF_RANGE, f"producer {producer!r} not in "
                            f"[0, {geometry.producers})", geometry.scan)
    g = geometry
    return _pack({"kind": "begin", "scan": g.scan, "producer": int(producer),
                  "producers": g.producers, "frames": g.frames, "sectors": g.sectors,
                  "shape": [int(g.shape[0]), int(g.shape[1])], "dtype": g.dtype,
                  "scan_shape": [int(g.scan_shape[0]), int(g.scan_shape[1])]})


def encode_data(scan: str, frame: int, sector: int, rows: Tuple[int, int],
                encoding: str = "raw") -> bytes:
    """Header of a ``data`` message (payload: rows ``rows[0]:rows[1]``, encoded)."""
    if encoding not in ENCODINGS:
        raise ProtocolError(Reason.ENCODING, f"encoding {encoding!r} is not one of "
                            f"{', '.join(ENCODINGS)}", scan)
    return _pack({"kind": "data", "scan": scan, "frame": int(frame), "sector": int(sector),
                  "rows": [int(rows[0]), int(rows[1])], "encoding": encoding})


def encode_end(scan: str, producer: int, sent: int) -> bytes:
    """Header of an ``end`` message (payload: empty)."""
    return _pack({"kind": "end", "scan": scan, "producer": int(producer), "sent": int(sent)})
