"""Merlin end to end against LiberTEM-live's simulator: it replays a MIB file (written
here, 12-bit U16 and 6-bit raw) over its data port once ``--control merlin://`` starts the
acquisition and soft-triggers it on its control port; the results of ``mpirun -n 2 stager
stream receive --protocol merlin`` equal LiberTEM's own reading of that MIB file."""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import _env

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def _write_mib(tmp, depth, raw, n=(4, 4), shape=(64, 64)):
    from streams.protocols.merlin.mpx import encode_frame, encode_hdr

    hi = {6: 64, 12: 4096}[depth]
    frames = np.random.default_rng(depth).integers(0, hi, (n[0] * n[1], *shape))
    mib, hdr = tmp / "scan.mib", tmp / "scan.hdr"
    with open(mib, "wb") as f:
        for i, a in enumerate(frames):
            f.write(encode_frame(i + 1, a, depth, raw))
    hdr.write_bytes(encode_hdr(len(frames), n[1], depth))
    return hdr


@pytest.mark.timeout(180)
@pytest.mark.parametrize("depth,raw,ranks,nodes", [(12, False, 4, 2), (6, True, 2, 1)])
def test_libertem_live_merlin_simulator_equals_libertems_mib_reading(tmp_path, depth, raw,
                                                                    ranks, nodes):
    """With 2 receivers (4 ranks, 2 nodes) one connects, the other opens and closes the
    acquisition as it is shared: the scan ends by its last frame, not a timeout."""
    for mod in ("libertem_live", "libertem"):
        pytest.importorskip(mod, reason=f"{mod} is not installed (pip install "
                            "'mpistage[livepeers]'): LiberTEM-live's simulator is the peer")
    import h5py
    from libertem.api import Context
    from libertem.executor.inline import InlineJobExecutor
    from libertem.udf.sum import SumUDF
    from libertem.udf.sumsigudf import SumSigUDF
    from libertem_live.detectors.merlin.sim import CameraSim

    hdr = _write_mib(tmp_path, depth, raw)
    ctx = Context(executor=InlineJobExecutor())
    ds = ctx.load("mib", path=str(hdr))
    want = ctx.run_udf(ds, [SumUDF(), SumSigUDF()])
    sim = CameraSim(path=str(hdr), nav_shape=(4, 4), host="127.0.0.1", data_port=0,
                    control_port=0, trigger_port=0, wait_trigger=True)
    sim.start()
    sim.wait_for_listen()
    try:
        r = subprocess.run(
            ["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable, "-m", "stager",
             "stream", "receive", "--rendezvous", str(tmp_path / "rv.json"), "--out",
             str(tmp_path / "out"), "--emulate-nodes", str(nodes), "--bind", "127.0.0.1", "--local",
             str(tmp_path / "local" / "%n"), "--insecure", "--protocol", "merlin",
             "--merlin-endpoint", f"127.0.0.1:{sim.server_t.port}",
             "--control", f"merlin://127.0.0.1:{sim.control_t.port}",
             "--merlin-scan-shape", "4,4", "--analysis",
             "udf:libertem.udf.sum:SumUDF,libertem.udf.sumsigudf:SumSigUDF",
             "--partition-frames", "4", "--timeout", "120"],
            env=_env(), capture_output=True, text=True, timeout=170)
    finally:
        sim.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "detector merlin://" in r.stderr and "16 images" in r.stderr
    assert "ended by end" in r.stdout, r.stdout
    (h5,) = [p for p in (tmp_path / "out").glob("acquisition-*.h5") if ".live" not in p.name]
    with h5py.File(h5, "r") as f:
        np.testing.assert_allclose(f["udf/SumUDF/intensity"][()], want[0]["intensity"].data,
                                   rtol=1e-6)
        np.testing.assert_allclose(f["udf/SumSigUDF/intensity"][()],
                                   want[1]["intensity"].data, rtol=1e-6)
        assert f"Counter Depth (number): {depth}" in f["detector/description"][()].decode()
