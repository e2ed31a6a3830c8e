"""``python -m streams.simulate --protocol merlin`` (issue 41): its data port into a real
``mpirun -n 4 stager stream receive --protocol merlin`` gives, frame for frame, what
LiberTEM reads from the MIB file the same simulator writes (``--mib``: the file
LiberTEM-live's simulator replays)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import _env

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_simulate_merlin_help_names_its_modes():
    r = subprocess.run([sys.executable, "-m", "streams.simulate", "--protocol", "merlin",
                        "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--bind HOST:PORT" in r.stdout and "--mib PREFIX" in r.stdout


@pytest.mark.timeout(240)
def test_simulated_merlin_into_the_job_equals_libertems_reading_of_its_mib(tmp_path):
    libertem = pytest.importorskip("libertem.api", reason="LiberTEM reads the MIB file")
    import h5py
    from libertem.executor.inline import InlineJobExecutor
    from libertem.udf.sum import SumUDF

    args = ["--scan-shape", "4", "6", "--shape", "32", "32"]
    r = subprocess.run([sys.executable, "-m", "streams.simulate", "--protocol", "merlin",
                        "--mib", str(tmp_path / "scan"), *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "24 frames" in r.stdout, r.stdout + r.stderr
    ctx = libertem.Context(executor=InlineJobExecutor())
    want = ctx.run_udf(ctx.load("mib", path=str(tmp_path / "scan.hdr")), SumUDF())
    port = _free_port()
    sim = subprocess.Popen([sys.executable, "-m", "streams.simulate", "--protocol", "merlin",
                            "--bind", f"127.0.0.1:{port}", "--wait", "150", *args],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        job = subprocess.run(
            ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m", "stager", "stream",
             "receive", "--rendezvous", str(tmp_path / "rv.json"), "--out",
             str(tmp_path / "out"), "--emulate-nodes", "2", "--local",
             str(tmp_path / "local" / "%n"), "--protocol", "merlin", "--merlin-endpoint",
             f"127.0.0.1:{port}", "--analysis", "udf:libertem.udf.sum:SumUDF",
             "--timeout", "150"], env=_env(), capture_output=True, text=True, timeout=200)
        sim_out, _ = sim.communicate(timeout=30)
    finally:
        sim.kill()
    assert job.returncode == 0, job.stdout + job.stderr
    assert sim.returncode == 0 and "sent 25 messages" in sim_out, sim_out
    assert "24/24 frames complete" in job.stdout, job.stdout
    (h5,) = [p for p in (tmp_path / "out").glob("acquisition-*.h5") if ".live" not in p.name]
    with h5py.File(h5, "r") as f:
        got = f["udf/intensity"][()]     # one UDF: its buffers under /udf
    np.testing.assert_allclose(got, want["intensity"].data, rtol=1e-6)
    assert got.sum() > 0
