"""The Python handle on a running job (:mod:`streams.view.client`) against a real
``mpirun -n 4`` receiving job (2 emulated nodes) fed by the simulator over CURVE,
attached with the viewers' certificate."""
from __future__ import annotations

import threading
import time

import h5py
import numpy as np
import pytest

from tests.e2e.test_streams_receive import _env, _scan

pytestmark = pytest.mark.timeout(300)


def _launch(tmp_path, *args):
    from streams.view import launch

    return launch(str(tmp_path / "rv.json"), str(tmp_path / "out"),
                  ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
                   str(tmp_path / "local" / "%n"), "--live-interval", "0.2", *args],
                  env=_env())


def test_partials_grow_to_the_final_result_the_job_wrote(tmp_path):
    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers

    job = _launch(tmp_path, "--analysis", "stem4d.flow", "--partition-frames", "2")
    try:
        rv = read_rendezvous(job.rendezvous)
        job.wait_connected()          # a subscriber misses what goes out before
        scan = _scan(scan_shape=(8, 8), rate=12.0)          # ~5 s of frames
        feed = threading.Thread(target=run_producers, args=(scan, rv))
        feed.start()
        parts = list(job.partials("s1", timeout=120))
        feed.join(60)
        final = job.result("s1")
        assert job.wait(120) == 0
        assert job.ended
    finally:
        if job.process.poll() is None:
            job.process.kill()
        job.close()
    assert parts[-1] is final and final.final
    done = [p.complete for p in parts]
    assert len(set(done)) >= 3, done          # several partial results, not one snapshot
    assert all(b >= a for a, b in zip(done, done[1:])), done
    keys = [(p.complete, int(p.valid.sum())) for p in parts[:-1]]
    assert all(b > a for a, b in zip(keys, keys[1:])), keys    # each one brings news
    assert done[0] < 64 and final.complete == final.frames == 64 and final.missing == 0
    assert sorted(n["receiver"] for n in final.nodes) == [0, 1]
    assert sum(n["complete"] for n in final.nodes) == 64
    assert all(n["frames"] == 32 and n["closed"] for n in final.nodes), final.nodes
    # the final images are the file the job wrote, exactly
    with h5py.File(tmp_path / "out" / "s1.h5", "r") as f:
        assert sorted(final.images) == ["electron_counts", "sum_image",
                                        "virtual/annular_dark_field", "virtual/bright_field"]
        for name in final.images:
            assert np.array_equal(final.images[name], f[name][()]), name
        assert final.images["sum_image"].sum() > 0
        assert final.valid.all() and f["frames_complete"][()].all()
    # an earlier partial shows fewer positions than the end
    assert not parts[0].valid.all()
    rep = job.report("s1")
    assert rep["ok"] and rep["frames_complete"] == 64
    assert job.rejections()["rejected"] == 0


def test_attach_refuses_a_rendezvous_file_others_may_write(tmp_path):
    import json
    import os

    from streams.errors import StreamError
    from streams.view import attach

    rv = tmp_path / "rv.json"
    rv.write_text(json.dumps({"live": "tcp://127.0.0.1:9"}))
    os.chmod(rv, 0o666)
    with pytest.raises(StreamError, match="writable by group and others"):
        attach(str(rv))
    os.chmod(rv, 0o600)
    rv.write_text(json.dumps({"live": None}))
    with pytest.raises(StreamError, match="no live endpoint"):
        attach(str(rv))


def test_the_guide_s_example_runs_as_written(tmp_path):
    """The Python example of docs/guide/streaming.md, run as written beside a live job."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers

    guide = Path(__file__).resolve().parents[2] / "docs" / "guide" / "streaming.md"
    code = [b for b in re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
            if "streams.view" in b]
    assert len(code) == 1
    job = _launch(tmp_path, "--analysis", "stem4d.flow", "--partition-frames", "2")
    try:
        reader = subprocess.Popen([sys.executable, "-c", code[0]], cwd=tmp_path, env=_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)        # subscribed before the first frame
        run_producers(_scan(scan_shape=(8, 8), rate=20.0), read_rendezvous(job.rendezvous))
        text, _ = reader.communicate(timeout=120)
        assert job.wait(120) == 0
    finally:
        if job.process.poll() is None:
            job.process.kill()
        job.close()
    assert reader.returncode == 0, text
    lines = text.splitlines()
    assert "64/64 complete, 0 missing" in lines[-2] and "[32, 32]" in lines[-2], text
    assert lines[-1] == "64 frames, 0 messages rejected", text


def test_a_position_s_frame_comes_through_the_job_from_memory_or_spill(tmp_path):
    """Frames fetched through rank 0 from the receiver that holds them: equal to the frames
    sent, from memory (the latest partitions) and, with --spill, from the spilled files;
    refusals answered and counted; a key that is not a viewer's gets no answer."""
    import msgpack
    import zmq

    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.security import client_keys
    from streams.simulate import run_producers
    from streams.view import FrameRefused

    spill = tmp_path / "spill" / "%n"
    job = _launch(tmp_path, "--analysis", "stem4d.flow", "--partition-frames", "2",
                  "--spill", str(spill), "--scans", "2")
    ctx = zmq.Context.instance()
    socks = []

    def dealer(cert=None):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        if cert is not None:
            client_keys(d, rv.server_key, cert)
        else:                           # a key of nobody's
            pub, sec = zmq.curve_keypair()
            d.curve_serverkey, d.curve_publickey, d.curve_secretkey = (
                rv.server_key.encode(), pub, sec)
        d.connect(job.frames_endpoint)
        socks.append(d)
        return d

    try:
        rv = read_rendezvous(job.rendezvous)
        job.wait_connected()
        s1 = _scan(scan_shape=(8, 8))
        run_producers(s1, rv)
        job.result("s1", timeout=120)
        got = {i: job.frame("s1", i) for i in (0, 5, 62)}
        by_pos = job.frame("s1", (7, 7))
        with pytest.raises(FrameRefused) as e:
            job.frame("nope", 3)
        assert e.value.refused == "not_held"
        raw = dealer(rv.viewer_certificate)
        raw.send(msgpack.packb({"scan": 3, "frame": -1}))
        assert raw.poll(10000)
        bad = msgpack.unpackb(raw.recv_multipart()[0])
        assert bad["ok"] is False and bad["refused"] == "bad_request"
        stranger = dealer()
        stranger.send(msgpack.packb({"scan": "s1", "frame": 0}))
        assert not stranger.poll(2000)           # ZAP refused its key: no answer
        # past the requests-per-second cap: refused "rate", answered at once
        refusals = []
        for _ in range(30):
            try:
                job.frame("s1", 1)
            except FrameRefused as r:
                refusals.append(r.refused)
        assert "rate" in refusals, refusals
        run_producers(_scan("s2", scan_shape=(4, 4)), rv)
        fin2 = job.result("s2", timeout=120)
        assert job.wait(120) == 0
    finally:
        for d in socks:
            d.close()
        if job.process.poll() is None:
            job.process.kill()
        job.close()
    for i, f in got.items():
        assert np.array_equal(f.data, s1.frame(i)), i
        assert f.complete and f.where in ("memory", "spill")
    assert np.array_equal(by_pos.data, s1.frame(63)) and by_pos.index == 63
    counts = fin2.progress["frame_requests"]
    assert counts["served"] >= 5 and counts["not_held"] >= 1 and counts["rate"] >= 1, counts
    assert counts["bad_request"] == 1, counts


def test_a_udf_s_partials_as_libertem_s_run_udf_iter_gives_them(tmp_path):
    """Two UDFs (one of this project's test cases with nav, extra_shape, sig and single
    buffers; LiberTEM's SumUDF): each partial result as LiberTEM's ``UDFResults``, its
    damage growing, unset positions NaN as LiberTEM leaves them; the last one equal to
    the buffers of the file the job wrote."""
    from libertem.udf.base import UDFResults

    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers
    from streams.view import launch
    from tests.e2e.test_analyses_udf_cli import _env as udf_env

    job = launch(str(tmp_path / "rv.json"), str(tmp_path / "out"),
                 ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
                  str(tmp_path / "local" / "%n"), "--live-interval", "0.2",
                  "--analysis", "udf:tests.udf_cases:PosUDF,libertem.udf.sum:SumUDF",
                  "--partition-frames", "2"], env=udf_env())
    try:
        rv = read_rendezvous(job.rendezvous)
        job.wait_connected()
        feed = threading.Thread(target=run_producers,
                                args=(_scan(scan_shape=(8, 8), rate=12.0), rv))
        feed.start()
        results = list(job.udf_iter("s1", timeout=120))
        feed.join(60)
        assert job.wait(120) == 0
    finally:
        if job.process.poll() is None:
            job.process.kill()
        job.close()
    assert all(isinstance(r, UDFResults) for r in results) and len(results) >= 3
    damage = [int(r.damage.data.sum()) for r in results]
    assert damage == sorted(damage) and damage[0] < 64 == damage[-1], damage
    for r in results:
        pos, total = r.buffers
        assert sorted(pos) == ["mean_frame", "stats", "value", "weighted", "where"], sorted(pos)
        assert pos["value"].kind == "nav" and pos["value"].data.shape == (8, 8)
        assert pos["where"].data.shape == (8, 8, 2) and total["intensity"].kind == "sig"
        assert np.array_equal(np.isnan(pos["value"].data), ~r.damage.data)
    with h5py.File(tmp_path / "out" / "s1.h5", "r") as f:
        assert (f["udf/valid"][()] == results[-1].damage.data).all()
        for label, bufs in zip(("PosUDF", "SumUDF"), results[-1].buffers):
            for name, buf in bufs.items():
                want = f[f"udf/{label}/{name}"][()]
                assert buf.data.dtype == want.dtype, (label, name)
                assert np.array_equal(buf.data, want), (label, name)
