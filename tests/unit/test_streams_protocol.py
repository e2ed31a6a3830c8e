"""The native protocol's header schema, without sockets: round trips and every rejection."""
import subprocess
import sys

import msgpack
import pytest

from analyses.errors import GeometryError
from streams.errors import ProtocolError
from streams.protocol import Begin, Data, End, Reason, ScanGeometry, sector_rows
from streams.protocols.native.headers import (MAX_HEADER_BYTES, decode_header, encode_begin,
                                              encode_data, encode_end, route)

G = ScanGeometry("scan-1", 4, 12, 4, (576, 576), "<u2", (3, 4))
BEGIN = {"kind": "begin", "scan": "scan-1", "producer": 2, "producers": 4, "frames": 12,
         "sectors": 4, "shape": [576, 576], "dtype": "<u2", "scan_shape": [3, 4]}
DATA = {"kind": "data", "scan": "scan-1", "frame": 5, "sector": 1, "rows": [144, 288],
        "encoding": "bslz4"}
END = {"kind": "end", "scan": "scan-1", "producer": 2, "sent": 12}


def test_round_trip_every_kind():
    assert decode_header(encode_begin(G, 2)) == Begin(2, G)
    assert decode_header(encode_data("scan-1", 5, 1, (144, 288), "bslz4")) == \
        Data("scan-1", 5, 1, 144, 288, "bslz4")
    assert decode_header(encode_end("scan-1", 2, 12)) == End("scan-1", 2, 12)
    # the encoders produce exactly the documented maps
    assert msgpack.unpackb(encode_begin(G, 2)) == BEGIN
    assert msgpack.unpackb(encode_data("scan-1", 5, 1, (144, 288), "bslz4")) == DATA
    assert msgpack.unpackb(encode_end("scan-1", 2, 12)) == END


def test_unknown_keys_are_ignored_and_key_order_is_free():
    h = dict(reversed(list(DATA.items())), future_field={"x": 1})
    assert decode_header(msgpack.packb(h)) == Data("scan-1", 5, 1, 144, 288, "bslz4")


def _bad(h, **change):
    d = dict(h)
    for k, v in change.items():
        if v is KeyError:
            del d[k]
        else:
            d[k] = v
    return msgpack.packb(d)


MALFORMED = [
    (b"\xc1", "not msgpack"), (msgpack.packb([1, 2]), "a list"), (msgpack.packb(7), "an int"),
    (b"\x80" + b"\x00" * MAX_HEADER_BYTES, "oversized"),
    (_bad(DATA, kind="frame"), "unknown kind"), (_bad(DATA, kind=KeyError), "no kind"),
    (msgpack.packb({1: 2}), "non-string key"),
    (_bad(DATA, scan="../etc"), "scan with a slash"), (_bad(DATA, scan=""), "empty scan"),
    (_bad(DATA, scan="x" * 129), "long scan"), (_bad(DATA, scan=b"scan-1"), "scan as bin"),
    (_bad(DATA, frame=-1), "negative frame"), (_bad(DATA, frame=True), "bool frame"),
    (_bad(DATA, frame=1.0), "float frame"), (_bad(DATA, rows=[5, 5]), "empty rows"),
    (_bad(DATA, rows=[1, 2, 3]), "three rows"), (_bad(DATA, encoding=3), "encoding not str"),
    (_bad(BEGIN, dtype="u2"), "dtype without byte order"), (_bad(BEGIN, dtype="<f2"), "half"),
    (_bad(BEGIN, dtype="object"), "object dtype"), (_bad(BEGIN, scan_shape=[4, 4]), "grid"),
    (_bad(BEGIN, sectors=577), "more sectors than rows"), (_bad(BEGIN, producers=0), "P=0"),
    (_bad(BEGIN, shape=[576]), "1-d shape"), (_bad(BEGIN, shape=[1 << 20, 1 << 20]), "huge"),
    (_bad(END, sent=-1), "negative sent"),
]
MALFORMED += [(_bad(h, **{k: KeyError}), f"{h['kind']} without {k}")
              for h in (BEGIN, DATA, END) for k in h if k not in ("kind",)]


@pytest.mark.parametrize("buf,why", MALFORMED, ids=[w for _, w in MALFORMED])
def test_malformed_headers_are_rejected_as_malformed(buf, why):
    with pytest.raises(ProtocolError) as e:
        decode_header(buf)
    assert e.value.reason == Reason.MALFORMED, why


def test_unknown_encoding_has_its_own_reason_and_keeps_the_scan():
    with pytest.raises(ProtocolError) as e:
        decode_header(_bad(DATA, encoding="zstd"))
    assert e.value.reason == Reason.ENCODING and e.value.scan == "scan-1"
    with pytest.raises(ProtocolError) as e:       # scan kept for attribution
        decode_header(_bad(DATA, frame=-3))
    assert e.value.scan == "scan-1"


@pytest.mark.parametrize("rows", [1, 7, 144, 576, 1030])
@pytest.mark.parametrize("sectors", [1, 2, 3, 4, 7])
def test_sectors_tile_the_rows_exactly(rows, sectors):
    if sectors > rows:
        return
    spans = [sector_rows(rows, sectors, s) for s in range(sectors)]
    assert spans[0][0] == 0 and spans[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(r1 > r0 for r0, r1 in spans)


def test_route_and_positions():
    assert [route(f, 3) for f in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert G.sector_rows(1) == (144, 288)
    assert G.frame_bytes == 576 * 576 * 2


def test_encoders_refuse_what_receivers_would_reject():
    with pytest.raises(ProtocolError):
        encode_begin(G, 4)                     # producer >= producers
    with pytest.raises(ProtocolError):
        encode_data("scan-1", 0, 0, (0, 1), "gzip")
    with pytest.raises(GeometryError):
        ScanGeometry("a b", 1, 1, 1, (1, 1), "<u2", (1, 1))


def test_every_public_name_resolves():
    import streams as ss

    assert all(getattr(ss, name) is not None for name in ss.__all__)


def test_import_loads_no_wire_library():
    code = ("import sys, streams, streams.protocol, streams.protocols.native.headers,"
            " streams.protocols.native.rendezvous;"
            "bad = [m for m in ('zmq', 'msgpack', 'cbor2', 'lz4', 'dectris') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", ["a/b", "..", "a..b", "../etc", "x" * 129, ".hidden", ""])
def test_scan_names_that_could_name_other_files_are_refused(name):
    from streams.errors import ProtocolError
    from streams.protocol import check_scan_name
    from streams.protocols.native.headers import decode_header

    with pytest.raises(GeometryError, match="scan name"):
        check_scan_name(name)
    with pytest.raises(ProtocolError) as e:
        decode_header(msgpack.packb({"kind": "data", "scan": name, "frame": 0, "sector": 0,
                                     "rows": [0, 1], "encoding": "raw"}))
    assert e.value.reason == "malformed_header" and e.value.scan is None
    assert check_scan_name("x" * 128) and check_scan_name("a.b_c-1")
