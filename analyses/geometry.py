"""The scan geometry every analysis sees, and its checks.

A stream's ``begin`` announces it, a file source reads it; either way
:class:`ScanGeometry` checks every field, and a value that breaks a rule is a
:class:`~analyses.errors.GeometryError` whose ``reason`` is how a receiving job
rejects it. Pure: no numpy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Tuple

from analyses.errors import GeometryError

__all__ = ["ScanGeometry", "sector_rows", "check_scan_name", "check_dtype", "check_int",
           "SCAN_RE", "MAX_FRAME_BYTES", "MALFORMED"]

#: The rejection a receiving job counts for a geometry that breaks a rule.
MALFORMED = "malformed_header"

#: Largest frame a receiver accepts (bytes): a sanity bound, not a tuning knob.
MAX_FRAME_BYTES = 1 << 31

#: What a scan name may be (:func:`check_scan_name` adds: no ``..``).
SCAN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
# numpy type strings of the element types a detector sends; multi-byte types
# must state their byte order, so a receiver never guesses it.
_DTYPE_RE = re.compile(r"(?:[<>|]?[ui]1|[<>](?:[ui][248]|f[48]))\Z")


@dataclass(frozen=True)
class ScanGeometry:
    """What every ``begin`` of one scan must agree on.

    ``scan`` names files (letters, digits, ``._-``, at most 128, starting alnum);
    ``producers`` P each send ``begin`` and ``end`` to every receiver; ``frames`` (all
    receivers') equals ``ny * nx`` of ``scan_shape``, frame f at ``divmod(f, nx)``;
    ``sectors`` row bands per frame (:func:`sector_rows`); ``shape`` (rows, cols) and
    ``dtype`` (a numpy type string) of one frame.
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
            raise GeometryError(MALFORMED, f"scan_shape {ny}x{nx} != frames "
                                f"{self.frames}", self.scan)
        if self.sectors > rows:
            raise GeometryError(MALFORMED, f"{self.sectors} sectors for {rows} rows: "
                                "every sector needs at least one row", self.scan)
        if rows * cols * self.itemsize > MAX_FRAME_BYTES:
            raise GeometryError(MALFORMED, f"frame of {rows}x{cols} {self.dtype} is "
                                f"over {MAX_FRAME_BYTES} bytes", self.scan)

    @property
    def itemsize(self) -> int:
        return int(self.dtype[-1])

    @property
    def frame_bytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.itemsize

    def sector_rows(self, sector: int) -> Tuple[int, int]:
        return sector_rows(self.shape[0], self.sectors, sector)


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
        raise GeometryError(MALFORMED, f"scan name {shown!r} is not 1-128 characters "
                            "of letters, digits, '.', '_', '-' starting with a letter or digit "
                            "(and without '..')")
    return scan


def check_dtype(dtype: Any) -> str:
    if not isinstance(dtype, str) or not _DTYPE_RE.match(dtype):
        raise GeometryError(MALFORMED, f"dtype {dtype!r} is not one of u1, i1, "
                            "<u2, <u4, <u8, <i2, <i4, <i8, <f4, <f8 (or '>' big-endian)")
    return dtype


def check_int(name: str, v: Any, lo: int = 0) -> int:
    """``v`` as an int ``>= lo`` (bools refused), else ``malformed_header`` naming ``name``."""
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        what = "a positive integer" if lo == 1 else f"an integer >= {lo}"
        raise GeometryError(MALFORMED, f"{name} must be {what}, not {v!r}")
    return int(v)


def _pair(name: str, v: Any) -> Tuple[int, int]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise GeometryError(MALFORMED, f"{name} must be a list of two integers, not {v!r}")
    return check_int(f"{name}[0]", v[0], 1), check_int(f"{name}[1]", v[1], 1)
