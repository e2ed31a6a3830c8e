"""The DECTRIS legacy stream end to end, against LiberTEM-live's own sender and reader.

A dump written by our simulator (every part: int64 LE length + bytes) is replayed by
LiberTEM-live's DECTRIS simulator (``libertem_live.detectors.dectris.sim.DectrisSim``,
``libertem_dectris`` underneath: it sends the dheader and the configuration as two
messages, and deals messages round-robin) into ``stager stream receive --protocol
dectris-legacy`` under ``mpirun -n 4`` with 2 receivers; the results equal
LiberTEM-live's own ``run_udf`` on a replay of the same dump. Then hostile messages
from our simulator: refused, counted, the good series kept.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job, _env

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
TESTS = Path(__file__).resolve().parents[1]
UDFS = ("udf:libertem.udf.sum:SumUDF,libertem.udf.sumsigudf:SumSigUDF,"
        "libertem.udf.masks:ApplyMasksUDF")


def _peers():
    for mod in ("libertem_live", "libertem_dectris", "flask", "libertem"):
        pytest.importorskip(mod, reason=f"{mod} is not installed (pip install "
                            "'mpistage[livepeers]'): LiberTEM-live's simulator is the peer")


def _dump(path: Path, scan_shape, shape) -> None:
    from streams.protocols.dectris_legacy.simulator import series_messages, write_dump
    from streams.simulate import synthetic_frame

    n = scan_shape[0] * scan_shape[1]
    with open(path, "wb") as f:
        write_dump(f, series_messages(1, lambda i: synthetic_frame(i, shape, scan_shape), n,
                                      shape, encoding="bslz4"))


def _arm(port: int) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/detector/api/1.8.0/command/arm",
                                 method="PUT")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["sequence id"]


@pytest.mark.slow          # LiberTEM-live's executor and our job: about 30 s here
@pytest.mark.timeout(240)
def test_libertem_live_simulator_into_two_receivers_equals_libertem_live(tmp_path):
    _peers()
    from libertem_live.detectors.dectris.sim import DectrisSim

    scan_shape, shape = (8, 8), (64, 64)
    dump, masks = tmp_path / "scan.dump", tmp_path / "masks.npy"
    _dump(dump, scan_shape, shape)
    rng = np.random.default_rng(3)
    np.save(masks, rng.random((2, *shape)).astype("<f4"))
    ref = tmp_path / "ref.npz"
    r = subprocess.run([sys.executable, str(TESTS / "libertem_live_reference.py"), str(dump),
                        "8", "8", str(masks), str(ref)], env=_env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    want = np.load(ref)

    sim = DectrisSim(path=str(dump), port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    try:
        job = Job(tmp_path, "--protocol", "dectris-legacy", "--dectris-endpoint",
                  f"tcp://127.0.0.1:{sim.zmqport}", "--dectris-scan-shape=-1,8",
                  "--analysis", UDFS, "--analysis-params",
                  json.dumps([{}, {}, {"masks": str(masks)}]), "--partition-frames", "8")
        info = job.started()
        assert info["protocol"] == "dectris-legacy"
        time.sleep(1.5)       # both clients connected: the simulator deals round-robin
        assert _arm(sim.port) == 1
        rc, out, err = job.wait()
    finally:
        sim.stop()
    assert rc == 0, out + err
    rep = job.report("series-1")
    assert rep["ok"] and rep["frames_complete"] == 64 and rep["receivers"] == 2
    assert rep["geometry"]["scan_shape"] == [8, 8]       # -1 resolved from the 64 images
    import h5py

    with h5py.File(job.out / "series-1.h5", "r") as f:
        got = {k: f[f"udf/{u}/intensity"][()] for k, u in
               (("sum", "SumUDF"), ("sumsig", "SumSigUDF"), ("masks", "ApplyMasksUDF"))}
        assert f["detector"].attrs["series_id"] == 1
        assert f["detector/x_pixel_size"][()] == 75e-6     # the configuration, as NXmx
    for k in ("sum", "sumsig", "masks"):
        assert got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)


@pytest.mark.timeout(180)
def test_hostile_legacy_messages_are_refused_and_counted(tmp_path):
    """Truncated parts, wrong lengths, a frame-size bomb, a JSON bomb, a header
    announcing 2^40 images, garbage: each refused and counted in rejections.json; the
    good series is served whole."""
    from streams.protocols.dectris_legacy.legacy import (detector_config, encode_end,
                                                         encode_header, encode_image)
    from streams.protocols.dectris_legacy.simulator import LegacySimulator, series_messages

    shape = (32, 32)
    frame = lambda i: (np.arange(32 * 32).reshape(shape) % 9 + i).astype("<u2")  # noqa: E731
    with LegacySimulator() as sim:
        job = Job(tmp_path, "--protocol", "dectris-legacy", "--dectris-endpoint", sim.endpoint,
                  "--dectris-scan-shape", "4,4", "--partition-frames", "4",
                  "--idle-timeout", "60")
        job.started()
        time.sleep(1.5)
        huge = detector_config(4, shape)
        huge["ntrigger"] = 1 << 40
        sim.send(encode_header(9, huge))                                  # 2^40 images
        sim.send(encode_image(9, 0, frame(0)))
        sim.send(encode_end(9))
        msgs = list(series_messages(1, frame, 16, shape))
        for k, m in enumerate(msgs):
            if k == 3:
                sim.send(m[:3])                                            # truncated
                bad = list(m)
                bad[2] = m[2][: len(m[2]) // 2]                            # wrong length
                sim.send(bad)
                bomb = list(m)
                bomb[1] = json.dumps({"htype": "dimage_d-1.0", "shape": [1 << 20, 1 << 20],
                                      "type": "uint32", "encoding": "bs32-lz4<"}).encode()
                sim.send(bomb)                                             # 4 TiB frame
                sim.send([b" " * (2 << 20)])                               # JSON bomb
                sim.send([b"\x00garbage"])
            sim.send(m)
        rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("series-1")
    assert rep["ok"] and rep["frames_complete"] == 16
    rej = json.loads((job.out / "rejections.json").read_text())
    by = rej["by_reason"]
    assert by.get("out_of_range") == 1, rej             # the 2^40 header, named
    assert any("1099511627776" in e for e in rej["examples"]), rej["examples"]
    assert by.get("too_large") == 1 and by.get("wrong_payload_size") == 1, rej
    assert by.get("malformed_header", 0) >= 3, rej      # truncated, JSON bomb, garbage
    assert "series-9" in rej["series_never_started"] or by.get("unknown_scan"), rej
