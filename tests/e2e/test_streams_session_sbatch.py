"""The streaming-session sbatch script, as a plain bash script and through real Slurm.

The rendered ``slurm/stream-session.sbatch`` runs with ``launcher='mpirun -n 4'``
and 2 emulated nodes, the Slurm variables it prints set by hand: it serves two
scans from the simulator, spills them, drains the spill to the shared output,
cleans the nodes and removes its rendezvous file. Then
:func:`streams.view.launch_sbatch` submits it to the local Slurm cluster
(tests/slurm_cluster.py) and follows the scan through the handle it returns.
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

import h5py
import numpy as np
import pytest

from tests.slurm_cluster import slurm_cluster  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")

ROOT = Path(__file__).resolve().parents[2]


def test_a_session_script_serves_two_scans_drains_the_spill_and_cleans(tmp_path):
    from stager import sbatch
    from streams import ScanGeometry, SimulatedScan
    from streams.protocols.native.rendezvous import wait_for_rendezvous
    from streams.simulate import run_producers
    from tests.e2e.test_streams_receive import _env

    rv, out, spill = tmp_path / "rv.json", tmp_path / "out", tmp_path / "spill" / "%n"
    rv.write_text('{"protocol": "mpistage-stream/1", "receivers": ["tcp://stale:1"]}')
    os.utime(rv, (time.time() - 3600, time.time() - 3600))     # an earlier session's
    script = sbatch.render((ROOT / "slurm" / "stream-session.sbatch").read_text(), {
        "nodes": "2", "rendezvous": str(rv), "out": str(out), "scans": "2",
        "spill": str(spill), "node_options": "--emulate-nodes 2",
        "launcher": "mpirun -n 4 --oversubscribe",
        "stager": f"{sys.executable} -m stager",
        "receive_options": f"--bind 127.0.0.1 --local {tmp_path}/local/%n --live-interval 0.2 "
                           "--partition-frames 32"},
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


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launch_sbatch_gives_the_handle_of_a_slurm_job(slurm_cluster, tmp_path):  # noqa: F811
    from streams.view import SlurmJob, launch_sbatch

    rv, out = tmp_path / "rv.json", tmp_path / "out"
    # The cluster's nodes are one host: Open MPI's shared-memory segments of two "nodes"
    # would have the same names (host name, job, local rank) -- TCP between all ranks.
    env = dict(slurm_cluster.env, OMPI_MCA_btl="self,tcp")
    job = launch_sbatch(str(rv), str(out), [
        "--bind", "127.0.0.1", "--local", f"{tmp_path}/local/%n", "--live-interval", "0.2",
        "--partition-frames", "2"], nodes=2, params={
        "stager": f"{sys.executable} -m stager", "time": "00:05:00",
        "output": str(tmp_path / "job-%j.out")}, timeout=120, env=env, cwd=str(tmp_path))
    assert isinstance(job.process, SlurmJob)
    log = lambda: "\n".join(p.read_text() for p in tmp_path.glob("job-*.out"))  # noqa: E731
    feed = None
    try:
        assert job.process.poll() is None and job.process.state == "RUNNING"
        assert not job.ended
        job.wait_connected()
        feed = subprocess.Popen([sys.executable, "-m", "streams.simulate", "--rendezvous",
                                 str(rv), "--scan", "s1", "--scan-shape", "8", "8",
                                 "--shape", "64", "64", "--rate", "12"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        parts = list(job.partials("s1", timeout=120))
        fed, _ = feed.communicate(timeout=60)
        assert feed.returncode == 0, fed
        final = job.result("s1")
        assert job.wait(120) == 0, log()
        assert job.ended and job.process.state == "COMPLETED"
    finally:
        if feed is not None and feed.poll() is None:
            feed.kill()
            feed.communicate()
        if job.process.poll() is None:
            job.process.kill()
        job.close()
    assert parts[-1] is final and final.final
    done = [p.complete for p in parts]
    assert len(parts) >= 2 and done[0] < 64 and final.complete == final.frames == 64, done
    assert all(b >= a for a, b in zip(done, done[1:])), done
    # two receivers, on two Slurm nodes of the job
    assert sorted(n["receiver"] for n in final.nodes) == [0, 1]
    with h5py.File(out / "s1.h5", "r") as f:
        assert final.images["sum_image"].sum() > 0
        for name in final.images:
            assert np.array_equal(final.images[name], f[name][()]), name
    assert job.report("s1")["ok"]
    assert not rv.exists()           # the session removed it when it ended


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_launch_sbatch_says_when_the_job_ends_without_a_rendezvous(slurm_cluster, tmp_path):  # noqa: F811
    from streams.errors import StreamError
    from streams.view import launch_sbatch

    with pytest.raises(StreamError, match=r"ended \(FAILED, exit status 3\) before writing"):
        launch_sbatch(str(tmp_path / "rv.json"), str(tmp_path / "out"), nodes=1,
                      params={"setup": "exit 3", "output": str(tmp_path / "job-%j.out")},
                      timeout=60, env=slurm_cluster.env, cwd=str(tmp_path))
