"""The native protocol's headers (``mpistage-stream/1``): schema, encoding, validation.

Every message is a msgpack header frame and a payload frame. This module turns
headers into the :class:`~streams.protocol.Begin`/``Data``/``End`` values every
protocol hands the assembler and back, and :func:`feed` hands one message to an
:class:`~streams.assemble.Assembler`. Pure (no sockets, no numpy); it checks what
one header alone can tell, the assembler the rest (``docs/stream-protocol.md`` is
the normative text).
"""
from __future__ import annotations

import hmac
from typing import Any, List, Optional, Tuple

from streams.errors import ProtocolError
from analyses.errors import GeometryError
from streams.protocol import (SCAN_RE, Begin, Data, End, Header, Reason, ScanGeometry,
                              check_int, check_scan_name, rejection)

__all__ = ["PROTOCOL", "ENCODINGS", "MAX_HEADER_BYTES", "MAX_TOKEN", "decode_header",
           "encode_begin", "encode_data", "encode_end", "route", "feed"]

PROTOCOL = "mpistage-stream/1"
ENCODINGS = ("raw", "lz4", "bslz4")
#: A header longer than this is rejected unread (``malformed_header``).
MAX_HEADER_BYTES = 4096
#: Longest ``token`` a begin may carry (the job's is 32 hex digits).
MAX_TOKEN = 64


def route(frame: int, receivers: int) -> int:
    """Index of the receiver that gets every sector of ``frame``: ``frame mod R``."""
    return frame % receivers


def _field(h: dict, key: str) -> Any:
    try:
        return h[key]
    except KeyError:
        raise ProtocolError(Reason.MALFORMED, f"{h.get('kind')} header has no {key!r}",
                            h.get("scan") if isinstance(h.get("scan"), str) else None) from None


def decode_header(buf: Any) -> Header:
    """Parse and check one header frame into Begin, Data or End.

    ProtocolError ``malformed_header`` or ``unknown_encoding`` (with ``scan`` when the
    header names a well-formed one).
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
    scan_ok = isinstance(scan, str) and SCAN_RE.match(scan) is not None and ".." not in scan
    try:
        if kind == "data":
            scan = check_scan_name(scan)
            encoding = _field(h, "encoding")
            frame = check_int("frame", _field(h, "frame"))
            sector = check_int("sector", _field(h, "sector"))
            rows = _field(h, "rows")
            if not isinstance(rows, list) or len(rows) != 2:
                raise ProtocolError(Reason.MALFORMED, f"rows must be [r0, r1], not {rows!r}")
            r0, r1 = check_int("rows[0]", rows[0]), check_int("rows[1]", rows[1])
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
            # ScanGeometry checks every field (names in its messages)
            geometry = ScanGeometry(
                scan=check_scan_name(scan), producers=_field(h, "producers"),
                frames=_field(h, "frames"), sectors=_field(h, "sectors"),
                shape=_field(h, "shape"), dtype=_field(h, "dtype"),
                scan_shape=_field(h, "scan_shape"))
            token = h.get("token")
            if token is not None and (not isinstance(token, str) or len(token) > MAX_TOKEN):
                raise ProtocolError(Reason.MALFORMED, f"token must be a string of at most "
                                    f"{MAX_TOKEN} characters")
            return Begin(check_int("producer", _field(h, "producer")), geometry, token)
        if kind == "end":
            return End(check_scan_name(scan), check_int("producer", _field(h, "producer")),
                       check_int("sent", _field(h, "sent")))
    except (ProtocolError, GeometryError) as err:
        bad = rejection(err)
        if bad.scan is None and scan_ok:
            bad.scan = scan
        bad.kind = kind if isinstance(kind, str) else None
        raise bad from None
    raise ProtocolError(Reason.MALFORMED, f"kind {kind!r} is not 'begin', 'data' or 'end'",
                        scan if scan_ok else None)


def _pack(h: dict) -> bytes:
    import msgpack

    return msgpack.packb(h, use_bin_type=True)


def encode_begin(geometry: ScanGeometry, producer: int, token: Optional[str] = None) -> bytes:
    """Header of a ``begin`` message from ``producer`` (payload: empty), carrying the
    receiving job's ``token`` (from its rendezvous file) when given."""
    if isinstance(producer, bool) or not isinstance(producer, int) \
            or not 0 <= producer < geometry.producers:
        raise ProtocolError(Reason.OUT_OF_RANGE, f"producer {producer!r} not in "
                            f"[0, {geometry.producers})", geometry.scan)
    g = geometry
    h = {"kind": "begin", "scan": g.scan, "producer": int(producer),
         "producers": g.producers, "frames": g.frames, "sectors": g.sectors,
         "shape": [int(g.shape[0]), int(g.shape[1])], "dtype": g.dtype,
         "scan_shape": [int(g.scan_shape[0]), int(g.scan_shape[1])]}
    if token is not None:
        h["token"] = token
    return _pack(h)


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


def feed(assembler: Any, parts: List[Any], token: Optional[str] = None) -> None:
    """Hand one native message (its ZeroMQ frames) to ``assembler``.

    Anything but a header and a payload, a header that does not decode, or a
    ``begin``/``end`` with a payload is rejected into the accounting; with ``token``
    a ``begin`` without it is rejected ``wrong_token``.
    """
    if len(parts) != 2:
        assembler.reject(Reason.MALFORMED, f"message of {len(parts)} frames, expected 2 "
                         "(header, payload)")
        return
    try:
        h = decode_header(parts[0])
    except ProtocolError as e:
        # a data message of an open scan, unusable: received, then rejected
        assembler.reject(e.reason, e.detail, e.scan, received=e.kind == "data")
        return
    if isinstance(h, Data):
        assembler.data(h, parts[1])
    elif len(parts[1]):
        assembler.reject(Reason.MALFORMED, f"{type(h).__name__.lower()} of scan {h.scan} "
                         f"with a {len(parts[1])}-byte payload (must be empty)", h.scan)
    elif isinstance(h, Begin):
        # compared in constant time: the token is what tells this job's producers
        if token is not None and (h.token is None or not hmac.compare_digest(
                h.token.encode(), token.encode())):
            whose = "without the job's token" if h.token is None else "with another job's token"
            assembler.reject(Reason.TOKEN, f"begin for scan {h.scan} from producer "
                             f"{h.producer} {whose} (a replay of an earlier job's stream, or "
                             "a producer that read another rendezvous file)", h.scan)
            return
        assembler.begin(h)
    else:
        assembler.end(h)
