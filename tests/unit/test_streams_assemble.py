"""The assembler without sockets: partitions, memory bound, every rejection, timeouts, reports."""
import functools

import numpy as np
import pytest

from streams.accounting import ScanReport, ranges
from streams.assemble import Assembler
from streams.codecs import encode
from streams.protocol import Begin, Data, End, ScanGeometry
from streams.protocols.native.headers import encode_begin, encode_data, encode_end, feed


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def frames_of(g, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60000, (g.frames, *g.shape)).astype(g.dtype)


class Sink:
    def __init__(self):
        self.parts, self.frames = [], {}

    def __call__(self, p):
        self.parts.append((p.index, p.frames.tolist(), p.complete.tolist(), p.evicted))
        for f, img in zip(p.frames, p.data):
            self.frames[int(f)] = img.copy()


def make(g, r=0, R=1, **kw):
    sink, clock = Sink(), Clock()
    a = Assembler(sink, receiver=r, receivers=R, clock=clock, **kw)
    for p in range(g.producers):
        a.begin(Begin(p, g))
    return a, sink, clock


def send(a, g, imgs, f, s, enc="raw"):
    r0, r1 = g.sector_rows(s)
    a.data(Data(g.scan, f, s, r0, r1, enc), encode(enc, imgs[f][r0:r1]))


G = ScanGeometry("s", 2, 12, 3, (9, 5), "<u2", (3, 4))


def test_partitions_of_consecutive_local_frames():
    imgs = frames_of(G)
    a, sink, _ = make(G, r=1, R=2, partition_frames=2)
    for f in range(1, 12, 2):
        for s in (2, 0, 1):
            send(a, G, imgs, f, s, ["raw", "lz4", "bslz4"][s])
    assert [p[:2] for p in sink.parts] == [(0, [1, 3]), (1, [5, 7]), (2, [9, 11])]
    for p in range(2):
        a.end(End("s", p, 9))
    rep = a.closed["s"]
    assert rep.ok and rep.ended_by == "end" and rep.lost_in_transport == 0
    assert rep.complete_frames.tolist() == [1, 3, 5, 7, 9, 11]
    assert all(np.array_equal(sink.frames[f], imgs[f]) for f in range(1, 12, 2))


def test_native_messages_fed_as_frames():
    imgs = frames_of(G)
    sink = Sink()
    a = Assembler(sink, partition_frames=5)
    for p in range(2):
        feed(a, [encode_begin(G, p), b""])
    for f in range(12):
        for s in range(3):
            r = G.sector_rows(s)
            feed(a, [encode_data("s", f, s, r), imgs[f][r[0]:r[1]].tobytes()])
    feed(a, [encode_end("s", 0, 20), b""])
    feed(a, [encode_end("s", 1, 16), b""])
    rep = a.closed["s"]
    assert rep.ok and rep.received_data == 36 and rep.lost_in_transport == 0
    assert [p[1] for p in sink.parts] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]


def test_every_rejection_reason_is_counted_and_attributed():
    imgs = frames_of(G)
    a, sink, _ = make(G, r=0, R=2, max_scans=1)
    r0, r1 = G.sector_rows(0)
    ok = imgs[0][r0:r1].tobytes()
    a.data(Data("s", 1, 0, r0, r1, "raw"), ok)                    # wrong_receiver
    a.data(Data("s", 12, 0, r0, r1, "raw"), ok)                   # out_of_range frame
    a.data(Data("s", 0, 3, r0, r1, "raw"), ok)                    # out_of_range sector
    a.data(Data("s", 0, 1, r0, r1, "raw"), ok)                    # out_of_range rows
    a.data(Data("s", 0, 0, r0, r1, "raw"), ok[:-1])               # wrong_payload_size
    a.data(Data("s", 0, 0, r0, r1, "lz4"), b"\0" * 12 + b"junk")  # wrong size stated
    a.data(Data("s", 0, 0, r0, r1, "raw"), ok)                    # accepted
    a.data(Data("s", 0, 0, r0, r1, "raw"), ok)                    # duplicate
    a.begin(Begin(0, G))                                          # duplicate begin
    a.begin(Begin(0, ScanGeometry("s", 2, 12, 3, (9, 5), "<u4", (3, 4))))   # conflict
    a.begin(Begin(0, ScanGeometry("t", 1, 1, 1, (9, 5), "<u2", (1, 1))))    # busy
    a.data(Data("nope", 0, 0, r0, r1, "raw"), ok)                 # unknown_scan
    feed(a, [encode_begin(G, 1)])                                  # malformed: one frame
    feed(a, [encode_end("s", 1, 0), b"x"])                         # malformed: payload
    rep = a.scans["s"].report
    assert dict(rep.rejected) == {"wrong_receiver": 1, "out_of_range": 3,
                                  "wrong_payload_size": 2, "duplicate": 2, "conflict": 1,
                                  "malformed_header": 1}
    assert dict(rep.rejected_unattributed) == {"busy": 1, "unknown_scan": 1,
                                               "malformed_header": 1}
    assert sum(a.rejected.values()) == 13 and len(rep.examples) == 13
    assert sum(e.startswith("(no scan of its own) ") for e in rep.examples) == 3
    assert rep.received_data == 8
    a.end(End("s", 0, 8))
    a.end(End("s", 0, 8))                                         # duplicate end
    a.end(End("s", 1, 0))
    rep = a.closed["s"]
    assert rep.ended_by == "end" and rep.lost_in_transport == 0
    assert rep.complete_frames.size == 0 and rep.incomplete == {0: [1, 2]}
    assert rep.missing_frames.tolist() == [2, 4, 6, 8, 10]
    a.data(Data("s", 2, 0, r0, r1, "raw"), ok)                    # late
    assert a.rejected["late"] == 1
    assert sink.parts == [(0, [0], [False], False)]
    assert (sink.frames[0][r0:r1] == imgs[0][r0:r1]).all() and (sink.frames[0][r1:] == 0).all()


def test_memory_bound_evicts_oldest_partition_and_counts_it():
    g = ScanGeometry("m", 1, 8, 2, (4, 4), "<u2", (1, 8))
    imgs = frames_of(g)
    # budget for exactly 2 partitions of 2 frames and the accounting
    a, sink, _ = make(g, partition_frames=2, memory_bytes=2 * 2 * g.frame_bytes
                      + g.frames * (g.sectors * 9 + 3))
    assert a.scans["m"].slots == 2 and a.scans["m"].pool == []
    send(a, g, imgs, 0, 0)      # partition 0 opens
    send(a, g, imgs, 2, 0)      # partition 1 opens
    assert [b.shape for b in a.scans["m"].pool] == [(2, 4, 4), (2, 4, 4)]
    send(a, g, imgs, 4, 0)      # partition 2: no slot -> partition 0 delivered early
    assert sink.parts[0] == (0, [0, 1], [False, False], True)
    send(a, g, imgs, 0, 1)      # its sector comes late
    for f in (2, 3, 4, 5):
        for s in (0, 1):
            if (f, s) not in ((2, 0), (4, 0)):
                send(a, g, imgs, f, s)
    a.end(End("m", 0, 10))
    rep = a.closed["m"]
    assert rep.evicted_partitions == 1 and rep.rejected["late"] == 1
    assert rep.complete_frames.tolist() == [2, 3, 4, 5]
    assert rep.incomplete == {0: [1]} and rep.missing_frames.tolist() == [1, 6, 7]
    assert all(np.array_equal(sink.frames[f], imgs[f]) for f in (2, 3, 4, 5))


def test_idle_scan_closes_after_timeout_with_the_same_report():
    imgs = frames_of(G)
    a, _, clock = make(G, idle_timeout=5.0)
    for f in range(12):
        for s in range(3):
            if f != 4:
                send(a, G, imgs, f, s)
    a.end(End("s", 0, 18))       # producer 1 never ends
    clock.t = 4.9
    assert a.expire() == [] and "s" in a.scans
    clock.t = 5.0
    (rep,) = a.expire()
    assert rep.ended_by == "timeout" and rep.lost_in_transport is None
    assert rep.missing_frames.tolist() == [4] and rep.complete_frames.size == 11
    assert rep.ends_received == 1 and rep.ends_expected == 2


def test_stopped_receiver_closes_scans_as_stopped():
    a, _, _ = make(G)
    (rep,) = a.close_all()
    assert rep.ended_by == "stopped" and rep.missing_frames.size == 12


def _report(rng, expected):
    g = ScanGeometry("r", 2, 10, 3, (3, 3), "|u1", (2, 5))
    rep = ScanReport.empty(g, expected, ends_expected=2)
    rep.got[:] = rng.random((10, 3)) < 0.7
    rep.received_data = int(rep.got.sum()) + 1
    rep.sent, rep.ends_received = rep.received_data, 2
    rep.rejected["duplicate"] = 1
    return rep


def test_reports_merge_associatively_and_serialise():
    rng = np.random.default_rng(3)
    reps = [_report(rng, np.arange(10) % 3 == r) for r in range(3)]
    merged = [functools.reduce(ScanReport.merge, order) for order in
              (reps, reps[::-1], [reps[1], reps[0], reps[2]])]
    for m in merged[1:]:
        assert m.to_dict() == merged[0].to_dict()
    m = merged[0]
    assert m.receivers == 3 and m.expected.all() and m.rejected["duplicate"] == 3
    assert m.lost_in_transport == 0
    d = m.to_dict()
    assert d["frames_complete"] + d["frames_incomplete"] + d["frames_missing"] == 10
    assert ranges(np.array([1, 2, 3, 7, 9, 10])) == [(1, 4), (7, 8), (9, 11)]
    assert m.frames_complete.shape == (2, 5)


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        Assembler(print, receiver=2, receivers=2)
    with pytest.raises(ValueError):
        Assembler(print, routing="random")


def test_a_begin_too_large_for_the_memory_bound_is_refused_before_any_allocation():
    g = ScanGeometry("ok", 1, 8, 2, (16, 16), "<u2", (2, 4))
    huge = ScanGeometry("huge", 1, 4000, 2, (2048, 2048), "<u4", (40, 100))
    many = ScanGeometry("many", 1, 10**6, 2, (2, 2), "|u1", (1000, 1000))
    a, sink, _ = make(g, memory_bytes=1 << 20, partition_frames=1)
    for bad in (huge, many):
        a.begin(Begin(0, bad))
        assert bad.scan not in a.scans and bad.scan not in a.closed
    assert a.rejected == {"too_large": 2}
    assert any("huge" in e and "partitions" in e for e in a.examples)
    assert any("many" in e and "accounting" in e for e in a.examples)
    # the open scan is unharmed and counts them as not its own
    assert a.scans["ok"].report.rejected_unattributed == {"too_large": 2}
    assert not a.scans["ok"].pool


def test_a_taken_partition_keeps_its_frames_and_a_short_one_is_a_copy():
    """A receiver that takes a partition's data keeps it unchanged while the assembler fills
    the next partitions (it gave that buffer up); one it does not take shares the reused
    buffer; the last, shorter partition taken is a copy of its own size."""
    imgs = frames_of(G)
    kept = []

    def take(p):
        kept.append((p.frames.tolist(), p.take() if p.index % 2 == 0 else p.data))

    a = Assembler(take, partition_frames=5)
    for p in range(2):
        a.begin(Begin(p, G))
    for f in range(12):
        for s in range(3):
            send(a, G, imgs, f, s)
    for p in range(2):
        a.end(End("s", p, 18))
    assert [fr for fr, _ in kept] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    (f0, d0), (_, d1), (f2, d2) = kept
    assert np.array_equal(d0, imgs[f0]) and np.array_equal(d2, imgs[f2])
    assert d2.base is None and d2.nbytes == 2 * 9 * 5 * 2    # a copy of two frames
    assert not np.shares_memory(d0, d1) and not np.shares_memory(d0, d2)
