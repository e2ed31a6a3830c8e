"""ASI CheeTah TPX3's sparse-array stream as the project reads it: 32-byte headers, CSR chunks.

The byte stream of the detector's data socket (Accos serves it; LiberTEM-live's
``TpxCameraSim`` replays it) is a sequence of messages, each a 32-byte header
whose first byte is its tag, little-endian throughout, packed (no alignment):

=====  ==================  =====================================================
tag    message             fields after the tag (byte offset: type)
=====  ==================  =====================================================
0      acquisition start   1: u8 version; 2: u8 format (0 CSR); 3: u16 nav rows;
                           5: u16 nav cols; 7: u8 indptr dtype; 8: u16 sig rows;
                           10: u16 sig cols; 12: u8 indices dtype; 13: u32 sequence
1      scan start          1: u32 sequence
2      array chunk         1: u8 value dtype; 2: u32 frames N; 6: u32 events L;
                           10: u32 indices offset; 14: u32 values offset
3      scan end            1: u32 sequence
4      acquisition end     1: u32 sequence
=====  ==================  =====================================================

An array chunk's header is followed by its payload: the index pointers (N + 1
of the indptr dtype, from 0 to L), the L pixel indices (``row * cols + col``, of
the indices dtype) at the indices offset, the L values at the values offset:
``values offset + L x value size`` bytes in all. Dtype codes: 2 u8, 3 u16, 4
u32, 5 u64 (0 and 1, bit-packed u1 and u4, are not read here). The other bytes
of a header are reserved (zero). What ``libertem_asi_tpx3`` 0.3.2 writes
(``make_sim_data``) and reads was checked byte by byte; its documented
``metadata_length`` after a scan start is not consumed by that reader, so none is
read here either. ``docs/stream-protocol.md`` section 13 is this table with the bounds.

Pure: no sockets, nothing of ``streams`` (the offline source ``analyses.sources.tpx3``
reads a recorded stream with it; ``streams.protocols.asi_tpx3.wire`` maps
:class:`Tpx3FormatError`'s ``reason`` to the receiver's ``Reason``). Every size is
checked (:func:`chunk_layout`) before anything of its size is allocated, and
:func:`check_csr` checks a payload before it is used.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from kernels.errors import ReaderError

__all__ = ["Tpx3FormatError", "HEADER", "DTYPES", "AcquisitionStart", "ScanStart",
           "ArrayChunk", "ScanEnd", "AcquisitionEnd", "Message", "parse_header", "chunk_layout",
           "check_csr",
           "encode_acquisition_start", "encode_scan_start", "encode_chunk", "encode_scan_end",
           "encode_acquisition_end", "encode_scan", "read_stream_file"]

HEADER = 32
ACQUISITION_START, SCAN_START, ARRAY_CHUNK, SCAN_END, ACQUISITION_END = range(5)
#: dtype code -> numpy dtype (little-endian); 0 (u1) and 1 (u4) are bit-packed: refused
DTYPES: Dict[int, np.dtype] = {2: np.dtype("u1"), 3: np.dtype("<u2"), 4: np.dtype("<u4"),
                               5: np.dtype("<u8")}
_CODE = {v: k for k, v in DTYPES.items()}
FORMAT_CSR = 0
#: the version ``libertem_asi_tpx3`` 0.3.2 writes (any is read; the reports name it)
VERSION = 7

_ACQ = struct.Struct("<BBBHHBHHBI")
_SEQ = struct.Struct("<BI")
_CHUNK = struct.Struct("<BBIIII")


class Tpx3FormatError(ReaderError):
    """Bytes that are not a TPX3 stream's. ``reason``: ``malformed_header``, ``out_of_range``
    or ``too_large`` (the names of ``streams.protocol.Reason``); ``detail``: what was read."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


MALFORMED, OUT_OF_RANGE, TOO_LARGE = "malformed_header", "out_of_range", "too_large"


@dataclass(frozen=True)
class AcquisitionStart:
    version: int
    format_type: int
    nav_shape: Tuple[int, int]
    indptr_dtype: np.dtype
    sig_shape: Tuple[int, int]
    indices_dtype: np.dtype
    sequence: int


@dataclass(frozen=True)
class ScanStart:
    sequence: int


@dataclass(frozen=True)
class ArrayChunk:
    value_dtype: np.dtype
    frames: int
    events: int
    indices_offset: int
    values_offset: int

    @property
    def payload_bytes(self) -> int:
        return self.values_offset + self.events * self.value_dtype.itemsize


@dataclass(frozen=True)
class ScanEnd:
    sequence: int


@dataclass(frozen=True)
class AcquisitionEnd:
    sequence: int


Message = Union[AcquisitionStart, ScanStart, ArrayChunk, ScanEnd, AcquisitionEnd]


def _dtype(code: int, what: str) -> np.dtype:
    dt = DTYPES.get(code)
    if dt is None:
        raise Tpx3FormatError(MALFORMED, f"{what} dtype code {code}: expected 2..5 "
                            "(u8, u16, u32, u64; bit-packed u1/u4 are not read here)")
    return dt


def parse_header(buf: bytes) -> Message:
    """The message of one 32-byte header.

    Raises
    ------
    Tpx3FormatError
        ``malformed_header``: an unknown tag, dtype or format, a zero-sized shape.
    """
    if len(buf) != HEADER:
        raise Tpx3FormatError(MALFORMED, f"TPX3 header of {len(buf)} bytes, not {HEADER}")
    tag = buf[0]
    if tag == ACQUISITION_START:
        _, ver, fmt, ny, nx, ipd, sy, sx, ixd, seq = _ACQ.unpack_from(buf)
        if fmt != FORMAT_CSR:
            raise Tpx3FormatError(MALFORMED, f"TPX3 acquisition start: format {fmt}, "
                                "only CSR (0) is read here")
        if 0 in (ny, nx, sy, sx):
            raise Tpx3FormatError(MALFORMED, f"TPX3 acquisition start: nav shape "
                                f"{ny}x{nx}, sig shape {sy}x{sx}: no side may be 0")
        return AcquisitionStart(ver, fmt, (ny, nx), _dtype(ipd, "indptr"), (sy, sx),
                                _dtype(ixd, "indices"), seq)
    if tag in (SCAN_START, SCAN_END, ACQUISITION_END):
        seq = _SEQ.unpack_from(buf)[1]
        if tag == SCAN_START:
            return ScanStart(seq)
        return ScanEnd(seq) if tag == SCAN_END else AcquisitionEnd(seq)
    if tag == ARRAY_CHUNK:
        _, vd, n, length, io, vo = _CHUNK.unpack_from(buf)
        return ArrayChunk(_dtype(vd, "value"), n, length, io, vo)
    raise Tpx3FormatError(MALFORMED, f"TPX3 header tag {tag}: expected 0..4 (the byte "
                        "stream lost its framing, or it is not a TPX3 data socket)")


def chunk_layout(c: ArrayChunk, acq: AcquisitionStart, frames_left: int,
                 max_bytes: int) -> None:
    """Check an array chunk's header before its payload is taken.

    Raises
    ------
    Tpx3FormatError
        ``malformed_header`` when the offsets are not those of the packed layout (index
        pointers, indices, values, one after the other); ``out_of_range`` when the
        chunk holds no frame or more frames than the scan has left; ``too_large`` when
        the payload is more than ``max_bytes`` (the receiver's bound).
    """
    if c.frames < 1 or c.frames > frames_left:
        raise Tpx3FormatError(OUT_OF_RANGE, f"TPX3 chunk of {c.frames} frames, the scan "
                            f"has {frames_left} left")
    io = (c.frames + 1) * acq.indptr_dtype.itemsize
    vo = io + c.events * acq.indices_dtype.itemsize
    if (c.indices_offset, c.values_offset) != (io, vo):
        raise Tpx3FormatError(MALFORMED, f"TPX3 chunk of {c.frames} frames, {c.events} "
                            f"events: indices at {c.indices_offset}, values at "
                            f"{c.values_offset}; the packed layout puts them at {io}, {vo}")
    if c.payload_bytes > max_bytes:
        raise Tpx3FormatError(TOO_LARGE, f"TPX3 chunk payload of {c.payload_bytes} "
                            f"bytes, more than this receiver's bound of {max_bytes} "
                            "(a share of --memory)")


def check_csr(c: ArrayChunk, acq: AcquisitionStart, payload: memoryview
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunk's (indptr, indices, values), views of ``payload``, once checked.

    Raises
    ------
    Tpx3FormatError
        ``out_of_range``: index pointers that do not run from 0 to the event count
        without decreasing, or a pixel index past the frame.
    """
    indptr = np.frombuffer(payload, acq.indptr_dtype, c.frames + 1)
    indices = np.frombuffer(payload, acq.indices_dtype, c.events, c.indices_offset)
    values = np.frombuffer(payload, c.value_dtype, c.events, c.values_offset)
    if indptr[0] != 0 or indptr[-1] != c.events or np.any(indptr[1:] < indptr[:-1]):
        raise Tpx3FormatError(OUT_OF_RANGE, f"TPX3 chunk index pointers "
                            f"[{indptr[0]}, ..., {indptr[-1]}] do not run from 0 to its "
                            f"{c.events} events without decreasing")
    pixels = acq.sig_shape[0] * acq.sig_shape[1]
    if c.events and int(indices.max()) >= pixels:
        raise Tpx3FormatError(OUT_OF_RANGE, f"TPX3 chunk pixel index "
                            f"{int(indices.max())}, the frame has {pixels} pixels")
    return indptr, indices, values


def read_stream_file(path: str) -> Tuple[AcquisitionStart, np.ndarray, np.ndarray, np.ndarray]:
    """The first acquisition of a recorded stream (``--dump``, or what ``TpxCameraSim``
    replays): its start and its scan's frames as CSR ``(indptr int64, indices uint32,
    values uint32)``, every frame of the nav shape. A chunk's payload is bounded by the
    bytes the file has left before it is read.

    Raises
    ------
    ReaderError
        Naming ``path``, the byte offset and frame where it stops being a stream, and what
        to do.
    """
    size = os.path.getsize(path)
    acq: Optional[AcquisitionStart] = None
    ips: List[np.ndarray] = []
    ixs: List[np.ndarray] = []
    vs: List[np.ndarray] = []
    frame = at = events = total = 0
    hint = ("record the whole acquisition again (streams.simulate --dump, or the "
            "detector's stream to its acquisition end)")
    with open(path, "rb") as f:
        while True:
            head = f.read(HEADER)
            if not head and acq is not None and frame == total:
                break           # the acquisition end may be missing in a recording
            where = f"{path}: byte {at}, frame {frame}"
            if len(head) < HEADER:
                inside = f" inside a {HEADER}-byte header" if head else ""
                raise ReaderError(f"{where}: the file ends{inside} before the scan's "
                                  f"{total} frames (truncated); {hint}")
            try:
                m = parse_header(head)
                if isinstance(m, AcquisitionStart):
                    if acq is not None:
                        break       # a second acquisition: the first is this run's
                    acq, total = m, m.nav_shape[0] * m.nav_shape[1]
                elif isinstance(m, ArrayChunk):
                    if acq is None:
                        raise Tpx3FormatError(MALFORMED, "an array chunk before any "
                                              "acquisition start")
                    chunk_layout(m, acq, total - frame, size - at - HEADER)
                    payload = f.read(m.payload_bytes)
                    ip, ix, v = check_csr(m, acq, memoryview(payload))
                    if m.events and int(v.max()) > np.iinfo(np.uint32).max:
                        raise Tpx3FormatError(OUT_OF_RANGE, f"value {int(v.max())} past "
                                              "uint32")
                    ips.append(ip[1:].astype(np.int64) + events)
                    events += m.events
                    ixs.append(ix.astype(np.uint32))
                    vs.append(v.astype(np.uint32))
                    frame += m.frames
                    at += m.payload_bytes
                elif isinstance(m, AcquisitionEnd) and acq is not None:
                    if frame == total:
                        break
            except Tpx3FormatError as e:
                detail = e.detail
                if e.reason == TOO_LARGE:   # the bound here is the file's end
                    detail = (f"a chunk of {m.frames} frames announces {m.payload_bytes} "  # type: ignore[union-attr]
                              f"payload bytes, the file has {size - at - HEADER} left "
                              "(truncated)")
                raise ReaderError(f"{where}: {detail}: not a whole TPX3 stream; "
                                  f"{hint}") from None
            at += HEADER
    if acq is None:
        raise ReaderError(f"{path}: no TPX3 acquisition start (an empty or foreign file); "
                          "give a stream recorded with streams.simulate --dump")
    indptr = np.concatenate([np.zeros(1, np.int64), *ips])
    return (acq, indptr, np.concatenate([*ixs, np.zeros(0, np.uint32)]),
            np.concatenate([*vs, np.zeros(0, np.uint32)]))


# ---- encoding (the simulator's; tests use it to build hostile streams) ----

def _pad(b: bytes) -> bytes:
    return b + bytes(HEADER - len(b))


def encode_acquisition_start(nav_shape: Sequence[int], sig_shape: Sequence[int],
                             sequence: int = 1, version: int = VERSION,
                             indptr_dtype: str = "<u4", indices_dtype: str = "<u4") -> bytes:
    return _pad(_ACQ.pack(ACQUISITION_START, version, FORMAT_CSR, *nav_shape,
                          _CODE[np.dtype(indptr_dtype)], *sig_shape,
                          _CODE[np.dtype(indices_dtype)], sequence))


def encode_scan_start(sequence: int = 1) -> bytes:
    return _pad(_SEQ.pack(SCAN_START, sequence))


def encode_scan_end(sequence: int = 1) -> bytes:
    return _pad(_SEQ.pack(SCAN_END, sequence))


def encode_acquisition_end(sequence: int = 1) -> bytes:
    return _pad(_SEQ.pack(ACQUISITION_END, sequence))


def encode_chunk(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                 indptr_dtype: str = "<u4", indices_dtype: str = "<u4") -> bytes:
    """One array chunk (header and payload) of CSR rows ``indptr`` (from 0)."""
    ip = np.asarray(indptr).astype(indptr_dtype)
    ix = np.asarray(indices).astype(indices_dtype)
    v = np.asarray(values)
    v = v.astype(v.dtype.newbyteorder("<"))
    io = ip.nbytes
    return _pad(_CHUNK.pack(ARRAY_CHUNK, _CODE[np.dtype(v.dtype)], len(ip) - 1, len(ix), io,
                            io + ix.nbytes)) + ip.tobytes() + ix.tobytes() + v.tobytes()


def encode_scan(nav_shape: Sequence[int], sig_shape: Sequence[int], indptr: np.ndarray,
                indices: np.ndarray, values: np.ndarray, chunk_frames: Optional[int] = None,
                sequence: int = 1) -> bytes:
    """A whole acquisition of one scan (the CSR matrix of all its frames), as chunks of
    ``chunk_frames`` frames (default: one chunk, as ``make_sim_data`` writes it)."""
    n = int(nav_shape[0]) * int(nav_shape[1])
    if len(indptr) != n + 1:
        raise ValueError(f"indptr of {len(indptr)} entries for {n} frames")
    k = chunk_frames or n
    parts = [encode_acquisition_start(nav_shape, sig_shape, sequence),
             encode_scan_start(sequence)]
    for f0 in range(0, n, k):
        f1 = min(n, f0 + k)
        a, b = int(indptr[f0]), int(indptr[f1])
        parts.append(encode_chunk(np.asarray(indptr[f0:f1 + 1]) - a, indices[a:b], values[a:b]))
    parts += [encode_scan_end(sequence), encode_acquisition_end(sequence)]
    return b"".join(parts)
