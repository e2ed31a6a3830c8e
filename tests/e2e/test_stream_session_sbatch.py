"""The streaming-session sbatch script, run as a plain bash script (no Slurm started).

The rendered ``slurm/stream-session.sbatch`` runs with ``launcher='mpirun -n 4'``
and 2 emulated nodes, the Slurm variables it prints set by hand: it serves two
scans from the simulator, spills them, drains the spill to the shared output,
cleans the nodes and removes its rendezvous file.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")

ROOT = Path(__file__).resolve().parents[2]


def test_a_session_script_serves_two_scans_drains_the_spill_and_cleans(tmp_path):
    from stager import sbatch
    from streams import ScanGeometry, SimulatedScan
    from streams.protocols.native.rendezvous import wait_for_rendezvous
    from streams.simulate import run_producers
    from tests.e2e.test_stream_receive import _env

    rv, out, spill = tmp_path / "rv.json", tmp_path / "out", tmp_path / "spill" / "%n"
    rv.write_text('{"protocol": "mpistage-stream/1", "receivers": ["tcp://stale:1"]}')
    os.utime(rv, (time.time() - 3600, time.time() - 3600))     # an earlier session's
    script = sbatch.render((ROOT / "slurm" / "stream-session.sbatch").read_text(), {
        "nodes": "2", "rendezvous": str(rv), "out": str(out), "scans": "2",
        "spill": str(spill), "node_options": "--emulate-nodes 2",
        "launcher": "mpirun -n 4 --oversubscribe",
        "stager": f"{sys.executable} -m stager",
        "receive_options": f"--bind 127.0.0.1 --local {tmp_path}/local/%n --live-interval 0.2"},
        where="stream-session")
    job = tmp_path / "job.sbatch"
    job.write_text(script)
    env = _env(SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="node[0-1]")
    started = time.time() - 1
    p = subprocess.Popen(["bash", str(job)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        r = wait_for_rendezvous(rv, timeout=60, newer_than=started)
        assert r.receivers != ["tcp://stale:1"]
        for name in ("b1", "b2"):
            g = ScanGeometry(name, 4, 64, 4, (64, 64), "<u2", (8, 8))
            run_producers(SimulatedScan(g), r, send_timeout=30.0)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:       # the script, its mpirun and the ranks: one session
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 0, stdout + stderr
    assert "job 4242 on 2 nodes" in stderr and "every scan served" in stderr
    for name in ("b1", "b2"):
        assert json.loads((out / f"{name}.json").read_text())["ok"]
        assert (out / f"{name}.h5").exists()
    assert not rv.exists() and not list(tmp_path.glob("rv.json.client*"))  # removed at exit
    drained = sorted(str(q.relative_to(out / "spill")) for q in (out / "spill").rglob("*.h5"))
    # one partition per receiver and scan (64 small frames fit one)
    assert drained == [f"node{r}/{s}/part-r{r}-000000.h5" for r in (0, 1) for s in ("b1", "b2")]
    assert not list((tmp_path / "spill").rglob("part-*.h5"))  # cleaned from the nodes
    assert not os.path.exists(tmp_path / "spill" / "node0" / ".stager")
