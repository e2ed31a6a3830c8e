"""A receiver's frames kept for viewers, and rank 0's admission of their requests."""
from __future__ import annotations

import os

import msgpack
import numpy as np
import pytest

from streams.job.frames import FrameRequests, FrameStore, lookup, parse_request


def _part(first, k=2, shape=(3, 4)):
    frames = np.arange(first, first + k)
    data = np.stack([np.full(shape, f, np.uint16) for f in frames])
    return frames, np.ones(k, bool), data


def _spilled(path, frames, complete, data):
    import h5py

    with h5py.File(path, "w") as f:
        f["frames"], f["frame_index"], f["complete"] = data, frames, complete
    os.chmod(path, 0o600)
    return str(path)


def test_memory_keeps_the_latest_partitions_within_its_bytes_then_the_spill(tmp_path):
    store = FrameStore(keep_bytes=2 * 2 * 3 * 4 * 2)      # two partitions of 2 frames
    for first in (0, 2, 4):
        fr, c, d = _part(first)
        store.keep("s", fr, c, d)
        store.spill("s", fr, c, _spilled(tmp_path / f"p{first}.h5", fr, c, d))
    assert store.memory_bytes <= store.keep_bytes
    a, complete, where = store.get("s", 5)
    assert where == "memory" and complete and (a == 5).all()
    a, _, where = store.get("s", 1)                 # evicted from memory: read back
    assert where == "spill" and (a == 1).all() and a.shape == (3, 4)
    assert store.get("s", 6) is None and store.get("t", 1) is None


def test_a_spilled_file_others_could_change_is_not_read(tmp_path):
    store = FrameStore(keep_bytes=0)
    fr, c, d = _part(0)
    p = _spilled(tmp_path / "p.h5", fr, c, d)
    store.spill("s", fr, c, p)
    os.chmod(p, 0o644)
    assert lookup(store, "s", 0, 1 << 20)["refused"] == "not_held"
    os.chmod(p, 0o600)
    assert (lookup(store, "s", 0, 1 << 20)["frame"] == 0).all()
    assert lookup(store, "s", 0, 8)["refused"] == "too_large"      # over the byte cap


def test_requests_are_capped_per_second_and_decided_by_the_first_holder():
    fr = FrameRequests(rate=3.0)
    admitted = [fr.admit(b"v", "s", 1, i, [0, 2], now=100.0) for i in range(5)]
    assert [r for _, r in admitted] == [None, None, None, "rate", "rate"]
    assert fr.counts["rate"] == 2
    assert fr.admit(b"v", "s", 1, 9, [0, 2], now=100.4)[1] is None    # refilled at 3/s
    n = admitted[0][0]
    assert fr.answer(n, 0, None) is None            # receiver 2 has not said yet
    p, found = fr.answer(n, 2, {"frame": 1})
    assert p.rid == 0 and found == {"frame": 1}
    n2 = admitted[1][0]
    assert fr.answer(n2, 2, {"frame": 2})[1] == {"frame": 2}    # the first holder decides
    assert fr.answer(n2, 0, None) is None
    assert [p.rid for p in fr.expired(200.0)] == [2, 9] and fr.counts["timeout"] == 2


@pytest.mark.parametrize("req", [b"\xc1", msgpack.packb([1]), msgpack.packb({"scan": "s"}),
                                 msgpack.packb({"scan": "s", "frame": -1}),
                                 msgpack.packb({"scan": "s", "frame": True}),
                                 msgpack.packb({"scan": "", "frame": 1})])
def test_a_malformed_request_is_refused_with_its_reason(req):
    with pytest.raises(ValueError):
        parse_request(req)


def test_a_request_parses():
    assert parse_request(msgpack.packb({"scan": "s1", "frame": 7, "id": 3})) == ("s1", 7, 3)
