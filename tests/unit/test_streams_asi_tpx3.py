"""The ASI TPX3 wire format and receiver without MPI: the bytes of ``libertem_asi_tpx3``'s own
encoder, every bound checked before allocation, CSR densified as scipy does, and a receiver
fed over real TCP by our simulator and by LiberTEM-live's ``TpxCameraSim``."""
from __future__ import annotations

import numpy as np
import pytest

from streams.errors import ProtocolError
from streams.protocols.asi_tpx3 import wire
from analyses.sparse import densify
from streams.protocols.asi_tpx3.receiver import Tpx3Receiver
from streams.protocols.asi_tpx3.simulator import Tpx3Simulator, sparse_scan


def _csr(n=12, pixels=512 * 512, seed=0):
    rng = np.random.default_rng(seed)
    ip = np.concatenate([[0], np.cumsum(rng.integers(0, 6, n))]).astype(np.uint32)
    return ip, rng.integers(0, pixels, ip[-1]).astype(np.uint32), \
        rng.integers(1, 9, ip[-1]).astype(np.uint32)


def test_our_encoder_writes_the_bytes_of_libertem_asi_tpx3():
    m = pytest.importorskip("libertem_asi_tpx3", reason="pip install 'mpistage[livepeers]'")
    ip, ix, v = _csr()
    assert wire.encode_scan((3, 4), (512, 512), ip, ix, v) == \
        bytes(m.make_sim_data((3, 4), ip, ix, v))


def test_headers_round_trip_and_hostile_ones_are_refused():
    a = wire.parse_header(wire.encode_acquisition_start((3, 5), (256, 128), 7))
    assert a == wire.AcquisitionStart(wire.VERSION, 0, (3, 5),
                                      np.dtype("<u4"), (256, 128), np.dtype("<u4"), 7)
    assert wire.parse_header(wire.encode_scan_end(3)) == wire.ScanEnd(3)
    for bad, why in [(b"\x09" + bytes(31), "tag 9"),
                     (wire.encode_acquisition_start((0, 5), (8, 8)), "no side may be 0"),
                     (b"\x02\x01" + bytes(30), "dtype code 1"),
                     (b"\x00\x07\x01" + bytes(29), "format 1"), (b"\x00" * 31, "31 bytes")]:
        with pytest.raises(ProtocolError, match=why) as e:
            wire.parse_header(bad)
        assert e.value.reason == "malformed_header"


def test_chunk_sizes_are_checked_before_the_payload_is_taken():
    acq = wire.parse_header(wire.encode_acquisition_start((2, 2), (64, 64)))
    ok = wire.parse_header(wire.encode_chunk(*_csr(4, 64 * 64))[:32])
    wire.chunk_layout(ok, acq, 4, 1 << 20)
    for c, left, bound, reason in [
            (ok, 3, 1 << 20, "out_of_range"),                       # past the scan's end
            (ok, 4, 16, "too_large"),                               # over the bound
            (wire.ArrayChunk(np.dtype("<u4"), 4, 1 << 30, 20, 20), 4, 1 << 40,
             "malformed_header"),                                   # offsets that lie
            (wire.ArrayChunk(np.dtype("<u4"), 0, 0, 4, 4), 4, 1 << 20, "out_of_range")]:
        with pytest.raises(ProtocolError) as e:
            wire.chunk_layout(c, acq, left, bound)
        assert e.value.reason == reason, e.value.detail


def test_index_pointers_and_pixels_are_checked():
    acq = wire.parse_header(wire.encode_acquisition_start((1, 2), (8, 8)))
    for ip, ix in [([0, 2, 1], [1, 2]), ([1, 1, 2], [1, 2]), ([0, 1, 3], [1, 2]),
                   ([0, 1, 2], [1, 64])]:
        blob = wire.encode_chunk(np.array(ip), np.array(ix), np.array([1, 1], np.uint32))
        if ip[-1] != len(ix):   # an event count the pointers do not end at
            blob = blob[:6] + len(ix).to_bytes(4, "little") + blob[10:]
        c = wire.parse_header(blob[:32])
        with pytest.raises(ProtocolError, match="index pointers|pixel index") as e:
            wire.check_csr(c, acq, memoryview(blob[32:]))
        assert e.value.reason == "out_of_range"


def test_a_recorded_stream_reads_back_and_a_corrupt_one_names_file_byte_and_frame(tmp_path):
    """kernels.io.tpx3 (the format the receiver and the offline --tpx3 source share): a
    file of two acquisitions reads as its first, exact; pixel indices past the frame in
    its second chunk are an error naming the file, the chunk's byte offset and frame."""
    from kernels.errors import ReaderError
    from kernels.io.tpx3 import read_stream_file

    ip, ix, v = sparse_scan((3, 4), (32, 32), 20.0)
    path = tmp_path / "scan.tpx3"
    path.write_bytes(wire.encode_scan((3, 4), (32, 32), ip, ix, v, chunk_frames=5)
                     + wire.encode_scan((1, 1), (8, 8), *_csr(1, 64), sequence=2))
    acq, ip2, ix2, v2 = read_stream_file(str(path))
    assert acq.nav_shape == (3, 4) and acq.sig_shape == (32, 32)
    assert np.array_equal(ip2, ip) and np.array_equal(ix2, ix) and np.array_equal(v2, v)
    blob = bytearray(path.read_bytes())
    second = 64 + 32 + 6 * 4 + int(ip[5]) * 4 * 2      # the second chunk header's offset
    assert blob[second] == 2
    ix_at = second + 32 + 6 * 4                                        # its first index
    blob[ix_at:ix_at + 4] = (32 * 32).to_bytes(4, "little")
    path.write_bytes(bytes(blob))
    with pytest.raises(ReaderError, match=f"{path}: byte {second}, frame 5: .*pixel index"):
        read_stream_file(str(path))


@pytest.mark.parametrize("canonical", [True, False])
def test_densify_equals_scipy_duplicates_added(canonical):
    import scipy.sparse as sp

    ip, ix, v = _csr(20, 64, seed=3)
    if canonical:    # sorted, distinct within each frame
        m = sp.csr_matrix((v, ix, ip), shape=(20, 64))
        m.sum_duplicates()
        ip, ix, v = m.indptr, m.indices.astype(np.uint32), m.data.astype(np.uint32)
    out = np.zeros((20, 64), np.uint32)
    pos = densify(out, ip, ix, v)
    assert np.array_equal(out, sp.csr_matrix((v, ix, ip), shape=(20, 64)).toarray())
    out.reshape(-1)[pos] = 0      # what the receiver does to reuse its frames
    assert not out.any()


def _receive(port, scans=1, timeout=30.0, **kw):
    got = {}

    def deliver(p):
        for f, fr in zip(p.frames, p.data):
            got[(p.scan, int(f))] = fr.copy()

    r = Tpx3Receiver(deliver, "127.0.0.1", port, partition_frames=4, **kw)
    try:
        reps = r.serve(scans, timeout=timeout)
    finally:
        r.close()
    return r, reps, got


def test_receiver_over_tcp_from_our_simulator_in_chunks():
    import scipy.sparse as sp

    nav, sig = (3, 5), (32, 48)
    ip, ix, v = sparse_scan(nav, sig, 40)
    with Tpx3Simulator() as sim:
        sim.send(wire.encode_scan(nav, sig, ip, ix, v, chunk_frames=4))
        r, (rep,), got = _receive(sim.port, scan_shape=(-1, 5))
    d = rep.to_dict()
    assert rep.ended_by == "end" and d["frames_complete"] == 15
    assert d["geometry"]["scan_shape"] == [3, 5] and d["geometry"]["shape"] == list(sig)
    dense = sp.csr_matrix((v, ix, ip), shape=(15, 32 * 48)).toarray()
    for (_scan, f), fr in got.items():
        assert np.array_equal(fr.reshape(-1), dense[f])
    assert r.events == len(ix) and not r.assembler.rejected


def test_a_scan_shape_of_another_frame_count_refuses_the_scan():
    nav, sig = (2, 2), (8, 8)
    with Tpx3Simulator() as sim:
        sim.send(wire.encode_scan(nav, sig, *sparse_scan(nav, sig, 3)))
        sim.send(wire.encode_scan(nav, sig, *sparse_scan(nav, sig, 3)))
        r, reps, got = _receive(sim.port, scan_shape=(3, 3), timeout=3.0)
    assert reps == [] and not got
    # each refused scan's start (conflict), then its chunk and its end (no scan open)
    assert r.assembler.rejected["conflict"] == 2 and r.assembler.rejected["unknown_scan"] == 4
    assert any("nav shape is 2x2" in e for e in r.assembler.examples)


def test_receiver_from_libertem_lives_tpx_camera_sim():
    pytest.importorskip("libertem_live", reason="pip install 'mpistage[livepeers]'")
    from libertem_live.detectors.asi_tpx3.sim import TpxCameraSim

    sim = TpxCameraSim(cached="mem", port=0, sleep=0.2, mock_nav_shape=(4, 4))
    sim.start()
    sim.wait_for_listen()
    try:
        r, reps, got = _receive(sim.server_t.port, scans=2)
    finally:
        sim.stop()
    assert [x.ended_by for x in reps] == ["end", "end"] and len(got) == 32
    for (_scan, f), fr in got.items():   # its mock: frame i holds value i at pixel i
        flat = fr.reshape(-1)
        assert fr.shape == (512, 512) and flat[f] == f and flat.sum() == f


def test_acquisitions_announcing_huge_shapes_are_refused_before_allocation():
    """65535 x 65535 pixels a frame (16 GiB: past the geometry's 2 GiB a frame), then 2^32
    positions of 8192 x 8192 (its cost, accounting and two partitions, past --memory):
    each scan refused at its start, its chunk skipped unread; the scan after is served."""
    import resource

    nav, sig = (2, 2), (16, 16)
    chunk = wire.encode_chunk(*_csr(2, 16))
    huge = (wire.encode_acquisition_start((2, 2), (65535, 65535)) + wire.encode_scan_start()
            + chunk + wire.encode_acquisition_start((65535, 65535), (8192, 8192))
            + wire.encode_scan_start() + chunk)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Tpx3Simulator() as sim:
        sim.send(huge + wire.encode_scan(nav, sig, *sparse_scan(nav, sig, 5)))
        r, (rep,), got = _receive(sim.port, memory_bytes=64 << 20)
    assert r.assembler.rejected == {"malformed_header": 1, "too_large": 1, "unknown_scan": 2}
    assert any("over 2147483648 bytes" in e for e in r.assembler.examples)
    assert rep.to_dict()["frames_complete"] == 4 and len(got) == 4
    assert list(r.headers) == [rep.scan]          # nothing kept of the refused scans
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200 << 10   # KiB


def _csr_frames(k=6, shape=(16, 16), seed=4):
    from analyses.sparse import CSRFrames

    ip, ix, v = _csr(k, shape[0] * shape[1], seed)
    return CSRFrames(ip.astype(np.int64), ix, v, (k, *shape))


def test_csr_frames_stand_where_dense_frames_stand():
    import h5py
    import scipy.sparse as sp

    c = _csr_frames()
    dense = sp.csr_matrix((c.values, c.indices, c.indptr), shape=(6, 256)).toarray()
    assert np.array_equal(c.dense().reshape(6, -1), dense) and c.dense().dtype == np.uint32
    assert all(np.array_equal(c[i].reshape(-1), dense[i]) for i in range(-6, 6))
    assert len(c) == 6 and c.nbytes < dense.nbytes
    d = c.copy()
    d.values[0] += 1
    assert c.values[0] + 1 == d.values[0]          # a copy, not a view
    with h5py.File("spill", "w", driver="core", backing_store=False) as f:
        f.create_dataset("frames", data=c)          # what the spill writes: dense frames
        assert np.array_equal(f["frames"][()].reshape(6, -1), dense)
    with pytest.raises(IndexError):
        c[6]


def test_a_mask_or_index_array_picks_csr_frames_as_it_picks_dense_ones():
    """What the offline runner's ``--valid`` does to a partition of a TPX3 file."""
    c = _csr_frames()
    dense = c.dense()
    for pick in (np.array([True, False, True, True, False, True]), np.array([5, 0, 3]),
                 np.zeros(6, bool), np.array([], np.int64)):
        got = c[pick]
        assert isinstance(got, type(c)) and got.shape == dense[pick].shape
        assert np.array_equal(got.dense(), dense[pick]) and got.indptr[-1] == len(got.values)
    with pytest.raises(IndexError):
        c[np.ones(5, bool)]


def test_sparse_analyses_on_csr_equal_themselves_on_dense_frames():
    from analyses.contract import FrameSum
    from analyses.sparse import frames_for
    from stem4d.analysis import Stem4D

    c = _csr_frames()
    pos, ok = np.arange(6), np.ones(6, bool)
    masks = [{"name": "d", "r": 4}, {"name": "ring", "ri": 3, "ro": 7, "cx": 6.5}]
    for a in (FrameSum(), Stem4D(mode="virtual", masks=masks)):
        assert a.sparse and frames_for(a, c) is c
        got, want = a.process_partition(c, pos, ok), a.process_partition(c.dense(), pos, ok)
        for k in want.chunks[0].columns:
            assert np.array_equal(got.chunks[0].columns[k], want.chunks[0].columns[k]), k
    counting = Stem4D(mode="both")
    assert not counting.sparse and np.array_equal(frames_for(counting, c), c.dense())


def test_sparse_assembler_accounts_as_the_dense_one():
    """Duplicates by digest, a conflicting copy, a missing frame an empty CSR row."""
    from streams.protocol import Begin, Data, End, ScanGeometry
    from streams.protocols.asi_tpx3.partitions import SparseAssembler

    parts = []
    a = SparseAssembler(parts.append, routing="any", partition_frames=3)
    g = ScanGeometry("s", 1, 5, 1, (4, 4), "<u4", (1, 5))
    a.begin(Begin(0, g))
    row = lambda i: (np.array([i, 9], np.uint32), np.array([1, i + 1], np.uint32))  # noqa: E731
    for f in (0, 1, 2, 4):
        a.data(Data("s", f, 0, 0, 4, "csr"), row(f))
    a.data(Data("s", 1, 0, 0, 4, "csr"), row(1))                      # duplicate
    a.data(Data("s", 1, 0, 0, 4, "csr"), row(3))                      # conflicting
    a.data(Data("s", 3, 0, 0, 4, "raw"), b"\0" * 64)                  # not CSR
    assert a.peak_bytes == 3 * 16
    a.end(End("s", 0, None))
    assert [len(p.data) for p in parts] == [3, 1] and a.held_bytes == 0
    assert a.rejected == {"duplicate": 1, "conflicting_duplicate": 1, "unknown_encoding": 1}
    p0 = parts[0]
    assert list(p0.frames) == [0, 1, 2] and np.array_equal(p0.data[2].reshape(-1)[[2, 9]],
                                                           [1, 3])
    (rep,) = a.closed.values()
    assert rep.to_dict()["frames_missing"] == 1 and rep.to_dict()["frames_complete"] == 4


def test_a_viewer_picks_a_dense_frame_from_a_kept_sparse_partition():
    from streams.job.frames import MAX_FRAME_BYTES, FrameStore, lookup

    c = _csr_frames()
    store = FrameStore()
    store.keep("s", np.arange(10, 16), np.ones(6, bool), c)
    assert store.memory_bytes == c.nbytes          # kept as CSR
    got = lookup(store, "s", 13, MAX_FRAME_BYTES)
    assert got["where"] == "memory" and np.array_equal(got["frame"], c.dense()[3])
    assert lookup(store, "s", 16, MAX_FRAME_BYTES) is None


def test_a_chunk_at_once_is_the_same_as_its_frames_one_by_one():
    """``SparseAssembler.chunk`` (the receiver's one call per chunk) against ``data`` per
    frame: the same partitions (split inside chunks), digests, reports and rejections,
    with a chunk past the scan's end and a chunk sent twice among them."""
    from streams.protocol import Begin, Data, End, ScanGeometry
    from streams.protocols.asi_tpx3.partitions import SparseAssembler
    from streams.protocols.asi_tpx3.simulator import sparse_scan

    ip, ix, v = sparse_scan((3, 7), (16, 16), 20.0, seed=1)
    g = ScanGeometry("s", 1, 21, 1, (16, 16), "<u4", (3, 7))
    chunks = [(0, 5), (5, 13), (13, 14), (5, 7), (14, 21), (19, 23)]   # [f0, f1)
    got = []
    for whole in (True, False):
        parts = []
        a = SparseAssembler(parts.append, routing="any", partition_frames=4,
                            clock=lambda: 0.0)
        a._seed = 7                 # the digests' seed is random per assembler
        a.begin(Begin(0, g))
        for f0, f1 in chunks:
            p = ip[f0:f1 + 1].astype(np.int64) - int(ip[f0])
            sl = slice(int(ip[f0]), int(ip[min(f1, 21)]))
            p = p if f1 <= 21 else np.concatenate([p, np.full(f1 - 21, p[-1])])
            if whole:
                a.chunk("s", f0, p, ix[sl], v[sl], where="s")
            else:
                for i in range(f1 - f0):
                    a.data(Data("s", f0 + i, 0, 0, 16, "csr"),
                           (ix[sl][p[i]:p[i + 1]], v[sl][p[i]:p[i + 1]]),
                           where=f"s frame {f0 + i}")
        digests = a.scans["s"].digests.copy()
        a.end(End("s", 0, None))
        (rep,) = a.closed.values()
        got.append((parts, digests, rep.to_dict(), dict(a.rejected), a.peak_bytes,
                    a.held_bytes))
    (pa, da, ra, xa, ka, ha), (pb, db, rb, xb, kb, hb) = got
    assert xa == xb == {"duplicate": 4, "out_of_range": 2}
    assert np.array_equal(da, db) and ra == rb and ha == hb == 0 and ka == kb
    assert [list(p.frames) for p in pa] == [list(p.frames) for p in pb] == \
        [list(range(s, min(s + 4, 21))) for s in range(0, 21, 4)]
    for p, q in zip(pa, pb):
        assert np.array_equal(p.complete, q.complete)
        for k in ("indptr", "indices", "values"):
            assert np.array_equal(getattr(p.data, k), getattr(q.data, k)), k
    assert np.array_equal(np.concatenate([p.data.dense() for p in pa]).reshape(21, -1),
                          np.concatenate([p.data.dense() for p in pb]).reshape(21, -1))
