"""DECTRIS legacy stream: messages built from the SIMPLON tables, round trips through the
client, every part's checks (hostile parts refused and counted), the split header
LiberTEM-live's simulator sends, header_detail all/basic/none, dump files."""
import io
import json
import struct

import numpy as np
import pytest

from streams.errors import ProtocolError
from streams.protocols.dectris_legacy.legacy import (MAX_JSON_BYTES, ConfigPart, HeaderPart,
                                                     decode_parts, detector_config,
                                                     encode_end, encode_header, encode_image)
from streams.protocols.dectris_legacy.receiver import LegacyReceiver
from streams.protocols.dectris_legacy.simulator import series_messages, write_dump
from streams.protocols.stream2.streamv2 import End, Image, Start
from streams.scanshape import parse_scan_shape, resolve_scan_shape


def j(d):
    return json.dumps(d).encode()


def frame(i, shape=(5, 7), dt="<u2"):
    return ((np.arange(shape[0] * shape[1]).reshape(shape) * 7 + i * 13) % 251).astype(dt)


def collect(out):
    def deliver(part):
        for f, row, ok in zip(part.frames, part.data, part.complete):
            if ok:
                out[int(f)] = row.copy()
    return deliver


def receiver(out, **kw):
    return LegacyReceiver(collect(out), "tcp://127.0.0.1:1", idle_timeout=30, **kw)


# ---- the messages ----

def test_hand_built_image_width_first():
    """``shape`` is [width, height]: a 3-wide, 2-high raw frame has 2 rows of 3."""
    values = np.arange(1, 7, dtype="<u2")
    parts = [j({"htype": "dimage-1.0", "series": 4, "frame": 2, "hash": ""}),
             j({"htype": "dimage_d-1.0", "shape": [3, 2], "type": "uint16", "encoding": "<"}),
             values.tobytes(),
             j({"htype": "dconfig-1.0", "start_time": 10, "stop_time": 20, "real_time": 9})]
    m = decode_parts(parts)
    assert isinstance(m, Image) and (m.series_id, m.image_id) == (4, 2)
    ch = m.data["threshold_1"]
    assert (ch.shape, ch.dtype, ch.encoding) == ((2, 3), "<u2", "raw")
    assert np.array_equal(ch.decode(), values.reshape(2, 3))
    assert m.fields == {"start_time": 10, "stop_time": 20, "real_time": 9}


@pytest.mark.parametrize("encoding", ["raw", "lz4", "bslz4"])
@pytest.mark.parametrize("dt", ["|u1", "<u2", "<u4"])
def test_round_trip(encoding, dt):
    a = frame(3, (6, 10), dt)
    m = decode_parts(encode_image(9, 3, a, encoding), check_hash=True)
    assert m.data["threshold_1"].shape == (6, 10)
    assert np.array_equal(m.data["threshold_1"].decode(), a)
    assert decode_parts(encode_end(9)) == End(9, "")


def test_header_basic_and_all():
    cfg = detector_config(12, (6, 10), trigger_mode="exts")
    s = decode_parts(encode_header(5, cfg, "basic"))
    assert isinstance(s, Start) and s.number_of_images == 12
    assert (s.image_size_y, s.image_size_x) == (6, 10) and s.image_dtype is None
    # legacy names under their Stream V2 names: what /detector (NXmx) is written from
    assert s.fields["pixel_size_x"] == 75e-6 and s.fields["detector_serial_number"] == "SIM-0000"
    mask = (np.arange(60).reshape(6, 10) % 11 == 0).astype("<u4")
    s = decode_parts(encode_header(5, cfg, "all", pixel_mask=mask))
    arrays = s.arrays("threshold_1")
    assert np.array_equal(arrays["pixel_mask"]["threshold_1"], mask)
    assert arrays["flatfield"]["threshold_1"].dtype == np.float32
    assert arrays["countrate_correction_lookup_table"].shape == (2, 64)
    # sent as single parts (LiberTEM-live's simulator): two pieces
    parts = encode_header(5, cfg, "basic")
    assert decode_parts(parts[:1]) == HeaderPart(5, "basic")
    assert decode_parts(parts[1:]) == ConfigPart(cfg)


@pytest.mark.parametrize("mode,images", [("exte", 7), ("inte", 7), ("exts", 7), ("ints", 7)])
def test_image_count_per_trigger_mode(mode, images):
    cfg = detector_config(images, (4, 4), trigger_mode=mode)
    assert decode_parts(encode_header(1, cfg)).number_of_images == images
    cfg.update(nimages=3, ntrigger=2)
    want = 2 if mode in ("exte", "inte") else 6
    assert decode_parts(encode_header(1, cfg)).number_of_images == want


def _image_parts(**over):
    parts = encode_image(1, 0, frame(0), "bslz4")
    d = json.loads(parts[1])
    d.update(over)
    parts[1] = j(d)
    return parts


@pytest.mark.parametrize("parts,reason,words", [
    ([b"{not json"], "malformed_header", "not JSON"),
    ([j([1, 2])], "malformed_header", "JSON object"),
    ([b" " * (MAX_JSON_BYTES + 1)], "malformed_header", "more than"),           # a JSON bomb
    ([j({"htype": "dimage-1.0", "series": 1, "frame": -1, "hash": ""})], "malformed_header",
     "frame"),
    (encode_image(1, 0, frame(0))[:3], "malformed_header", "4 parts"),          # truncated
    (_image_parts(shape=[1 << 20, 1 << 20], type="uint32"), "too_large", "bytes"),   # a bomb
    (_image_parts(shape=[7, 5, 1]), "malformed_header", "width, height"),
    (_image_parts(type="float64"), "malformed_header", "type"),
    (_image_parts(encoding="bs32-lz4<"), "malformed_header", "32-bit"),
    (_image_parts(encoding="bs16-lz4>"), "unknown_encoding", "big-endian"),
    (_image_parts(encoding="zstd<"), "unknown_encoding", "zstd"),
    (_image_parts(size=3), "wrong_payload_size", "says 3"),
    ([j({"htype": "dheader-1.0", "series": 1, "header_detail": "most"})], "malformed_header",
     "header_detail"),
    (encode_header(1, detector_config(4, (4, 4)), "all")[:5], "malformed_header", "8 parts"),
    ([j({"htype": "dseries_end-1.0", "series": "x"})], "malformed_header", "series"),
    ([b"{}"] * 13, "malformed_header", "parts"),
])
def test_hostile_parts_are_refused(parts, reason, words):
    with pytest.raises(ProtocolError) as e:
        decode_parts(parts)
    assert e.value.reason == reason and words in e.value.detail


def test_array_part_of_the_wrong_size_is_refused():
    parts = encode_header(1, detector_config(4, (4, 4)), "all")
    parts[5] = parts[5][:-4]                       # the pixel mask's blob cut short
    with pytest.raises(ProtocolError) as e:
        decode_parts(parts)
    assert e.value.reason == "wrong_payload_size" and "dpixelmask" in e.value.detail


def test_hash_is_checked_when_asked():
    parts = encode_image(1, 0, frame(0), "raw")
    parts[2] = parts[2][:-2] + b"\0\0"
    decode_parts(parts)                            # not checked by default
    with pytest.raises(ProtocolError) as e:
        decode_parts(parts, check_hash=True)
    assert e.value.reason == "corrupt_payload" and "MD5" in e.value.detail


# ---- the client ----

def _send(rx, msgs):
    for m in msgs:
        rx.handle_parts(m)


@pytest.mark.parametrize("split", [False, True])
def test_client_receives_a_series(split):
    out = {}
    rx = receiver(out, scan_shape=(2, -1))
    msgs = list(series_messages(3, lambda i: frame(i, (6, 10)), 8, (6, 10), encoding="lz4"))
    if split:     # as LiberTEM-live's simulator sends the header: two messages
        msgs = [msgs[0][:1], msgs[0][1:]] + msgs[1:]
    _send(rx, msgs)
    (rep,) = rx.reports
    assert rep.ok and rep.complete_frames.size == 8 and rep.geometry.scan_shape == (2, 4)
    assert rep.geometry.shape == (6, 10) and rep.geometry.dtype == "<u2"
    for i in range(8):
        assert np.array_equal(out[i], frame(i, (6, 10)))
    assert tuple(rx.times("series-3")[5]) == (5_000_000, 5_999_000, 999_000)   # dconfig
    assert rx.held_pieces() == []


def test_pieces_shared_by_other_clients_pair_in_order():
    """Round-robin gives the dheader to one client and the configuration to another:
    each shares its piece, every client pairs them (config first is fine too)."""
    out = {}
    shared = []
    rx = receiver(out, on_piece=shared.append)
    head, cfg = encode_header(6, detector_config(4, (5, 7)), "basic")
    rx.handle_parts([cfg])                          # this client got the configuration
    assert shared == [ConfigPart(json.loads(cfg))] and rx.held_pieces()
    for i in range(4):
        rx.handle_parts(encode_image(6, i, frame(i)))      # held: no start yet
    rx.apply_shared("start", HeaderPart(6, "basic"))       # another client got the dheader
    rx.handle_parts(encode_end(6))
    (rep,) = rx.reports
    assert rep.ok and sorted(out) == [0, 1, 2, 3] and rx.held_pieces() == []


def test_header_detail_none_needs_the_image_count():
    out = {}
    rx = receiver(out)
    rx.handle_parts(encode_header(2, None, "none"))
    assert rx.assembler.rejected["malformed_header"] == 1
    assert "--dectris-images" in rx.assembler.examples[-1]
    rx = receiver(out, images=3)
    _send(rx, series_messages(2, lambda i: frame(i, (4, 9), "<u4"), 3, (4, 9),
                              header_detail="none", encoding="raw"))
    (rep,) = rx.reports
    assert rep.ok and rep.geometry.shape == (4, 9) and rep.geometry.dtype == "<u4"


def test_pixel_mask_from_header_detail_all_is_applied():
    out = {}
    mask = np.zeros((5, 7), "<u4")
    mask[1, 2] = mask[4, 6] = 1
    rx = receiver(out, apply_pixel_mask=True)
    _send(rx, series_messages(4, lambda i: frame(i) + 1, 2, (5, 7), header_detail="all",
                              pixel_mask=mask))
    assert rx.reports[0].ok
    for i in range(2):
        want = frame(i) + 1
        want[mask != 0] = 0
        assert np.array_equal(out[i], want)


def test_a_header_announcing_2_to_the_40_images_is_refused_and_counted():
    out = {}
    rx = receiver(out)
    cfg = detector_config(4, (5, 7), trigger_mode="exte")
    cfg["ntrigger"] = 1 << 40
    _send(rx, [encode_header(8, cfg), encode_image(8, 0, frame(0))])
    rx.never_started()
    assert rx.assembler.rejected["out_of_range"] == 1, dict(rx.assembler.rejected)
    assert "1099511627776" in " ".join(rx.assembler.examples)
    assert not rx.assembler.scans            # nothing allocated for it


def test_hostile_messages_among_good_ones_are_counted_and_the_series_survives():
    out = {}
    rx = receiver(out)
    msgs = list(series_messages(5, frame, 6, (5, 7)))
    good = msgs[3]
    bad_blob = list(good)
    bad_blob[2] = bad_blob[2][: len(bad_blob[2]) // 2]   # cut LZ4: decoder refuses, counted
    bad_blob[1] = j({**json.loads(good[1]), "size": len(bad_blob[2])})
    hostile = [good[:2], bad_blob, [b"garbage"], [j({"htype": "dunknown-1.0"})]]
    _send(rx, msgs[:3] + hostile + msgs[3:5] + [msgs[4]] + msgs[5:])   # image 3 twice
    (rep,) = rx.reports
    assert rep.ok and rep.complete_frames.size == 6
    r = rx.assembler.rejected
    assert r["malformed_header"] == 3 and r["duplicate"] == 1
    assert r["corrupt_payload"] + r["wrong_payload_size"] == 1, dict(r)



def test_images_of_an_open_series_are_checked_as_every_message():
    """After the first image opens the series, images go from their parts straight to
    the assembler (no Image object): a frame of another size or type is still refused
    ``conflict``, a blob whose MD5 is wrong ``corrupt_payload`` (with the hash checked),
    a repeated image ``duplicate``; every good frame arrives bit-exact, with its times."""
    out = {}
    rx = receiver(out, check_hash=True)
    msgs = list(series_messages(6, frame, 6, (5, 7)))
    other = encode_image(6, 2, frame(2, (5, 8)))              # a wider frame mid-series
    wide = encode_image(6, 3, frame(3).astype("<u4"))         # another pixel type
    bad = list(msgs[4])                                      # image 3, its blob altered
    bad[2] = bad[2][:-1] + bytes([bad[2][-1] ^ 1])
    _send(rx, msgs[:3] + [other, wide, bad] + msgs[3:4] + msgs[3:])
    (rep,) = rx.reports
    assert rep.ok and rep.complete_frames.size == 6
    r = rx.assembler.rejected
    assert r["conflict"] == 2 and r["corrupt_payload"] == 1 and r["duplicate"] == 1, dict(r)
    assert all(np.array_equal(out[i], frame(i)) for i in range(6))
    assert tuple(rx.times("series-6")[4]) == (4_000_000, 4_999_000, 999_000)

# ---- dump files, scan shapes ----

def test_dump_round_trip():
    msgs = list(series_messages(1, frame, 3, (5, 7)))
    buf = io.BytesIO()
    n = write_dump(buf, iter(msgs))
    data, parts = buf.getvalue(), []
    while data:            # every part: an int64 little-endian length, then its bytes
        (k,) = struct.unpack_from("<q", data)
        parts.append(data[8:8 + k])
        data = data[8 + k:]
    assert parts == [x for m in msgs for x in m] and n == 2 + 3 * 4 + 1


def test_scan_shapes():
    assert resolve_scan_shape((-1, 8), 64) == (8, 8)
    assert resolve_scan_shape(None, 5) == (1, 5)
    assert resolve_scan_shape((4, 4), 16) == (4, 4)
    assert parse_scan_shape("32x-1") == (32, -1)
    for bad in ("a,b", "-1,-1", "0,4", "-2,4"):
        with pytest.raises(ValueError):
            parse_scan_shape(bad)
    with pytest.raises(ValueError, match="multiple"):
        resolve_scan_shape((-1, 7), 64)
    with pytest.raises(ValueError, match="one -1"):
        resolve_scan_shape((4, 4), 17)


def test_whole_series_before_its_configuration_is_kept():
    """One client gets the dheader, its images and the end before the configuration
    another client received is shared: the held images go in before the held end."""
    out = {}
    rx = receiver(out)
    msgs = list(series_messages(7, frame, 4, (5, 7)))
    head, cfg = msgs[0]
    _send(rx, [[head]] + msgs[1:])
    assert not rx.reports and not out
    rx.apply_shared("start", ConfigPart(json.loads(cfg)))
    (rep,) = rx.reports
    assert rep.ok and sorted(out) == [0, 1, 2, 3] and not rx.assembler.rejected
