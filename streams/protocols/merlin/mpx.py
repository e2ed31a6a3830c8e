"""Quantum Detectors Merlin (Medipix3) TCP stream: MPX framing, the ``HDR`` acquisition
header, ``MQ1`` frames; decoded and encoded.

The data port (6342) carries a byte stream of messages, each ``MPX,`` + ten decimal
digits N + ``,`` + N - 1 bytes (the length counts the comma before the payload; what
LiberTEM-live's simulator and reader use). A payload is either

``HDR,`` ...
    the acquisition header, lines ``Key:<TAB>value`` up to ``End``:
    ``Frames in Acquisition (Number)``, ``Frames per Trigger (Number)``, ``Counter
    Depth (number)``, ...; or
``MQ1,`` ...
    one frame: a comma-separated text header of ``header size`` bytes (field 2,
    zero-padded): sequence number (1), header size (2), chips (3), width (4),
    height (5), pixel type (6: ``U08``/``U16``/``U32``, or ``R64`` raw), sensor layout
    (7), ..., the counter depth last; then the pixels, big-endian. Counter depths
    1 and 6 come as ``U08``, 12 as ``U16``, 24 as ``U32``; raw (``R64``) packs 1-bit
    pixels 64 to a big-endian word, 6- and 12-bit pixels in groups of 8 / 4 in
    reversed order (the decoders of LiberTEM's ``mib.py``, here vectorised).

Every length is bounded before a buffer is taken for it
(:data:`MAX_MESSAGE`); a frame whose size does not follow from its header is a
:class:`~streams.errors.ProtocolError` naming the frame.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Tuple

import numpy as np

from streams.errors import ProtocolError
from streams.protocol import Reason

__all__ = ["PREFIX", "MAX_MESSAGE", "FrameHeader", "parse_prefix", "parse_hdr",
           "parse_frame_header", "decode_pixels", "encode_message", "encode_hdr",
           "encode_frame", "images_of"]

PREFIX = 15                      # b"MPX," + 10 digits + b","
MAX_MESSAGE = 1 << 30
_PREFIX = re.compile(rb"^MPX,(\d{10}),$")
_U = {"U01": "|u1", "U08": "|u1", "U16": ">u2", "U32": ">u4"}
_U_NATIVE = {"U01": "|u1", "U08": "|u1", "U16": "<u2", "U32": "<u4"}
#: raw counter depth -> bytes per pixel (1-bit: 1/8)
_RAW = {1: 0.125, 6: 1, 12: 2}


def parse_prefix(prefix: bytes) -> int:
    """``MPX,NNNNNNNNNN,`` -> the payload's length in bytes.

    Raises
    ------
    ProtocolError
        ``malformed_header`` (not the framing: the stream cannot be resynchronised)
        or ``too_large`` (over :data:`MAX_MESSAGE`).
    """
    m = _PREFIX.match(bytes(prefix))
    if m is None:
        raise ProtocolError(Reason.MALFORMED, f"not an MPX message: {bytes(prefix)[:15]!r}")
    n = int(m.group(1)) - 1
    if n < 1:
        raise ProtocolError(Reason.MALFORMED, f"MPX length {n + 1}: an empty message")
    if n > MAX_MESSAGE:
        raise ProtocolError(Reason.TOO_LARGE, f"MPX message of {n} bytes, more than "
                            f"{MAX_MESSAGE}")
    return n


def parse_hdr(payload: Any) -> Dict[str, str]:
    """The acquisition header's ``Key: value`` lines."""
    text = bytes(payload).decode("latin1")
    out: Dict[str, str] = {}
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if not line or line.startswith("HDR") or line.startswith("End"):
            continue
        k, sep, v = line.partition("\t")
        if sep:
            out[k.strip().rstrip(":")] = v.strip()
    return out


def images_of(hdr: Dict[str, str]) -> int:
    """``Frames in Acquisition (Number)`` (0: continuous, unknown)."""
    v = hdr.get("Frames in Acquisition (Number)")
    try:
        n = int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ProtocolError(Reason.MALFORMED, f"HDR: Frames in Acquisition (Number) is "
                            f"{v!r}, not an integer") from None
    if n < 0:
        raise ProtocolError(Reason.MALFORMED, f"HDR: {n} frames in acquisition")
    return n


@dataclass(frozen=True)
class FrameHeader:
    """What an ``MQ1`` header says of its frame."""

    sequence: int             # 1-based
    header_bytes: int
    chips: int
    shape: Tuple[int, int]    # (rows, cols) of the decoded frame
    kind: str                 # "U08", "U16", "U32" or "R64"
    depth: int                # counter depth: 1, 6, 12, 24
    layout: str

    @property
    def dtype(self) -> str:
        """The decoded frame's type (little-endian)."""
        if self.kind == "R64":
            return "|u1" if self.depth in (1, 6) else "<u2"
        return _U_NATIVE[self.kind]

    @property
    def data_bytes(self) -> int:
        rows, cols = self.shape
        if self.kind == "R64":
            return int(rows * cols * _RAW[self.depth])
        return rows * cols * int(_U[self.kind][-1])


def parse_frame_header(payload: Any) -> FrameHeader:
    """The header of an ``MQ1`` frame message.

    Raises
    ------
    ProtocolError
        naming the field that is wrong; a raw frame of an unsupported depth or
        layout is ``unknown_encoding``.
    """
    head = bytes(payload[:64]).split(b",", 3)
    try:
        size = int(head[2])
    except (IndexError, ValueError):
        raise ProtocolError(Reason.MALFORMED, "MQ1 frame: no header size (field 2)") from None
    if not 16 <= size <= min(len(payload), 1 << 16):
        raise ProtocolError(Reason.MALFORMED, f"MQ1 frame: header size {size} (message of "
                            f"{len(payload)} bytes)")
    parts = [p for p in bytes(payload[:size]).decode("ascii", "replace").split(",")
             if "\x00" not in p]
    what = "MQ1 frame"
    try:
        seq = int(parts[1])
        what = f"MQ1 frame {seq}"
        # (the frames that repeat a checked one's fields are compared as bytes instead,
        # streams.protocols.merlin.receiver._Run)
        known = _frame_fields(parts, what)
    except (IndexError, ValueError) as e:
        raise ProtocolError(Reason.MALFORMED, f"{what}: header fields ({e})") from None
    if seq < 0:
        raise ProtocolError(Reason.MALFORMED, f"{what}: sequence number {seq}")
    chips, shape, kind, depth, layout = known
    return FrameHeader(seq, size, chips, shape, kind, depth, layout)


def _frame_fields(parts: Any, what: str) -> Tuple[int, Tuple[int, int], str, int, str]:
    """An MQ1 header's chips, (rows, cols), pixel type, counter depth, layout, checked."""
    chips, cols, rows = int(parts[3]), int(parts[4]), int(parts[5])
    kind, layout, depth = parts[6].upper(), parts[7].strip(), int(parts[-1])
    if not (0 < rows <= 1 << 14 and 0 < cols <= 1 << 14 and 0 < chips <= 64):
        raise ProtocolError(Reason.MALFORMED, f"{what}: {cols}x{rows} pixels, {chips} chips")
    if kind not in _U and kind != "R64":
        raise ProtocolError(Reason.ENCODING, f"{what}: pixel type {kind!r} is not U08, U16, "
                            "U32 or R64")
    if kind == "R64":
        if depth not in _RAW:
            raise ProtocolError(Reason.ENCODING, f"{what}: raw counter depth {depth} is not "
                                f"supported (1, 6, 12; use a non-raw format for 24)")
        if chips > 1:
            raise ProtocolError(Reason.ENCODING, f"{what}: raw frames of {chips} chips "
                                f"(layout {layout}) are not supported: use a non-raw format")
        if (rows * cols) % 64:
            raise ProtocolError(Reason.MALFORMED, f"{what}: {cols}x{rows} raw pixels, not "
                                "whole 64-bit words")
    return chips, (rows, cols), kind, depth, layout


def decode_pixels(h: FrameHeader, data: Any) -> np.ndarray:
    """The frame's pixels (``h.shape``, ``h.dtype``) from the bytes after its header."""
    if len(data) != h.data_bytes:
        raise ProtocolError(Reason.PAYLOAD_SIZE, f"MQ1 frame {h.sequence}: {len(data)} bytes "
                            f"of pixels, its header says {h.data_bytes}")
    rows, cols = h.shape
    if h.kind != "R64":
        a = np.frombuffer(data, _U[h.kind]).reshape(rows, cols)
        return a.astype(h.dtype)
    if h.depth == 1:     # 64 pixels per word; bytes of a word reversed, bits LSB first
        b = np.frombuffer(data, np.uint8).reshape(-1, 8)[:, ::-1]
        return np.unpackbits(b, axis=1, bitorder="little").reshape(rows, cols)
    if h.depth == 6:
        return np.frombuffer(data, np.uint8).reshape(-1, 8)[:, ::-1].reshape(rows, cols).copy()
    return np.frombuffer(data, ">u2").reshape(-1, 4)[:, ::-1].reshape(rows, cols).astype("<u2")


# ---- encoding (the simulator, MIB files for tests) ----

def encode_message(payload: bytes) -> bytes:
    """``MPX,`` + length + ``,`` + payload."""
    return b"MPX,%010d," % (len(payload) + 1) + payload


def encode_hdr(frames: int, frames_per_trigger: int, depth: int, **extra: Any) -> bytes:
    """An acquisition header (the keys LiberTEM-live reads, and ``extra``)."""
    lines = ["HDR,", f"Frames in Acquisition (Number):\t{frames}",
             f"Frames per Trigger (Number):\t{frames_per_trigger}",
             f"Counter Depth (number):\t{depth}"]
    lines += [f"{k}:\t{v}" for k, v in extra.items()]
    return ("\n".join(lines) + "\nEnd\t").encode("latin1")


def encode_frame(sequence: int, image: np.ndarray, depth: int = 12, raw: bool = False,
                 header_bytes: int = 384) -> bytes:
    """One ``MQ1`` frame (header + big-endian pixels): ``U08``/``U16``/``U32`` by depth,
    or ``R64`` (``raw``: depths 1, 6, 12)."""
    rows, cols = image.shape
    if raw:
        kind = "R64"
        a = np.ascontiguousarray(image)
        if depth == 1:
            bits = np.packbits(a.reshape(-1, 64).astype(np.uint8).reshape(-1, 8, 8), axis=2,
                               bitorder="little").reshape(-1, 8)
            data = bits[:, ::-1].tobytes()
        elif depth == 6:
            data = a.astype(np.uint8).reshape(-1, 8)[:, ::-1].tobytes()
        elif depth == 12:
            data = a.astype(">u2").reshape(-1, 4)[:, ::-1].tobytes()
        else:
            raise ValueError(f"raw counter depth {depth}: 1, 6 or 12")
    else:
        kind = {1: "U08", 6: "U08", 12: "U16", 24: "U32"}[depth]
        data = image.astype(_U[kind]).tobytes()
    fields = ["MQ1", f"{sequence:06d}", f"{header_bytes:05d}", "01", f"{cols:04d}",
              f"{rows:04d}", kind, "   1x1", "01", "2026-11-27 12:00:00.000000", "0.001000",
              "0", "0", "0", "1.200000E+2", "5.110000E+2", "0.000000E+0", "0.000000E+0",
              "0.000000E+0", "0.000000E+0", "0.000000E+0", "0.000000E+0", "3RX", "175", "511",
              "MQ1A", "2026-11-27T12:00:00.000000000Z", "1000000ns", str(depth), ""]
    head = ",".join(fields).encode("ascii")
    if len(head) > header_bytes:
        raise ValueError(f"MQ1 header of {len(head)} bytes, more than {header_bytes}")
    return head + b"\x00" * (header_bytes - len(head)) + data
