"""The native protocol over real ZeroMQ sockets on 127.0.0.1 (no mocks).

Receivers run in threads of this process, producers in others; every port is
picked by the OS (``tcp://127.0.0.1:*``) and read back from the socket.
"""
import functools
import threading
import time

import numpy as np
import pytest

from streams import (Receiver, ScanGeometry, ScanReport, SimulatedScan, run_producers,
                           wait_for_rendezvous, write_rendezvous)
from streams.simulate import malformed_messages

pytestmark = pytest.mark.timeout(120)


class Sink:
    """Keeps a copy of every delivered frame; optionally slow."""

    def __init__(self, delay=0.0):
        self.frames, self.complete, self.delay = {}, {}, delay
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self, part):
        if self.delay:
            time.sleep(self.delay)
        with self.lock:
            for f, img, ok in zip(part.frames, part.data, part.complete):
                assert int(f) not in self.frames, f"frame {f} delivered twice"
                self.frames[int(f)] = img.copy()
                self.complete[int(f)] = bool(ok)
            self.count += len(part.frames)


def serve_scan(scan, receivers=2, producer_options=None, rendezvous=None, sink=None,
               **receiver_options):
    """Receivers in threads, producers in threads; returns (merged report, reports, sink,
    producer results)."""
    sink = sink or Sink()
    rxs = [Receiver(sink, index=i, count=receivers, **receiver_options)
           for i in range(receivers)]
    reports = [None] * receivers
    threads = [threading.Thread(target=lambda i=i: reports.__setitem__(
        i, rxs[i].serve(1, timeout=90))) for i in range(receivers)]
    eps = [rx.bind() for rx in rxs]
    for t in threads:
        t.start()
    if rendezvous is not None:
        write_rendezvous(rendezvous, eps)
        eps = list(wait_for_rendezvous(rendezvous, timeout=10).receivers)
    results = run_producers(scan, eps, **(producer_options or {}))
    for t in threads:
        t.join(100)
    for rx in rxs:
        rx.close()
    reps = [r[0] for r in reports]
    return functools.reduce(ScanReport.merge, reps), reps, sink, results


def geometry(name="scan-a", P=4, S=4, grid=(4, 6), shape=(64, 48), dtype="<u2"):
    return ScanGeometry(name, P, grid[0] * grid[1], S, shape, dtype, grid)


@pytest.mark.parametrize("encoding", ["raw", "lz4", "bslz4"])
def test_4_producers_4_sectors_assemble_exactly_the_frames_sent(tmp_path, encoding):
    scan = SimulatedScan(geometry(), encoding=encoding)
    merged, reps, sink, results = serve_scan(scan, partition_frames=3,
                                             rendezvous=tmp_path / "rv.json")
    assert merged.ok and merged.ended_by == "end" and merged.lost_in_transport == 0
    assert merged.accepted == 24 * 4 and not merged.rejected and not merged.rejected_unattributed
    assert sorted(sink.frames) == list(range(24))
    for f in range(24):
        assert np.array_equal(sink.frames[f], scan.frame(f)), f
    # each receiver got exactly its frames (f mod 2), every producer's begin and end
    for r, rep in enumerate(reps):
        assert rep.complete_frames.tolist() == list(range(r, 24, 2))
        assert rep.ends_received == rep.ends_expected == 4
    assert sum(sum(x["sent"]) for x in results) == 96


def test_withheld_frames_and_a_dropped_sector_are_reported_exactly():
    scan = SimulatedScan(geometry(), withhold=frozenset({3, 10, 17}),
                         drop=frozenset({(5, 2)}))
    merged, reps, sink, _ = serve_scan(scan)
    assert not merged.ok and merged.ended_by == "end"
    assert merged.missing_frames.tolist() == [3, 10, 17]
    assert merged.incomplete == {5: [2]}
    assert merged.complete_frames.size == 20 and merged.lost_in_transport == 0
    assert reps[1].missing_frames.tolist() == [3, 17] and reps[1].incomplete == {5: [2]}
    assert reps[0].missing_frames.tolist() == [10] and reps[0].incomplete == {}
    r0, r1 = scan.geometry.sector_rows(2)
    img = scan.frame(5)
    assert not sink.complete[5] and (sink.frames[5][r0:r1] == 0).all()
    assert np.array_equal(sink.frames[5][:r0], img[:r0])
    assert 3 not in sink.frames          # nothing of it arrived: no partition held it
    d = merged.to_dict()
    assert d["missing"] == [[3, 4], [10, 11], [17, 18]] and d["incomplete"] == {"5": [2]}
    assert not merged.frames_complete[0, 3] and merged.frames_complete.sum() == 20


def test_malformed_messages_are_counted_by_reason_and_the_receiver_keeps_going():
    g = geometry(P=2, S=2)
    catalog = malformed_messages(g.scan, g)
    scan = SimulatedScan(g, encoding="lz4", inject=tuple(catalog))
    merged, (rep,), sink, _ = serve_scan(scan, receivers=1)
    expected = {}
    for _, reason, _ in catalog.values():
        expected[reason] = expected.get(reason, 0) + 1
    got = dict(rep.rejected + rep.rejected_unattributed)
    assert got == expected
    assert dict(rep.rejected_unattributed) == {"malformed_header": 3, "unknown_scan": 1}
    assert rep.ok and rep.lost_in_transport == 0 and rep.complete_frames.size == 24
    assert np.array_equal(sink.frames[0], scan.frame(0))   # frame 0 survived the attacks
    assert len(rep.examples) == 8 and all(":" in e for e in rep.examples)
    assert sum(e.startswith("(no scan of its own) ") for e in rep.examples) == 4


def test_slow_consumer_blocks_producers_at_the_hwm_and_nothing_is_lost():
    g = geometry(P=2, S=2, grid=(10, 20), shape=(128, 128))    # 200 frames, 32 KiB sectors
    scan = SimulatedScan(g)
    sink = Sink(delay=0.004)                                     # ~0.8 s of consuming
    hwm, buf = 4, 32 << 10
    finished = {}

    def watch():
        # the moment the producers have handed over their last message
        threads, results, errors = run_producers(scan, [rx.bind() for rx in rxs], wait=False,
                                                 sndhwm=hwm, sndbuf=buf)
        for t in threads:
            t.join()
        finished["delivered"] = sink.count
        finished["results"] = results
        print("delivered when producers finished:", sink.count, "blocked:",
              [round(r["blocked_s"], 2) for r in results])

    rxs = [Receiver(sink, rcvhwm=hwm, rcvbuf=buf)]
    out = []
    t_rx = threading.Thread(target=lambda: out.extend(rxs[0].serve(1, timeout=90)))
    t_rx.start()
    watch()
    t_rx.join(100)
    rxs[0].close()
    (rep,) = out
    assert rep.ok and rep.accepted == 400 and rep.lost_in_transport == 0 and not rep.rejected
    assert sink.count == 200 and all(np.array_equal(sink.frames[f], scan.frame(f))
                                     for f in (0, 57, 199))
    # When the producers were done, at most what the queues and socket buffers hold
    # (per producer: SNDHWM + RCVHWM messages + 2 kernel buffers of <= 2*32 KiB) was
    # still undelivered: they had been blocked, not dropping.
    in_flight_frames = g.producers * (2 * hwm + 2 * 2 * buf // (32 << 10)) // g.sectors
    assert finished["delivered"] >= 200 - in_flight_frames - 8, finished["delivered"]
    assert sum(r["blocked_s"] for r in finished["results"]) > 0.3


def test_a_scan_whose_end_never_arrives_closes_after_the_timeout_with_the_same_report():
    g = geometry(P=4, S=4)
    ended, _, _, _ = serve_scan(SimulatedScan(g, withhold=frozenset({7})), idle_timeout=1.0)
    t0 = time.monotonic()
    silent, reps, _, _ = serve_scan(SimulatedScan(g, withhold=frozenset({7}),
                                                  no_end=frozenset({2})), idle_timeout=1.0)
    assert time.monotonic() - t0 >= 1.0
    assert silent.ended_by == "timeout" and ended.ended_by == "end"
    assert all(r.ends_received == 3 and r.lost_in_transport is None for r in reps)
    a, b = ended.to_dict(), silent.to_dict()
    for d in (a, b):
        for k in ("ended_by", "messages", "seconds", "ok", "buffer_bytes"):
            d.pop(k)
    assert a == b and b["missing"] == [[7, 8]] and b["frames_complete"] == 23
