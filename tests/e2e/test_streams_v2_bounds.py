"""Stream V2 bounded and total, end to end: ``mpirun -n 2`` (two clients of one detector,
one per emulated node), real ZeroMQ sockets, the simulator as the detector.

A hostile or broken message is a counted rejection and the legitimate series beside it
is exact (every frame, ``sum_image`` equal to what was sent): an integer over 64 bits
(a CBOR bignum), a start naming a channel twice, LZ4 bombs in ``user_data``. A burst of
images right behind the start, dealt round-robin, loses nothing on a loaded machine:
the client that did not get the start holds them until the other one shares it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("mpirun") is None,
                                 reason="mpirun is not installed")]

SHAPE = (32, 32)


def _frame(i, shape=SHAPE):
    return (np.arange(shape[0] * shape[1]).reshape(shape) % 11 + i).astype("<u2")


def _job(tmp_path, sim, *args):
    """Two clients (-n 2, one per emulated node), connected before the first message."""
    job = Job(tmp_path, "--stream2", sim.endpoint, "--v2-grace", "1", "--partition-frames",
              "8", *args, np_=2, nodes=2)
    job.started()
    time.sleep(1.5)     # both clients connected: the detector deals to connected peers
    return job


def _send_legit(sim, sid=1, uid="ok", n=32):
    sim.send_series(sid, _frame, n, SHAPE, scan_shape=(4, n // 4), series_unique_id=uid)
    return f"series-{sid}-{uid}"


def _exact(job, scan, n=32, frame=_frame):
    rep = job.report(scan)
    assert rep["ok"] and rep["frames_complete"] == n and rep["ended_by"] == "end", rep
    with h5py.File(job.out / f"{scan}.h5") as f:
        sums = f["sum_image"][()].ravel()
    assert np.array_equal(sums, [frame(i).astype(np.float64).sum() for i in range(n)])
    return rep


def _rejections(job):
    return json.loads((job.out / "rejections.json").read_text())


def _cbor(m):
    import cbor2

    from streams.protocols.stream2.streamv2 import SELF_DESCRIBE

    return cbor2.dumps(cbor2.CBORTag(SELF_DESCRIBE, m))


def test_integers_over_64_bits_are_counted_rejections_and_the_series_is_exact(tmp_path):
    """series_id as a 5,000-digit CBOR bignum (start, image, end), a negative one, an
    image_id and a user_data integer one past 2**64: each a malformed_header that names
    the field; the job goes on and serves the real series."""
    import cbor2

    from streams.protocols.stream2.simulator import StreamV2Simulator
    from streams.protocols.stream2.streamv2 import encode_image, encode_start

    huge = 10 ** 5000
    start = dict(cbor2.loads(encode_start(1, "x", 4, SHAPE)))
    image = dict(cbor2.loads(encode_image(1, "x", 0, {"threshold_1": _frame(0)})))
    bad = [_cbor({**start, "series_id": huge}), _cbor({**image, "series_id": huge}),
           _cbor({"type": "end", "series_id": huge, "series_unique_id": "x"}),
           _cbor({"type": "end", "series_id": -huge, "series_unique_id": "x"}),
           _cbor({**image, "image_id": 1 << 64}),
           _cbor({**start, "series_id": 2, "user_data": {"n": [1, 1 << 64]}})]
    assert len(bad[0]) > 2000       # a real bignum on the wire
    with StreamV2Simulator(send_timeout=30) as sim:
        job = _job(tmp_path, sim)
        for m in bad:
            sim.send(m)
        scan = _send_legit(sim)
        rc, out, err = job.wait()
    assert rc == 0, out + err
    _exact(job, scan)
    rej = _rejections(job)
    assert rej["by_reason"] == {"malformed_header": len(bad)}, rej
    text = " | ".join(rej["examples"])
    assert "series_id must be an unsigned integer of 64 bits, not an integer of 16610 bits" \
        in text, text
    assert "image_id must be an unsigned integer of 64 bits, not 18446744073709551616" in text, text
    assert "field user_data.n[1]: 18446744073709551616 does not fit 64 bits" in text, text
    # the job told nothing else went wrong: its last line counts them
    assert f"job: {len(bad)} messages rejected (malformed_header {len(bad)}" in out, out


def test_a_start_naming_a_channel_twice_never_starts_its_series(tmp_path):
    """A start whose channels are [threshold_1, threshold_1] is malformed (counted, the
    series not started; its images are held, then reported as a series that never
    started); the real series after it is served, exit 0, its files written."""
    from streams.protocols.stream2.simulator import StreamV2Simulator

    with StreamV2Simulator(send_timeout=30, sndhwm=1000) as sim:
        job = _job(tmp_path, sim)
        sim.send_series(7, _frame, 16, SHAPE, channels=("threshold_1", "threshold_1"),
                        series_unique_id="twice")
        scan = _send_legit(sim)
        rc, out, err = job.wait()
    assert rc == 0, out + err
    assert not (job.out / "series-7-twice.h5").exists()
    _exact(job, scan)
    rej = _rejections(job)
    assert rej["by_reason"]["malformed_header"] == 1, rej
    assert any("channel 'threshold_1' is named twice in channels" in e
               for e in rej["examples"]), rej
    assert rej["series_never_started"] == {"series-7-twice": {"images": 16, "ends": 1}}, rej


def test_lz4_bombs_in_user_data_are_refused_before_decompression(tmp_path):
    """Four images whose user_data is a typed array of 256 MiB as an LZ4 bomb (each
    message about 1 MB), sent before their series' start, then the real series: each
    bomb is refused (too_large) from its declared size, over the 64 MiB an image's
    user-data arrays may take (the hold: a quarter of the default --memory), nothing
    of it decompressed; every rank stays far below what four decoded bombs take."""
    import cbor2

    from streams.codecs import lz4_encode
    from streams.protocols.stream2.simulator import StreamV2Simulator
    from streams.protocols.stream2.streamv2 import COMPRESSION, encode_image

    bomb = cbor2.CBORTag(64, cbor2.CBORTag(COMPRESSION, ["lz4", 0, lz4_encode(
        np.zeros(256 << 20, np.uint8), 0)]))
    image = dict(cbor2.loads(encode_image(5, "bomb", 0, {"threshold_1": _frame(0)})))
    msgs = [_cbor({**image, "image_id": i, "user_data": bomb}) for i in range(4)]
    assert len(msgs[0]) < 2 << 20
    with StreamV2Simulator(send_timeout=30) as sim:
        job = _job(tmp_path, sim)
        for m in msgs:
            sim.send(m)
        scan = _send_legit(sim)
        rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = _exact(job, scan)
    rej = _rejections(job)
    assert rej["by_reason"] == {"too_large": 4}, rej
    assert any("typed arrays of this message decode to 256 MiB or more, over the bound of "
               "64 MiB for the arrays of an image's fields" in e for e in rej["examples"]), rej
    # one decoded bomb alone is 256 MiB; four held were about 1 GiB
    assert max(rep["memory"]["peak_rss_mib"]) < 200, rep["memory"]


def _burst_messages(sid, uid, n, shape):
    """A series of ``n`` images of ``shape`` as a detector sends it, encoded once (7
    distinct bslz4 payloads), and the sum of each frame."""
    import cbor2

    from streams.codecs import bslz4_encode
    from streams.protocols.stream2.streamv2 import (COMPRESSION, MULTI_DIM, encode_end,
                                                    encode_start)

    rng = np.random.default_rng(sid)
    base = rng.poisson(3, shape).astype("<u2")
    kinds = [(base + k).astype("<u2") for k in range(7)]
    data = [cbor2.CBORTag(MULTI_DIM, [list(shape), cbor2.CBORTag(69, cbor2.CBORTag(
        COMPRESSION, ["bslz4", 2, bslz4_encode(a)]))]) for a in kinds]
    msgs = [encode_start(sid, uid, n, shape, user_data={"scan_shape": [1, n]})]
    msgs += [_cbor({"type": "image", "series_id": sid, "series_unique_id": uid,
                    "image_id": i, "real_time": [1, 1000],
                    "data": {"threshold_1": data[i % 7]}}) for i in range(n)]
    msgs.append(encode_end(sid, uid))
    sums = np.array([float(kinds[i % 7].astype(np.float64).sum()) for i in range(n)])
    return msgs, sums


@pytest.mark.slow
def test_a_burst_right_behind_the_start_loses_nothing_on_a_loaded_machine(tmp_path):
    """2,000 images of 256 x 256 right behind the start (no arm delay), dealt
    round-robin over 2 clients, 5 series in a row, with a CPU burner beside the job:
    every frame of every series arrives (the client without the start holds its
    images, and stops reading when its hold is full, until the other shares it)."""
    from streams.protocols.stream2.simulator import StreamV2Simulator

    n, runs = 2000, 5
    series = [_burst_messages(10 + r, f"burst{r}", n, (256, 256)) for r in range(runs)]
    # two spinning processes per core (a receiver that drops frames under load drops
    # them in about half of the 5-series runs with one per core; with two, in each run)
    spin = "yes > /dev/null & " * (2 * (os.cpu_count() or 2))
    burner = subprocess.Popen(["sh", "-c", spin + "wait"], start_new_session=True)
    try:
        with StreamV2Simulator(send_timeout=60, sndhwm=1000) as sim:
            job = _job(tmp_path, sim, "--scans", str(runs), "--partition-frames", "100",
                       "--idle-timeout", "60")
            for r, (msgs, _) in enumerate(series):
                for m in msgs:          # as fast as the sockets take them
                    sim.send(m)
                report = job.out / f"series-{10 + r}-burst{r}.json"
                end = time.monotonic() + 120
                while not report.exists() and job.p.poll() is None and time.monotonic() < end:
                    time.sleep(0.1)
            rc, out, err = job.wait(timeout=180)
    finally:
        os.killpg(burner.pid, signal.SIGTERM)
        burner.wait()
    assert rc == 0, out + err
    for r, (_, sums) in enumerate(series):
        scan = f"series-{10 + r}-burst{r}"
        rep = job.report(scan)
        assert rep["frames_complete"] == n and rep["ok"], (scan, rep["messages"])
        with h5py.File(job.out / f"{scan}.h5") as f:
            assert np.array_equal(f["sum_image"][()].ravel(), sums), scan
    assert not _rejections(job)["rejected"], _rejections(job)


def test_a_hold_smaller_than_the_burst_waits_for_the_shared_start(tmp_path):
    """--v2-hold-memory 0.05 (50 KiB, one or two images of 256 x 256): the client that
    did not get the start fills its hold at once and stops reading until the other
    shares the start; the detector deals the rest to the other meanwhile. Every frame
    arrives, nothing is rejected."""
    from streams.protocols.stream2.simulator import StreamV2Simulator

    n = 400
    msgs, sums = _burst_messages(20, "hold", n, (256, 256))
    assert len(msgs[1]) > 25 << 10
    with StreamV2Simulator(send_timeout=60, sndhwm=1000) as sim:
        job = _job(tmp_path, sim, "--v2-hold-memory", "0.05", "--partition-frames", "50")
        for m in msgs:
            sim.send(m)
        rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("series-20-hold")
    assert rep["frames_complete"] == n and rep["ok"], rep["messages"]
    with h5py.File(job.out / "series-20-hold.h5") as f:
        assert np.array_equal(f["sum_image"][()].ravel(), sums)
    assert not _rejections(job)["rejected"], _rejections(job)
