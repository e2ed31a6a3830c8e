"""stem4d's analysis against NumPy references, its output layout, and the pure roles of a job."""
from __future__ import annotations

import numpy as np
import pytest

from streams.protocol import ScanGeometry
from core.mpi.tree import tree_schedule
from streams.job.roles import assign_roles, partition_frames

pytest.importorskip("numba")
h5py = pytest.importorskip("h5py")


def _geometry(frames=6, shape=(32, 32), scan_shape=(2, 3)):
    return ScanGeometry("t", 1, frames, 1, shape, "<u2", scan_shape)


def _frames(shape=(32, 32), k=6):
    """Dark 20, isolated electrons of 100 counts at known pixels, one X-ray hit of 5000."""
    f = np.full((k, *shape), 20, np.uint16)
    hits = {0: [(3, 4), (10, 20)], 1: [], 2: [(16, 16)], 3: [(5, 5), (5, 9), (20, 3)],
            4: [(30, 30)], 5: [(8, 8)]}
    for i, pts in hits.items():
        for r, c in pts:
            f[i, r, c] = 120
    f[5, 25, 25] = 5000          # above the X-ray threshold: not an electron
    return f, hits


def test_sums_virtual_detectors_and_electrons_match_references():
    from stem4d.analysis import Stem4D

    a = Stem4D()
    g = _geometry()
    a.prepare(g)
    frames, hits = _frames()
    p = a.process_partition(frames, np.arange(6), np.ones(6, bool))
    img = a.images(p, g)
    assert np.array_equal(img["sum_image"].ravel(), frames.reshape(6, -1).sum(1))
    # the masks now follow LiberTEM's convention (r <= R, centre (cx, cy) in x, y order)
    d = {m.name: m for m in a.masks((32, 32))}
    yy, xx = np.indices((32, 32))
    r = np.hypot(xx - 15.5, yy - 15.5)          # default centre: the frame centre
    bf = r <= d["bright_field"].attrs["r"]
    adf = (r > d["annular_dark_field"].attrs["ri"]) & (r <= d["annular_dark_field"].attrs["ro"])
    assert np.array_equal(d["bright_field"].weights.astype(bool), bf)
    assert np.array_equal(d["annular_dark_field"].weights.astype(bool), adf)
    assert bf.any() and adf.any() and not (bf & adf).any()
    assert np.allclose(img["virtual/bright_field"].ravel(),
                       [fr[bf].sum() for fr in frames.astype(float)])
    assert np.allclose(img["virtual/annular_dark_field"].ravel(),
                       [fr[adf].sum() for fr in frames.astype(float)])
    assert list(img["electron_counts"].ravel()) == [len(hits[i]) for i in range(6)]


def test_merge_order_does_not_change_the_images_and_events_round_trip(tmp_path):
    from stem4d.analysis import Stem4D
    from stem4d.layout import read_events

    a = Stem4D()
    g = _geometry()
    a.prepare(g)
    frames, hits = _frames()
    p1 = a.process_partition(frames[3:], np.arange(3, 6), np.ones(3, bool))
    p0 = a.process_partition(frames[:2], np.arange(2), np.ones(2, bool))   # frame 2 missing
    i01, i10 = a.images(p0.merge(p1), g), a.images(p1.merge(p0), g)
    for name in i01:
        assert np.array_equal(i01[name], i10[name]), name
    assert i01["sum_image"].ravel()[2] == 0
    with h5py.File(tmp_path / "t.h5", "w") as f:
        a.write(f, p0.merge(p1).compact(), g)
    events, scan_shape, frame_shape = read_events(str(tmp_path / "t.h5"))
    assert scan_shape == (2, 3) and frame_shape == (32, 32)
    for i in range(6):
        want = [] if i == 2 else sorted(r * 32 + c for r, c in hits[i])
        assert list(events[i]) == want, i


def test_roles_one_receiver_per_node_and_workers_of_the_same_node():
    r = assign_roles([0, 0, 1, 1])
    assert r.servers == (0, 2) and [r.workers_of(s) for s in r.servers] == [(1,), (3,)]
    assert [r.index(k) for k in range(4)] == [0, None, 1, None]
    assert [r.role(k) for k in range(4)] == ["server", "worker"] * 2   # no root
    r2 = assign_roles([0, 0, 0, 1, 1, 1], receivers_per_node=2)
    assert r2.servers == (0, 1, 3, 4)
    assert [r2.workers_of(s) for s in r2.servers] == [(2,), (), (5,), ()]
    lone = assign_roles([0, 1])                    # no spare rank: the receiver analyses
    assert lone.workers == () and lone.servers == (0, 1)
    with pytest.raises(ValueError, match="node 1 has only 1 rank"):
        assign_roles([0, 0, 1], receivers_per_node=2)


def test_merge_tree_and_partition_size():
    assert tree_schedule(1) == []
    assert tree_schedule(5) == [[(0, 1), (2, 3)], [(0, 2)], [(0, 4)]]
    for n in range(1, 12):   # every position merged into 0 exactly once
        srcs = [s for rnd in tree_schedule(n) for _, s in rnd]
        assert sorted(srcs) == list(range(1, n))
    fb = 576 * 576 * 2
    assert partition_frames(fb) == (16 << 20) // fb
    assert partition_frames(fb, 8, rate=87_000) == int(87_000 * 0.1 / 8)
    assert partition_frames(fb, 2, rate=87_000, frames=6400) == 100     # 32 partials each
    assert partition_frames(fb, 2, frames=256) == 4     # the tour's scan: tens of partials
    assert partition_frames(fb, 2, rate=87_000, frames=10) == 1
    assert partition_frames(10**9) == 1
