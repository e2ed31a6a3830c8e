"""DECTRIS Stream V2: messages built byte by byte from the specification, round trips,
rejections, real DECTRIS messages (when available), and the simulator -> client path."""
import functools
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streams import (Receiver, ScanGeometry, ScanReport, SimulatedScan,
                           StreamV2Receiver, StreamV2Simulator, run_producers)
from streams.codecs import bslz4_encode
from streams.errors import ProtocolError
from streams.protocols.stream2.streamv2 import (End, Image, Start, decode_message, encode_end,
                                    encode_image, encode_start)


def t(s):   # CBOR text string (< 24 bytes)
    return bytes([0x60 + len(s)]) + s.encode()


def image_bytes(payload_item: bytes) -> bytes:
    """An image message written from RFC 8949 and the Stream V2 tables, by hand:
    tag 55799, map(5) type/series_id/series_unique_id/image_id/data, the series id
    wrapped in an unknown tag (1000) that readers must skip."""
    return (b"\xd9\xd9\xf7" + b"\xa5" + t("type") + t("image")
            + t("series_id") + b"\xd9\x03\xe8" + b"\x03"            # tag(1000) 3
            + t("series_unique_id") + t("abc") + t("image_id") + b"\x02"
            + t("data") + b"\xa1" + t("threshold_1")
            + b"\xd8\x28" + b"\x82" + b"\x82\x02\x03"                # tag 40 [[2, 3], ...]
            + b"\xd8\x45" + payload_item)                            # tag 69: <u2 typed array


def test_hand_built_uncompressed_image():
    values = np.arange(1, 7, dtype="<u2")
    m = decode_message(image_bytes(b"\x4c" + values.tobytes()))      # bytes(12)
    assert isinstance(m, Image) and (m.series_id, m.series_unique_id, m.image_id) == (3, "abc", 2)
    ch = m.data["threshold_1"]
    assert (ch.shape, ch.dtype, ch.encoding) == ((2, 3), "<u2", "raw")
    assert np.array_equal(ch.decode(), values.reshape(2, 3))        # row-major: [rows, cols]


def test_hand_built_bslz4_image():
    values = np.array([[0, 1, 2], [300, 4, 65535]], "<u2")
    comp = bslz4_encode(values)
    item = (b"\xd9\xdc\xb4" + b"\x83" + t("bslz4") + b"\x02"         # tag 56500 [alg, 2, ...]
            + b"\x58" + bytes([len(comp)]) + comp)
    ch = decode_message(image_bytes(item)).data["threshold_1"]
    assert ch.encoding == "bslz4" and np.array_equal(ch.decode(), values)


@pytest.mark.parametrize("compression", [None, "lz4", "bslz4"])
@pytest.mark.parametrize("image_dtype,dt", [("uint8", "|u1"), ("uint16", "<u2"),
                                            ("uint32", "<u4")])
def test_round_trip(compression, image_dtype, dt):
    s = decode_message(encode_start(9, "U9", 4, (5, 7), image_dtype, ("t1", "t2"),
                                    user_data={"scan_shape": [2, 2]}))
    assert isinstance(s, Start) and s.number_of_images == 4 and s.channels == ("t1", "t2")
    assert s.geometry() == ScanGeometry("series-9-U9", 1, 4, 1, (5, 7), dt, (2, 2))
    assert s.fields["arm_date"].tzinfo is not None and s.fields["pixel_size_x"] == 75e-6
    rng = np.random.default_rng(0)
    a = rng.integers(0, 200, (5, 7)).astype(dt)
    m = decode_message(encode_image(9, "U9", 3, {"t1": a, "t2": a + 1}, compression))
    assert m.image_id == 3 and m.fields["real_time"][1] == 50_000_000
    assert np.array_equal(m.data["t1"].decode(), a) and np.array_equal(m.data["t2"].decode(), a + 1)
    assert decode_message(encode_end(9, "U9")) == End(9, "U9")


def test_start_carries_typed_arrays():
    mask = np.zeros((5, 7), "<u4")
    mask[1, 2] = 1
    s = decode_message(encode_start(1, "U", 2, (5, 7), pixel_mask={"t1": mask}))
    assert s.fields["pixel_mask_enabled"] is True and "pixel_mask" in s.fields


def test_start_pickles_for_the_other_receivers():
    """Only one client receives start: it travels to the others over MPI (pickled)."""
    import pickle

    s = decode_message(encode_start(1, "U", 4, (5, 7), user_data={"scan_shape": [2, 2]}))
    back = pickle.loads(pickle.dumps(s))
    assert back.geometry() == s.geometry()
    assert tuple(back.fields["user_data"]["scan_shape"]) == (2, 2)
    assert type(back.fields["goniometer"]) is dict


BAD = {
    "no self-describe tag": (encode_end(1, "U")[3:], "malformed_header"),
    "type not first": (b"\xd9\xd9\xf7\xa2" + t("series_id") + b"\x01" + t("type") + t("end"),
                       "malformed_header"),
    "unknown type": (b"\xd9\xd9\xf7\xa1" + t("type") + t("frame"), "malformed_header"),
    "not a map": (b"\xd9\xd9\xf7\x82\x01\x02", "malformed_header"),
    "garbage": (b"\xd9\xd9\xf7\xff\xff", "malformed_header"),
    "not tag 40": (image_bytes(b"\x4c" + bytes(12)).replace(b"\xd8\x28", b"\xd8\x29"),
                   "malformed_header"),
    "zstd": (image_bytes(b"\xd9\xdc\xb4\x83" + t("bszstd") + b"\x02\x41\x00"),
             "unknown_encoding"),
    "bslz4 elem size": (image_bytes(b"\xd9\xdc\xb4\x83" + t("bslz4") + b"\x04\x41\x00"),
                        "malformed_header"),
}


@pytest.mark.parametrize("name", BAD)
def test_rejections(name):
    buf, reason = BAD[name]
    with pytest.raises(ProtocolError) as e:
        decode_message(buf)
    assert e.value.reason == reason


REAL = os.environ.get("MPISTAGE_STREAM2_TEST_DATA")


@pytest.mark.skipif(not REAL, reason="set MPISTAGE_STREAM2_TEST_DATA to the stream_v2/test_data "
                    "folder of DECTRIS's documentation repository (branch stream2-test_data); "
                    "it is not redistributable here (no licence)")
def test_real_dectris_messages():
    """DECTRIS's captured messages (a 514x1030 detector, 3 channels): the difference channel
    is threshold_1 - threshold_2, or the type's maximum where that would be negative --
    an end-to-end check of every decoded pixel."""
    files = sorted(p for p in Path(REAL).glob("*/0000*.cbor") if p.stat().st_size)
    images = 0
    for p in files:
        m = decode_message(p.read_bytes())
        if isinstance(m, End):
            continue
        assert isinstance(m, Image) and m.data["threshold_1"].shape == (514, 1030)
        t1, t2, df = (m.data[c].decode().astype(np.int64)
                      for c in ("threshold_1", "threshold_2", "difference"))
        top = np.iinfo(np.dtype(m.data["difference"].dtype)).max
        assert np.array_equal(df, np.where(t1 >= t2, t1 - t2, top)), p
        images += 1
    assert images >= 2


@pytest.mark.skipif(not REAL, reason="set MPISTAGE_STREAM2_TEST_DATA to the stream_v2/test_data "
                    "folder of DECTRIS's documentation repository (branch stream2-test_data); "
                    "it is not redistributable here (no licence)")
@pytest.mark.timeout(120)
def test_real_dectris_messages_replayed_through_a_client():
    """Each captured series replayed over a real socket into a StreamV2Receiver (its own
    start if captured, else one made from its first image): every frame delivered equals
    the image decoded on its own, and the series closes whole by its end."""
    for folder in sorted(p for p in Path(REAL).iterdir() if p.is_dir()):
        msgs = [p.read_bytes() for p in sorted(folder.glob("*.cbor")) if p.stat().st_size]
        decoded = [decode_message(m) for m in msgs]
        images = [m for m in decoded if isinstance(m, Image)]
        if not images:
            continue
        starts = [m for m in msgs if isinstance(decode_message(m), Start)]
        first = images[0].data["threshold_1"]
        dt = {"|u1": "uint8", "<u2": "uint16", "<u4": "uint32"}[first.dtype]
        start = starts[0] if starts else encode_start(
            images[0].series_id, images[0].series_unique_id,
            max(m.image_id for m in images) + 1, first.shape, dt,
            tuple(images[0].data))
        body = [m for m in msgs if not isinstance(decode_message(m), Start)]
        if not any(isinstance(m, End) for m in decoded):
            body.append(encode_end(images[0].series_id, images[0].series_unique_id))
        with StreamV2Simulator(sndhwm=1000) as sim:
            rxs, threads, got, reports = serve_v2(sim, idle_timeout=30)
            time.sleep(0.3)
            threads[0].start()
            sim.send(start)
            for m in body:
                sim.send(m)
            threads[0].join(60)
            rxs[0].close()
        (rep,) = reports[0]
        assert rep.ended_by == "end" and not rep.rejected, (folder, rep.summary())
        for im in images:
            assert np.array_equal(got[im.image_id], im.data["threshold_1"].decode()), folder


def collect(frames):
    lock = threading.Lock()

    def deliver(part):
        with lock:
            for f, img in zip(part.frames, part.data):
                frames[int(f)] = img.copy()
    return deliver


def serve_v2(sim, clients=1, **kw):
    frames, reports = {}, []
    rxs = [StreamV2Receiver(collect(frames), sim.endpoint, **kw) for _ in range(clients)]
    for rx in rxs:
        rx.connect()
    threads = [threading.Thread(target=lambda rx=rx: reports.append(rx.serve(1, timeout=60)))
               for rx in rxs]
    return rxs, threads, frames, reports


@pytest.mark.timeout(120)
@pytest.mark.parametrize("compression", [None, "lz4", "bslz4"])
def test_stream_v2_simulator_gives_the_same_frames_as_the_native_protocol(compression):
    g = ScanGeometry("native", 2, 12, 2, (40, 32), "<u2", (3, 4))
    scan = SimulatedScan(g, encoding="bslz4")
    native = {}
    rx = Receiver(collect(native))
    out = []
    th = threading.Thread(target=lambda: out.extend(rx.serve(1, timeout=60)))
    ep = rx.bind()
    th.start()
    run_producers(scan, [ep])
    th.join(60)
    rx.close()
    with StreamV2Simulator() as sim:
        rxs, threads, v2, reports = serve_v2(sim, partition_frames=5, channel="threshold_2")
        for t_ in threads:
            t_.start()
        sim.send_series(4, scan.frame, 12, (40, 32), compression=compression,
                        channels=("threshold_1", "threshold_2"), scan_shape=(3, 4))
        for t_ in threads:
            t_.join(60)
        rxs[0].close()
    (rep,) = reports[0]
    assert rep.ok and rep.ended_by == "end" and rep.geometry.scan_shape == (3, 4)
    assert out[0].ok and sorted(native) == sorted(v2) == list(range(12))
    for f in range(12):     # channel threshold_2 is frame + 1 in the simulator
        assert np.array_equal(v2[f], native[f] + 1)


@pytest.mark.timeout(120)
def test_two_clients_share_start_and_end_and_their_reports_merge():
    """Round-robin: each image reaches one client; start and end reach one client each,
    and are handed to the other (what the MPI layer will do)."""
    frames = [np.full((8, 8), i, "<u2") for i in range(20)]
    with StreamV2Simulator(sndhwm=1000) as sim:
        rxs, threads, got, reports = serve_v2(sim, clients=2, idle_timeout=20)
        for me in rxs:   # what the MPI layer will do: hand start and end to the others
            others = [p for p in rxs if p is not me]
            me.on_start = lambda s, others=others: [p.apply_start(s) for p in others]
            me.on_end = lambda e, others=others: [p.apply_end(e, grace=1.0) for p in others]
        # both clients connected before the first message: ZeroMQ deals to connected peers
        time.sleep(0.5)
        for t_ in threads:
            t_.start()
        sim.send_series(2, frames.__getitem__, 20, (8, 8), compression="lz4",
                        withhold=frozenset({6}))
        for t_ in threads:
            t_.join(60)
        for rx in rxs:
            rx.close()
    reps = [r[0] for r in reports]
    assert all(r.ended_by == "end" for r in reps)
    assert all(0 < r.complete_frames.size < 19 for r in reps)      # both got some
    assert all(not r.rejected and not r.rejected_unattributed for r in reps)
    merged = functools.reduce(ScanReport.merge, reps)
    assert merged.missing_frames.tolist() == [6] and merged.complete_frames.size == 19
    assert sorted(got) == [f for f in range(20) if f != 6]
    assert all((got[f] == f).all() for f in got)


def test_images_before_their_start_are_held_then_assembled_or_rejected():
    frames = {}
    a = np.ones((4, 4), "<u2")
    msgs = [encode_image(5, "U", i, {"threshold_1": a * i}) for i in (0, 1, 2)]
    rx = StreamV2Receiver(collect(frames), "tcp://127.0.0.1:1", idle_timeout=30,
                          held_bytes=len(msgs[1]) + len(msgs[2]))
    for m in msgs:     # three images, room for two (by their bytes): the oldest is rejected
        rx.handle(m)
    assert rx.assembler.rejected["unknown_scan"] == 1
    assert rx.held_now == rx.held_bytes
    rx.handle(encode_start(5, "U", 3, (4, 4)))
    rx.handle(encode_end(5, "U"))
    (rep,) = rx.reports
    assert rep.complete_frames.tolist() == [1, 2] and rep.missing_frames.tolist() == [0]
    assert (frames[2] == 2).all()
    rx.handle(encode_image(5, "U", 0, {"threshold_1": a}))           # after the end: late
    rx.handle(encode_image(5, "U", 1, {"other": a}))
    assert rx.assembler.rejected["late"] == 2
    rx.close()


# ---- full headers, bad copies, early ends, every rejection named ----

@pytest.mark.parametrize("array_compression", [None, "bslz4", "lz4"])
@pytest.mark.parametrize("detail", ["all", "basic", "none"])
def test_start_arrays_decode_to_numpy_and_pickle(detail, array_compression):
    """SIMPLON header_detail all puts flatfield, pixel mask (tag 40 over typed arrays)
    and the count-rate table (a typed array) in the start: they come out as NumPy, with
    no CBOR tag left anywhere, so the start pickles to the other receivers."""
    import pickle

    from cbor2 import CBORTag

    rng = np.random.default_rng(1)
    ff = {c: rng.random((5, 7)).astype("<f4") for c in ("t1", "t2")}
    mask = {c: (rng.random((5, 7)) < 0.2).astype("<u4") * 4 for c in ("t1", "t2")}
    table = rng.integers(0, 1 << 20, 300).astype("<u4")
    s = decode_message(encode_start(1, "U", 4, (5, 7), "uint16", ("t1", "t2"),
                                    header_detail=detail, flatfield=ff, pixel_mask=mask,
                                    countrate_table=table,
                                    array_compression=array_compression))

    def tags(v):
        if isinstance(v, CBORTag):
            return 1
        if isinstance(v, dict):
            return sum(tags(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return sum(tags(x) for x in v)
        return 0

    back = pickle.loads(pickle.dumps(s))
    assert tags(back.fields) == 0
    arrays = back.arrays()
    if detail == "all":
        assert np.array_equal(arrays["flatfield"]["t2"], ff["t2"])
        assert arrays["flatfield"]["t2"].dtype == np.float32
        assert np.array_equal(arrays["pixel_mask"]["t1"], mask["t1"])
        assert np.array_equal(arrays["countrate_correction_lookup_table"], table)
        assert back.arrays("t1")["flatfield"].keys() == {"t1"}
    else:   # basic / none leave the arrays out; a pixel mask given is still sent
        assert "flatfield" not in arrays and "countrate_correction_lookup_table" not in arrays
        assert np.array_equal(arrays["pixel_mask"]["t2"], mask["t2"])


def test_undefined_and_simple_values_in_a_start_pickle():
    import pickle

    s = decode_message(encode_start(1, "U", 2, (4, 4), user_data={"a": [1, 2]})
                       .replace(b"\x82\x01\x02", b"\x82\xf7\xf0"))   # [undefined, simple(16)]
    back = pickle.loads(pickle.dumps(s))
    assert list(back.fields["user_data"]["a"]) == [None, 16]


def test_an_undecodable_start_array_is_one_error_naming_the_field():
    from cbor2 import CBORTag, dumps

    from streams.protocols.stream2.streamv2 import SELF_DESCRIBE

    good = decode_message(encode_start(1, "U", 4, (5, 7), header_detail="all"))
    assert "flatfield" in good.fields
    import cbor2

    m = dict(cbor2.loads(encode_start(1, "U", 4, (5, 7), header_detail="all")))
    # a flatfield whose typed array holds 13 bytes for 5 x 7 float32
    m["flatfield"] = {"threshold_1": CBORTag(40, [[5, 7], CBORTag(85, bytes(13))])}
    with pytest.raises(ProtocolError) as e:
        decode_message(dumps(CBORTag(SELF_DESCRIBE, m)))
    assert e.value.reason == "malformed_header" and "flatfield.threshold_1" in e.value.detail
    m["flatfield"] = {"threshold_1": CBORTag(40, [[5, 7], CBORTag(
        85, CBORTag(56500, ["bslz4", 4, b"\x00" * 12 + b"junk"]))])}
    with pytest.raises(ProtocolError) as e:
        decode_message(dumps(CBORTag(SELF_DESCRIBE, m)))
    assert "flatfield.threshold_1" in e.value.detail
    # a compressed table claiming 2**40 bytes: refused before any memory is taken
    m["countrate_correction_lookup_table"] = CBORTag(70, CBORTag(
        56500, ["lz4", 0, (1 << 40).to_bytes(8, "big") + (8192).to_bytes(4, "big")]))
    m["flatfield"] = good.fields["flatfield"]["threshold_1"].tolist()
    with pytest.raises(ProtocolError) as e:
        decode_message(dumps(CBORTag(SELF_DESCRIBE, m)))
    assert "countrate_correction_lookup_table" in e.value.detail


def _rx(frames, **kw):
    return StreamV2Receiver(collect(frames), "tcp://127.0.0.1:1", idle_timeout=30, **kw)


def _corrupt(buf: bytes, payload: bytes) -> bytes:
    """The same image message with its compressed payload's last bytes flipped."""
    i = buf.rindex(payload)
    bad = payload[:-8] + bytes(b ^ 0xFF for b in payload[-8:])
    return buf[:i] + bad + buf[i + len(payload):]


def test_a_corrupt_copy_never_hides_or_overwrites_a_good_frame():
    """Image 1: corrupt copy first, then the good one; image 2: good first, then corrupt;
    image 3 twice. Every frame is committed once, decoded; each bad copy is named."""
    from streams.codecs import bslz4_encode as enc

    frames = {}
    rx = _rx(frames, partition_frames=2)
    imgs = [np.full((6, 8), 10 + i, "<u2") for i in range(5)]
    rx.handle(encode_start(4, "U", 5, (6, 8)))
    good = [encode_image(4, "U", i, {"threshold_1": a}) for i, a in enumerate(imgs)]
    bad = {i: _corrupt(good[i], enc(imgs[i])) for i in (1, 2)}
    for m in (good[0], bad[1], good[1], good[2], bad[2], good[3], good[3], good[4]):
        rx.handle(m)
    rx.handle(encode_end(4, "U"))
    (rep,) = rx.reports
    assert rep.ok and sorted(frames) == [0, 1, 2, 3, 4]
    assert all((frames[i] == 10 + i).all() for i in frames)
    # the corrupt copy of image 1 fails to decode; the one of image 2 comes after a good
    # copy: decoded aside (to compare it with the first), it fails too and cannot overwrite
    assert rep.rejected["corrupt_payload"] + rep.rejected["wrong_payload_size"] == 2
    assert rep.rejected["duplicate"] == 1 and not rep.conflicting
    text = " | ".join(rep.examples)
    assert "series series-4-U image 1: " in text
    assert "series series-4-U image 2 (a second copy): " in text
    assert "series series-4-U image 3 arrived twice" in text
    rx.close()


def test_an_end_before_the_start_is_held_and_closes_the_series_when_it_arrives():
    frames = {}
    rx = _rx(frames)
    a = np.ones((4, 4), "<u2")
    for i in range(3):
        rx.handle(encode_image(5, "U", i, {"threshold_1": a * i}))
    rx.handle(encode_end(5, "U"))
    assert not rx.reports and not rx.assembler.rejected
    rx.handle(encode_start(5, "U", 3, (4, 4)))
    (rep,) = rx.reports          # closed by its end at once, not by the idle timeout
    assert rep.ended_by == "end" and rep.ok and (frames[2] == 2).all()
    rx.close()


def test_series_are_keyed_by_unique_id_and_id():
    """A detector that restarts its numbering: two series 1 with different unique ids."""
    frames = {}
    rx = _rx(frames)
    a = np.ones((4, 4), "<u2")
    for uid, k in (("first", 1), ("second", 2)):
        rx.handle(encode_start(1, uid, 2, (4, 4)))
        for i in range(2):
            rx.handle(encode_image(1, uid, i, {"threshold_1": a * k}))
    rx.handle(encode_end(1, "second"))
    rx.handle(encode_end(1, "first"))
    scans = [r.scan for r in rx.reports]
    assert scans == ["series-1-second", "series-1-first"]
    assert all(r.ok for r in rx.reports) and not rx.assembler.rejected
    rx.close()


def test_a_hostile_start_is_a_rejection_and_the_client_keeps_going():
    rx = _rx({})
    rx.handle(encode_start(1, "U", 4, (4, 4), user_data={"scan_shape": 5}))
    rx.handle(encode_start(2, "U", 4, (4, 4), user_data={"scan_shape": [3, 3]}))
    rx.handle(encode_start(3, "U", 1 << 40, (4, 4)))
    assert rx.assembler.rejected == {"malformed_header": 2, "out_of_range": 1}
    assert "series-1-U: no scan geometry (TypeError" in rx.assembler.examples[0]
    rx.handle(encode_start(4, "U", 1, (4, 4)))
    rx.handle(encode_image(4, "U", 0, {"threshold_1": np.ones((4, 4), "<u2")}))
    rx.handle(encode_end(4, "U"))
    assert [r.ok for r in rx.reports] == [True]
    rx.close()


def test_a_series_that_never_starts_is_reported():
    rx = _rx({})
    a = np.ones((4, 4), "<u2")
    rx.handle(encode_image(8, "X", 0, {"threshold_1": a}))
    rx.handle(encode_image(8, "X", 1, {"threshold_1": a}))
    rx.handle(encode_end(8, "X"))
    assert rx.held() == {"series-8-X": 3}
    never = rx.never_started()
    assert never == {"series-8-X": {"images": 2, "ends": 1}}
    assert rx.assembler.rejected["unknown_scan"] == 3
    assert any("series-8-X image 1: its start never arrived" in e for e in rx.assembler.examples)
    rx.close()


def test_rejections_outside_any_series_have_text_and_are_counted_in_the_summary():
    rx = _rx({})
    rx.handle(encode_start(2, "U", 2, (4, 4)))
    for name in ("garbage", "unknown type", "not a map", "not tag 40"):
        rx.handle(BAD[name][0])
    rx.handle(encode_end(2, "U"))
    (rep,) = rx.reports
    assert sum(rx.assembler.rejected.values()) == 4 == len(rx.assembler.examples)
    assert all(e.startswith("malformed_header: ") and len(e) > 25 for e in rx.assembler.examples)
    assert rep.rejected_unattributed["malformed_header"] == 4
    assert "4 messages rejected (malformed_header 4; 4 naming no open scan" in rep.summary()
    rx.close()


def test_the_pixel_mask_is_applied_when_asked():
    mask = np.zeros((4, 4), "<u4")
    mask[1, 2] = mask[3, 0] = 1
    for apply in (False, True):
        frames = {}
        rx = _rx(frames, apply_pixel_mask=apply)
        rx.handle(encode_start(3, "U", 1, (4, 4), header_detail="all",
                               pixel_mask={"threshold_1": mask}))
        rx.handle(encode_image(3, "U", 0, {"threshold_1": np.full((4, 4), 7, "<u2")}))
        rx.handle(encode_end(3, "U"))
        want = np.where(mask != 0, 0, 7) if apply else np.full((4, 4), 7)
        assert np.array_equal(frames[0], want) and rx.masked("series-3-U") == apply
        rx.forget("series-3-U")      # finalized: the arrays are dropped, the key stays
        assert not rx.starts_by_scan and rx.starts[("U", 3)].fields == {}
        rx.handle(encode_start(3, "U", 1, (4, 4)))
        assert rx.assembler.rejected["duplicate"] == 1
        rx.close()


def test_reports_count_an_image_accepted_by_two_receivers():
    g = ScanGeometry("s", 1, 6, 1, (2, 2), "<u2", (1, 6))
    a, b = ScanReport.empty(g), ScanReport.empty(g)
    a.got[[0, 1, 2], 0] = True
    b.got[[2, 3, 4, 5], 0] = True
    m = a.merge(b)
    assert m.ok and m.rejected["duplicate"] == 1 == m.duplicates_across
    assert m.to_dict()["messages"]["duplicates_across_receivers"] == 1
    assert any("frame(s) 2 accepted by two receivers" in e for e in m.examples)


def test_scan_file_keeps_the_detector_arrays(tmp_path):
    import h5py

    from analyses.contract import FrameSum
    from analyses.output import write_scan
    from streams.protocols.stream2.nxdetector import write_detector

    rng = np.random.default_rng(2)
    ff = {"t1": rng.random((4, 4)).astype("<f4"), "t2": np.ones((4, 4), "<f4")}
    mask = {"t1": np.eye(4, dtype="<u4"), "t2": np.zeros((4, 4), "<u4")}
    s = decode_message(encode_start(6, "U", 2, (4, 4), "uint16", ("t1", "t2"),
                                    header_detail="all", flatfield=ff, pixel_mask=mask,
                                    countrate_table=np.arange(10, dtype="<u4")))
    rep = ScanReport.empty(s.geometry())
    path = tmp_path / "s.h5"
    write_scan(str(path), FrameSum(), FrameSum().empty(), rep.geometry, rep.coverage(),
               detector=lambda g: write_detector(g, s, "t2", pixel_mask_applied=True))
    with h5py.File(path, "r") as f:
        d = f["detector"]
        assert d.attrs["NX_class"] == "NXdetector" and d.attrs["channel"] == "t2"
        assert np.array_equal(d["pixel_mask"][()], mask["t2"])
        assert np.array_equal(d["t1_channel/pixel_mask"][()], mask["t1"])
        assert np.array_equal(d["t1_channel/flatfield"][()], ff["t1"])
        assert np.array_equal(d["countrate_correction_lookup_table"][()], np.arange(10))
        assert d["threshold_energy"][()] == 8000.0 and bool(d["pixel_mask_applied"][()])
        assert d["x_pixel_size"][()] == 75e-6


@pytest.mark.timeout(120)
def test_hostile_messages_over_a_real_socket_do_not_stop_the_client():
    """Multi-part, garbage, a truncated image, a corrupt copy: over real ZeroMQ sockets
    on 127.0.0.1 the series still closes whole, every rejection counted and named."""
    from streams.codecs import bslz4_encode as enc

    imgs = [np.full((8, 8), i, "<u2") for i in range(6)]
    with StreamV2Simulator(sndhwm=1000) as sim:
        rxs, threads, got, reports = serve_v2(sim, idle_timeout=20)
        time.sleep(0.3)
        for t_ in threads:
            t_.start()
        sim.send(encode_start(11, "H", 6, (8, 8)))
        sim.send_parts([b"\xd9\xd9\xf7", b"second part"])
        for i, a in enumerate(imgs):
            m = encode_image(11, "H", i, {"threshold_1": a})
            if i == 2:
                sim.send(m[: len(m) // 2])                      # truncated message
                sim.send(_corrupt(m, enc(a)))                    # a corrupt copy
            sim.send(m)
        sim.send(b"\xd9\xd9\xf7\xff")
        sim.send(encode_end(11, "H"))
        for t_ in threads:
            t_.join(60)
        rxs[0].close()
    (rep,) = reports[0]
    assert rep.ok and rep.ended_by == "end" and sorted(got) == list(range(6))
    asm = rxs[0].assembler
    assert sum(asm.rejected.values()) == 4 and asm.rejected["malformed_header"] == 3
    assert any("series series-11-H image 2" in e for e in asm.examples)
    assert any("2 parts" in e for e in asm.examples)


def test_job_rejections_reach_the_live_progress_and_the_watch_line():
    """Rank 0 sums every receiver's rejections (any scan or none) from the heartbeats;
    the live progress carries them and `stager stream watch` prints reason and example."""
    from streams.cli import _line, _rejections_line
    from streams.job.coordinator import Coordinator
    from streams.job.roles import assign_roles

    c = Coordinator(assign_roles([0, 0, 1, 1], 1), "any")
    c.rejections(0, {"malformed_header": 2}, ["malformed_header: not CBOR (x)"])
    c.rejections(1, {"malformed_header": 1, "unknown_scan": 3}, ["unknown_scan: series-9 ..."])
    c.rejections(1, {"malformed_header": 1, "unknown_scan": 4}, ["unknown_scan: series-9 ..."])
    job = c.job_rejections()
    assert job["total"] == 7 and job["by_reason"] == {"malformed_header": 3, "unknown_scan": 4}
    g = ScanGeometry("series-1-A", 1, 4, 1, (2, 2), "<u2", (2, 2))
    rep = ScanReport.empty(g)
    rep.rejected["corrupt_payload"] += 1
    rep.examples.append("corrupt_payload: series series-1-A image 3: ...")
    c.snapshot(0, rep, 0.0, 0.0)
    p = c.progress("series-1-A", 1.0)
    assert p["rejected"] == 1 and p["rejected_by_reason"] == {"corrupt_payload": 1}
    assert p["job_rejected"]["total"] == 7

    class Msg:
        scan, final, header, progress = "series-1-A", False, {"t": 1.0}, p

    line = _line(Msg, {})
    assert "1 rejected [corrupt_payload 1; e.g. corrupt_payload: series series-1-A image 3" \
        in line and "job: 7 rejected (malformed_header 3, unknown_scan 4)" in line
    c.rejections(1, {"malformed_header": 1, "unknown_scan": 4}, [], {"series-9-X": 2})
    assert c.job_rejections()["held_before_start"] == {"series-9-X": 2}

    class JobMsg:
        job, scan, final, header = True, "", False, {"t": 2.0}
        progress = {"job_rejected": c.job_rejections()}

    jl = _line(JobMsg, {})
    assert jl.startswith("job: 7 rejected (malformed_header 3, unknown_scan 4) e.g. ")
    assert "held before their start: series-9-X 2" in jl and "unknown_scan 4" in jl
    summary = {"rejected": 7, "by_reason": job["by_reason"], "examples": job["examples"],
               "series_never_started": {"series-9-X": {"images": 3, "ends": 1}}}
    text = _rejections_line(summary, "/out")
    assert text.startswith("job: 7 messages rejected (malformed_header 3, unknown_scan 4)")
    assert "series-9-X (3 images, 1 ends)" in text and "/out/rejections.json" in text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("threads", [0, 2])
def test_decode_threads_give_the_same_frames_and_rejections(threads):
    """Payloads decoded on threads: the same frames, the same rejections (a corrupt copy,
    a duplicate) as on the receiving thread, over a real socket."""
    from streams.codecs import bslz4_encode as enc

    imgs = [(np.arange(64).reshape(8, 8) * (i + 1)).astype("<u2") for i in range(30)]
    with StreamV2Simulator(sndhwm=1000) as sim:
        rxs, ths, got, reports = serve_v2(sim, idle_timeout=20, decode_threads=threads)
        time.sleep(0.3)
        ths[0].start()
        sim.send(encode_start(12, "T", 30, (8, 8)))
        for i, a in enumerate(imgs):
            m = encode_image(12, "T", i, {"threshold_1": a}, "lz4" if i % 2 else "bslz4")
            if i == 4:
                sim.send(_corrupt(m, enc(a)))
            sim.send(m)
            if i == 9:
                sim.send(m)
        sim.send(encode_end(12, "T"))
        ths[0].join(60)
        rxs[0].close()
    (rep,) = reports[0]
    assert rep.ok and sorted(got) == list(range(30))
    assert all(np.array_equal(got[i], imgs[i]) for i in got)
    assert rep.rejected["duplicate"] == 1 and \
        rep.rejected["corrupt_payload"] + rep.rejected["wrong_payload_size"] == 1


# ---- bounded and total: the specification's types, arrays in total, held by bytes ----

def _dumps(m):
    import cbor2

    return cbor2.dumps(cbor2.CBORTag(55799, m))


def _fields(buf):
    import cbor2

    return dict(cbor2.loads(buf))


START = _fields(encode_start(1, "U", 4, (4, 4)))
IMAGE = _fields(encode_image(1, "U", 0, {"threshold_1": np.ones((4, 4), "<u2")}))


@pytest.mark.parametrize("msg,field", [
    ({**START, "series_id": 1 << 64}, "series_id"),
    ({**START, "series_id": 10 ** 5000}, "series_id"),       # a CBOR bignum of 2 KB
    ({**START, "series_id": -(10 ** 5000)}, "series_id"),
    ({**START, "number_of_images": 1 << 64}, "number_of_images"),
    ({**START, "image_size_x": 1 << 70}, "image_size_x"),
    ({**IMAGE, "image_id": 1 << 64}, "image_id"),
    ({"type": "end", "series_id": -1}, "series_id"),
    ({**START, "user_data": {"n": -(1 << 63) - 1}}, "user_data.n"),
    ({**START, "user_data": [0, 10 ** 5000]}, "user_data[1]"),
    ({**START, "user_data": {10 ** 5000: 1}}, "user_data"),
    ({**IMAGE, "user_data": {"x": 1 << 64}}, "user_data.x"),
])
def test_integers_are_bounded_by_the_specification_s_types(msg, field):
    """Integer fields are unsigned 64-bit (the specification's ``Integer``), any other
    integer fits int64 or uint64; beyond, a short malformed_header naming the field --
    never a ValueError from Python's own limits on the text of a huge integer."""
    with pytest.raises(ProtocolError) as e:
        decode_message(_dumps(msg))
    assert e.value.reason == "malformed_header"
    assert field in e.value.detail and len(e.value.detail) < 300, e.value.detail


def test_integers_at_the_bounds_are_accepted():
    s = decode_message(_dumps({**START, "series_id": (1 << 64) - 1,
                               "user_data": {"lo": -(1 << 63), "hi": (1 << 64) - 1}}))
    assert s.series_id == (1 << 64) - 1 and s.fields["user_data"]["lo"] == -(1 << 63)
    assert s.scan == f"series-{(1 << 64) - 1}-U"


@pytest.mark.parametrize("channels,what", [
    (["threshold_1", "threshold_1"], "named twice"), ([""], "empty"), (["a/b"], "'/'"),
    ("threshold_1", "list of text"), ([1], "list of text")])
def test_a_start_s_channels_are_distinct_names(channels, what):
    with pytest.raises(ProtocolError) as e:
        decode_message(_dumps({**START, "channels": channels}))
    assert e.value.reason == "malformed_header" and what in e.value.detail


def test_non_text_keys_of_a_message_or_of_its_data_are_malformed():
    for m in ({**START, 7: 1}, {**IMAGE, "data": {10 ** 5000: IMAGE["data"]["threshold_1"]}}):
        with pytest.raises(ProtocolError) as e:
            decode_message(_dumps(m))
        assert e.value.reason == "malformed_header" and "is not a text string" in e.value.detail


def test_the_typed_arrays_of_a_message_are_bounded_in_total():
    """header_detail all: two 64x64 arrays of 16 KiB per channel and a 16 KiB table,
    each within any bound, together over a smaller one."""
    buf = encode_start(1, "U", 4, (64, 64), channels=("t1", "t2"), header_detail="all",
                       array_compression="lz4")
    total = 4 * 64 * 64 * 4 + (1 << 12) * 4
    s = decode_message(buf, max_array_bytes=total)
    assert s.nbytes == len(buf) + total
    with pytest.raises(ProtocolError) as e:
        decode_message(buf, max_array_bytes=total - 1)
    assert e.value.reason == "too_large" and "over the bound" in e.value.detail
    # an image's channels count by their dimensions (they stay encoded)
    im = encode_image(1, "U", 0, {"a": np.zeros((64, 64), "<u2"), "b": np.zeros((64, 64), "<u2")})
    assert decode_message(im, max_array_bytes=2 * 8192).nbytes == len(im)
    with pytest.raises(ProtocolError, match="too_large"):
        decode_message(im, max_array_bytes=2 * 8192 - 1)
    # an image's user-data arrays: also within max_field_bytes (what holding it may take)
    ud = _dumps({**_fields(im), "user_data": np_typed(np.zeros(4096, "<u2"))})
    assert decode_message(ud, max_field_bytes=8192).nbytes == len(ud) + 8192
    with pytest.raises(ProtocolError) as e:
        decode_message(ud, max_field_bytes=8191)
    assert e.value.reason == "too_large" and "image's fields" in e.value.detail


def np_typed(a):
    import cbor2

    return cbor2.CBORTag(69, a.tobytes())


def test_an_lz4_bomb_is_refused_from_its_declared_size_before_anything_is_allocated():
    """256 MiB of zeros as lz4 (about 1 MB) in an image's user_data: refused with a
    bound of 128 MiB, and decoding takes no more than a few MiB."""
    import tracemalloc

    import cbor2

    from streams.codecs import lz4_encode

    bomb = cbor2.CBORTag(64, cbor2.CBORTag(56500, ["lz4", 0, lz4_encode(
        np.zeros(256 << 20, np.uint8), 0)]))
    buf = _dumps({**IMAGE, "user_data": {"b": bomb}})
    assert len(buf) < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError) as e:
            decode_message(buf, max_array_bytes=128 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.reason == "too_large" and "user_data.b" in e.value.detail
    assert peak < 4 * len(buf) + (1 << 20), peak
    # a tag 40 whose dimensions claim more than the bound, over 4 bytes of payload
    huge = cbor2.CBORTag(40, [[1 << 31, 1 << 31], cbor2.CBORTag(69, bytes(4))])
    with pytest.raises(ProtocolError, match="too_large"):
        decode_message(_dumps({**IMAGE, "data": {"threshold_1": huge}}))


def test_held_images_are_bounded_by_bytes_and_a_full_hold_waits_for_the_shared_start():
    """A client whose peers share starts (``shared_starts``) holds images before the
    start within ``held_bytes`` (plus the one message that filled it), then stops
    reading its socket: the rest wait in ZeroMQ's queues, nothing is rejected; the
    shared start releases the hold and the client reads on -- every frame arrives."""
    shape, n = (16, 16), 40
    frames = [np.full(shape, i, "<u2") for i in range(n)]
    one = len(encode_image(3, "H", 0, {"threshold_1": frames[0]}))
    got = {}
    with StreamV2Simulator(sndhwm=1000) as sim:
        rx = StreamV2Receiver(collect(got), sim.endpoint, idle_timeout=30, shared_starts=True,
                              held_bytes=5 * one)
        rx.connect()
        time.sleep(0.3)
        start = encode_start(3, "H", n, shape)
        for i in range(n):
            sim.send(encode_image(3, "H", i, {"threshold_1": frames[i]}))
        sim.send(encode_end(3, "H"))
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            rx.step(0.01)
        assert rx.waiting() and 5 * one <= rx.held_now <= 6 * one
        assert rx.held() == {"series-3-H": rx.held_now // one}
        assert not rx.assembler.rejected
        rx.apply_shared("start", decode_message(start))     # as another client shares it
        assert rx.held_now == 0 and not rx.waiting()
        reps = rx.serve(1, timeout=20)
        rx.close()
    assert reps and reps[0].ok and reps[0].ended_by == "end", reps
    assert sorted(got) == list(range(n)) and all((got[i] == i).all() for i in got)


def test_a_single_client_rejects_the_oldest_held_images_and_forgets_starts_that_do_not_open():
    rx = _rx({}, held_bytes=1)
    rx.handle(encode_image(4, "X", 0, {"threshold_1": np.ones((4, 4), "<u2")}))
    assert rx.assembler.rejected == {"too_large": 1} and rx.held_now == 0
    assert "more than the 1 bytes for held messages" in rx.assembler.examples[0]
    rx.handle(encode_start(1, "U", 4, (4, 4), user_data={"scan_shape": [3, 3]}))
    rx.handle(encode_start(2, "U", 0, (4, 4)))
    assert not rx.starts and not rx.starts_by_scan     # rejected: nothing kept
    assert rx.assembler.rejected == {"too_large": 1, "malformed_header": 2}, rx.assembler.rejected
    rx.close()


def test_cbor_s_other_semantic_tags_are_plain_values():
    """Shared references would let 1 KB name an object 2^29 times over (each level two
    references to the one below): they, and regular expressions, rationals, sets, are
    left as tags and skipped, as stream2.c skips tags; a key given twice is malformed."""
    import pickle

    import cbor2

    levels = 30
    items = [b"\xd8\x1c\x81\x01"]                     # tag 28 (shareable) [1]
    for k in range(1, levels):
        ref = b"\xd8\x1d" + cbor2.dumps(k - 1)       # tag 29 (shared reference) k - 1
        items.append(b"\xd8\x1c\x82" + ref + ref)
    laughs = bytes([0x98, levels]) + b"".join(items)
    buf = _dumps({**START, "user_data": "@"}).replace(cbor2.dumps("@"), laughs)
    assert len(buf) < 2000
    s = decode_message(buf)
    assert len(pickle.dumps(s)) < 4 * len(buf)       # nothing multiplied
    assert list(s.fields["user_data"][2]) == [1, 1]  # each reference: its index
    m = decode_message(_dumps({**START, "user_data": [cbor2.CBORTag(35, "(a+)+$"),
                                                      cbor2.CBORTag(30, [1, 3])]}))
    regex, rational = m.fields["user_data"]
    assert regex == "(a+)+$" and list(rational) == [1, 3]   # text, not a compiled pattern
    with pytest.raises(ProtocolError, match="Duplicate map key"):
        decode_message(b"\xd9\xd9\xf7\xa2" + t("type") + t("end") + t("type") + t("end"))


def test_two_series_whose_names_collide_never_share_a_scan():
    """Unique ids ``a/b`` and ``a_b`` make the same scan name: the second start is a
    conflict, and its images never land in the first series' frames."""
    frames = {}
    rx = _rx(frames)
    rx.handle(encode_start(1, "a/b", 2, (4, 4)))
    rx.handle(encode_start(1, "a_b", 2, (4, 4)))
    assert rx.assembler.rejected == {"conflict": 1}
    assert "is that of another series" in rx.assembler.examples[0]
    for i in range(2):
        rx.handle(encode_image(1, "a_b", i, {"threshold_1": np.full((4, 4), 9, "<u2")}))
        rx.handle(encode_image(1, "a/b", i, {"threshold_1": np.full((4, 4), i, "<u2")}))
    rx.handle(encode_end(1, "a/b"))
    (rep,) = rx.reports
    assert rep.scan == "series-1-a_b" and rep.ok
    assert all((frames[i] == i).all() for i in range(2))
    assert rx.held() == {"series-1-a_b": 2}
    rx.close()


def test_a_start_without_image_dtype_is_held_within_the_hold_and_expires():
    start = {k: v for k, v in START.items() if k != "image_dtype"}
    rx = StreamV2Receiver(collect({}), "tcp://127.0.0.1:1", idle_timeout=0.2,
                          held_bytes=2 * len(_dumps(start)))
    rx.handle(_dumps(start))
    assert rx.held_now == len(_dumps(start)) and rx.starts
    rx.handle(_dumps({**start, "series_id": 2}))
    rx.handle(_dumps({**start, "series_id": 3}))     # no room left: refused, not kept
    assert rx.assembler.rejected == {"busy": 1} and len(rx.starts) == 2
    time.sleep(0.3)
    rx.step(0.01)
    assert rx.held_now == 0 and not rx.starts
    assert rx.assembler.rejected == {"busy": 1, "malformed_header": 2}
    assert "no image of it came within 0.2 s" in rx.assembler.examples[-1]
    rx.close()
