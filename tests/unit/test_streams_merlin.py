"""Merlin: MPX framing, HDR, MQ1 frames of every counter depth (raw ones checked against
LiberTEM's own MIB encoders), hostile messages refused and counted by the receiver."""
import numpy as np
import pytest

from streams.assemble import Assembler
from streams.errors import ProtocolError
from streams.protocols.merlin.mpx import (MAX_MESSAGE, decode_pixels, encode_frame,
                                          encode_hdr, encode_message, images_of,
                                          parse_frame_header, parse_hdr, parse_prefix)
from streams.protocols.merlin.receiver import MerlinReceiver

DEPTHS = [(1, False), (6, False), (12, False), (24, False), (1, True), (6, True), (12, True)]


def frames(depth, n=3, shape=(32, 64), seed=0):
    hi = {1: 2, 6: 64, 12: 4096, 24: 1 << 24}[depth]
    return np.random.default_rng(seed).integers(0, hi, (n, *shape))


@pytest.mark.parametrize("depth,raw", DEPTHS)
def test_round_trip(depth, raw):
    for i, a in enumerate(frames(depth)):
        msg = encode_frame(i + 1, a, depth, raw)
        h = parse_frame_header(msg)
        assert (h.sequence, h.shape, h.depth, h.kind == "R64") == (i + 1, a.shape, depth, raw)
        got = decode_pixels(h, msg[h.header_bytes:])
        assert got.dtype == np.dtype(h.dtype) and np.array_equal(got, a)


@pytest.mark.parametrize("depth", [1, 6, 12])
def test_raw_frames_from_libertems_encoders(depth):
    """LiberTEM's MIB encoders (libertem.io.dataset.mib.encode_r*) make the raw rows."""
    mib = pytest.importorskip("libertem.io.dataset.mib",
                              reason="LiberTEM is not installed (pip install mpistage[libertem])")
    a = frames(depth, 1, (16, 64))[0]
    enc = {1: mib.encode_r1, 6: mib.encode_r6, 12: mib.encode_r12}[depth]
    width = {1: 64 // 8, 6: 64, 12: 128}[depth]
    out = np.zeros((16, width), np.uint8 if depth != 1 else np.uint8)
    enc(a.astype({1: np.uint8, 6: np.uint8, 12: np.uint16}[depth]), out)
    ours = encode_frame(1, a, depth, raw=True)
    h = parse_frame_header(ours)
    assert ours[h.header_bytes:] == out.tobytes()
    assert np.array_equal(decode_pixels(h, out.tobytes()), a)


def test_framing_and_header():
    assert encode_message(b"abc")[:15] == b"MPX,0000000004,"
    assert parse_prefix(b"MPX,0000000004,") == 3
    hdr = parse_hdr(encode_hdr(64, 8, 12, ScanX=8, ScanY=8))
    assert images_of(hdr) == 64 and hdr["Counter Depth (number)"] == "12" and hdr["ScanX"] == "8"


@pytest.mark.parametrize("prefix,reason", [
    (b"XPM,0000000004,", "malformed_header"), (b"MPX,00000000x4,", "malformed_header"),
    (b"MPX,0000000001,", "malformed_header"),
    (b"MPX,%010d," % (MAX_MESSAGE + 2), "too_large")])
def test_hostile_prefixes(prefix, reason):
    with pytest.raises(ProtocolError) as e:
        parse_prefix(prefix)
    assert e.value.reason == reason


def _frame_with(field, value):
    msg = bytearray(encode_frame(1, frames(12, 1)[0], 12))
    head = msg[:384].decode("ascii").split(",")
    head[field] = value
    new = ",".join(head).encode()
    return bytes(new[:384].ljust(384, b"\0")) + bytes(msg[384:])


@pytest.mark.parametrize("msg,reason,words", [
    (_frame_with(2, "99999"), "malformed_header", "header size"),
    (_frame_with(4, "40000"), "malformed_header", "pixels"),
    (_frame_with(6, "F32"), "unknown_encoding", "F32"),
    (encode_frame(1, frames(12, 1)[0], 12)[:-10], "wrong_payload_size", "header says"),
])
def test_hostile_frames(msg, reason, words):
    with pytest.raises(ProtocolError) as e:
        h = parse_frame_header(msg)
        decode_pixels(h, msg[h.header_bytes:])
    assert e.value.reason == reason and words in e.value.detail


def test_receiver_counts_what_it_refuses_and_keeps_the_acquisition():
    got = {}

    def deliver(part):
        for f, row, ok in zip(part.frames, part.data, part.complete):
            if ok:
                got[int(f)] = row.copy()

    rx = MerlinReceiver(deliver, "127.0.0.1", None, partition_frames=2)
    fr = frames(12, 4)
    rx.handle(encode_frame(1, fr[0], 12))                         # before any HDR
    rx.handle(encode_hdr(1 << 40, 8, 12))                          # 2^40 frames
    rx.handle(b"JUNK,")
    rx.handle(encode_hdr(4, 2, 12))
    for i, a in enumerate(fr):
        if i == 2:
            rx.handle(encode_frame(3, a, 12)[:-2])                 # cut short
        rx.handle(encode_frame(i + 1, a, 12))
    (rep,) = rx.reports
    assert rep.ok and rep.geometry.scan_shape == (2, 2) and rep.geometry.dtype == "<u2"
    assert all(np.array_equal(got[i], fr[i]) for i in range(4))
    r = rx.assembler.rejected
    assert r["unknown_scan"] == 1 and r["out_of_range"] == 1 and r["malformed_header"] == 1
    assert r["wrong_payload_size"] == 1
    assert any("1099511627776" in e for e in rx.assembler.examples)


def test_a_broken_stream_is_counted_dropped_and_reconnected():
    """Over a real TCP connection: garbage where a prefix must be, then a length bomb:
    each rejected with its reason, the connection dropped and made again, and an
    acquisition sent on the next connection is received whole."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    fr = frames(12, 2)
    sends = [b"GARBAGE-GARBAGE-GARBAGE",
             b"MPX,%010d," % (MAX_MESSAGE + 2),
             encode_message(encode_hdr(2, 2, 12)) + b"".join(
                 encode_message(encode_frame(i + 1, a, 12)) for i, a in enumerate(fr))]

    def serve():
        for data in sends:
            conn, _ = srv.accept()
            conn.sendall(data)
            conn.recv(1)          # until the receiver drops it (or the test ends)
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    got = {}

    def deliver(part):
        for f, row in zip(part.frames, part.data):
            got[int(f)] = row.copy()

    rx = MerlinReceiver(deliver, "127.0.0.1", port, partition_frames=2, idle_timeout=10)
    reps = rx.serve(1, timeout=20)
    rx.close()
    srv.close()
    assert len(reps) == 1 and reps[0].ok and sorted(got) == [0, 1]
    assert rx.assembler.rejected["malformed_header"] == 1
    assert rx.assembler.rejected["too_large"] == 1
    assert rx.connections == 3
    assert any("connection dropped" in e for e in rx.assembler.examples)


def test_frames_longer_than_the_read_buffer_and_split_anywhere_arrive_whole():
    """Over a real TCP connection, sent in odd-sized pieces: 12-bit frames larger than
    the receiver's read buffer (it grows, bounded by the memory bound) and smaller ones
    cut across reads (the partial message is moved to the buffer's front) arrive
    bit-exact, every counter depth's pixels swapped straight into the partition."""
    import socket
    import threading

    from streams.protocols.merlin import receiver as merlin_rx

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    big = frames(24, 2, (1024, 1280), seed=1)           # 5 MiB a frame: > the 4 MiB buffer
    small = frames(12, 40, (256, 256), seed=2)
    stream = (encode_message(encode_hdr(2, 2, 24))
              + b"".join(encode_message(encode_frame(i + 1, a, 24)) for i, a in enumerate(big))
              + encode_message(encode_hdr(40, 8, 12))
              + b"".join(encode_message(encode_frame(i + 1, a, 12))
                         for i, a in enumerate(small)))

    def serve():
        conn, _ = srv.accept()
        for i in range(0, len(stream), 777_777):
            conn.sendall(stream[i:i + 777_777])
        conn.recv(1)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    got = {}

    def deliver(part):
        for f, row in zip(part.frames, part.data):
            got[(part.scan, int(f))] = row.copy()

    rx = MerlinReceiver(deliver, "127.0.0.1", port, partition_frames=4, idle_timeout=10,
                        memory_bytes=64 << 20)
    reps = rx.serve(2, timeout=30)
    rx.close()
    srv.close()
    assert len(reps) == 2 and all(r.ok for r in reps), [r.rejected for r in reps]
    assert len(rx._buf) > merlin_rx._CHUNK
    a, b = (r.scan for r in reps)
    assert all(np.array_equal(got[(a, i)], big[i]) and got[(a, i)].dtype == "<u4"
               for i in range(2))
    assert all(np.array_equal(got[(b, i)], small[i]) for i in range(40))


def _field(msg, field, value):
    """``msg`` (an MQ1 frame) with header field ``field`` set to ``value``, same size."""
    size = int(msg[:64].split(b",")[2])
    head = msg[:size].rstrip(b"\0").split(b",")
    head[field] = value
    new = b",".join(head)
    assert len(new) <= size
    return new.ljust(size, b"\0") + msg[size:]


def _fed_whole(stream, **kw):
    """A receiver fed ``stream`` over a real socket pair, read as it comes (whole
    batches of messages in its buffer); its delivered frames and reports."""
    import socket

    got = {}

    def deliver(part):
        for f, row, ok in zip(part.frames, part.data, part.complete):
            if ok:
                got[int(f)] = row.copy()

    rx = MerlinReceiver(deliver, "127.0.0.1", None, **kw)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    rx._tcp = ours
    theirs.sendall(stream)
    theirs.close()
    while rx._tcp is not None:
        rx._read(1000)
    return rx, got


def test_frames_are_taken_in_batches_and_a_bad_one_among_them_is_counted(monkeypatch):
    """Whole runs of frames in the read buffer are checked as one array and swapped
    straight into the partitions (Assembler.data_range); a frame among them with a bad
    header, a second copy, a bad sequence number, a frame short of its pixels, one whose
    sequence is 0 (before the first: it must not wrap to the last) are each taken one by
    one, rejected and counted by reason, and their neighbours arrive exact. The same
    bytes handed over message by message give the same report and frames."""
    fr = frames(12, 24, (16, 16), seed=3)
    msg = [encode_frame(i + 1, a, 12) for i, a in enumerate(fr)]
    stamp = _field(msg[3], 9, b"2026-11-27 12:00:00.000321")    # a time stamp: batched
    bad = [_field(msg[5], 6, b"F32"),                   # pixel type: unknown_encoding
           msg[9],                                      # frame 10 twice: duplicate
           _field(msg[12], 1, b"00001x"),               # sequence: malformed_header
           msg[14][:-2],                                # 2 bytes short: wrong_payload_size
           _field(msg[15], 1, b"000000")]               # sequence 0: out_of_range
    order = (msg[:3] + [stamp, msg[4], bad[0]] + msg[5:10] + [bad[1]] + msg[10:12] + [bad[2]]
             + msg[12:14] + [bad[3]] + msg[14:15] + [bad[4]] + msg[15:])
    stream = encode_message(encode_hdr(24, 8, 12)) + b"".join(encode_message(m) for m in order)
    taken = []
    data_range = Assembler.data_range

    def counted(self, scan, first, count, decode):      # the real one, its frames counted
        n = data_range(self, scan, first, count, decode)
        taken.append(n)
        return n

    monkeypatch.setattr(Assembler, "data_range", counted)
    rx, got = _fed_whole(stream, partition_frames=5)
    (rep,) = rx.reports
    assert rep.ok and sorted(got) == list(range(24)), (rep.rejected, sorted(got))
    assert all(np.array_equal(got[i], fr[i]) and got[i].dtype == "<u2" for i in range(24))
    want = {"unknown_encoding": 1, "duplicate": 1, "malformed_header": 1,
            "wrong_payload_size": 1, "out_of_range": 1}
    assert dict(rx.assembler.rejected) == want and dict(rep.rejected) == want
    assert sum(taken) >= 15, taken          # most frames came in batches
    assert rep.received_data == 24 + 2      # the duplicate and the sequence 0 were data

    one = MerlinReceiver(lambda p: None, "127.0.0.1", None, partition_frames=5)
    one.handle(encode_hdr(24, 8, 12))
    for m in order:
        one.handle(m)
    (rep1,) = one.reports
    assert dict(rep1.rejected) == want and rep1.received_data == rep.received_data
    assert np.array_equal(rep1.got, rep.got) and rep1.accepted_bytes == rep.accepted_bytes


def test_data_range_places_counts_and_stops_where_data_must_decide():
    """Assembler.data_range (the batches' placement): frames in consecutive rows across
    partitions, each counted and digested as data() does; it stops before a frame already
    received (data() then rejects it as a duplicate), clips at the scan's end, and a
    decoder's CodecError commits nothing of its partition share."""
    from streams.errors import CodecError
    from streams.protocol import Begin, Data, ScanGeometry

    fr = frames(12, 10, (4, 8)).astype("<u2")
    parts = []
    asm = Assembler(lambda p: parts.append((list(p.frames), p.data.copy())), routing="any",
                    partition_frames=4)

    def rows_of(first):
        def decode(i, rows):
            rows[...] = fr[first + i:first + i + len(rows)]
        return decode

    asm.begin(Begin(0, ScanGeometry("s", 1, 10, 1, (4, 8), "<u2", (2, 5))))
    assert asm.data_range("s", 0, 6, rows_of(0)) == 6         # a partition and a half
    asm.data(Data("s", 3, 0, 0, 4, "raw"), fr[3].tobytes())    # a second copy: data() says
    assert asm.data_range("s", 5, 3, rows_of(5)) == 0          # frame 5 is not new
    assert asm.data_range("s", 6, 99, rows_of(6)) == 4         # clipped at the 10th frame
    (rep,) = asm.close_all("end")
    assert rep.ok and rep.received_data == 11 and dict(rep.rejected) == {"duplicate": 1}
    got = {f: d for fs, data in parts for f, d in zip(fs, data)}
    assert sorted(got) == list(range(10)) and all(np.array_equal(got[i], fr[i]) for i in got)

    def corrupt(i, rows):
        raise CodecError("corrupt_payload", "no")

    asm.begin(Begin(0, ScanGeometry("t", 1, 4, 1, (4, 8), "<u2", (2, 2))))
    assert asm.data_range("t", 0, 4, corrupt) == 0
    asm.data(Data("t", 0, 0, 0, 4, "raw"), fr[0].tobytes())    # the row was only proposed
    assert asm.data_range("t", 1, 3, rows_of(1)) == 3
    (rep,) = asm.close_all("end")
    assert rep.ok and rep.received_data == 4 and not rep.rejected
    assert list(parts[-1][0]) == [0, 1, 2, 3] and np.array_equal(parts[-1][1], fr[:4])


def test_batches_and_one_by_one_agree_on_mutated_headers(monkeypatch):
    """Random header bytes changed (digits, commas, NULs, anything) in frames of a stream,
    some as extra copies: the receiver reading whole batches and the same messages handed
    over one by one end with the same rejections by reason, the same frames and pixels."""
    rng = np.random.default_rng(42)
    taken = []
    data_range = Assembler.data_range
    monkeypatch.setattr(Assembler, "data_range",
                        lambda *a: taken.append(data_range(*a)) or taken[-1])
    fr = frames(12, 12, (8, 8), seed=3)
    msg = [encode_frame(i + 1, a, 12) for i, a in enumerate(fr)]
    for trial in range(100):
        order = list(msg)
        for _ in range(3):
            j = int(rng.integers(len(order)))
            m = bytearray(order[j])
            m[int(rng.integers(384))] = int(rng.choice([0, 32, 44, 48, 49, 57, 65,
                                                        int(rng.integers(256))]))
            if rng.random() < 0.5:
                order.insert(j, bytes(m))
            else:
                order[j] = bytes(m)
        stream = encode_message(encode_hdr(12, 4, 12)) + b"".join(map(encode_message, order))
        rx, got = _fed_whole(stream, partition_frames=5)
        one_got = {}

        def deliver(part, into=one_got):
            for f, row, ok in zip(part.frames, part.data, part.complete):
                if ok:
                    into[int(f)] = row.copy()

        one = MerlinReceiver(deliver, "127.0.0.1", None, partition_frames=5)
        one.handle(encode_hdr(12, 4, 12))
        for m in order:
            one.handle(m)
        rx.assembler.close_all("stopped")
        one.assembler.close_all("stopped")
        assert dict(rx.assembler.rejected) == dict(one.assembler.rejected), trial
        assert [(r.received_data, r.conflicting) for r in rx.reports] == \
            [(r.received_data, r.conflicting) for r in one.reports], trial
        assert all(np.array_equal(a.got, b.got) for a, b in zip(rx.reports, one.reports))
        assert sorted(got) == sorted(one_got), trial
        assert all(np.array_equal(got[k], one_got[k]) for k in got), trial
    assert sum(taken) > 100 * 12 // 2, sum(taken)      # most frames came in batches
