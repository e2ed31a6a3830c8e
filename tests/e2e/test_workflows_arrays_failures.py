"""Task arrays when a worker dies or is given up: the chunk fails, the report names it.

A ``foreach`` of 120 ready items at ``mpirun -n 4`` goes as chunks of 10
(``workflows/executors/mpi/arrays.py``); item 50 kills its worker rank, or
blocks where no interrupt reaches. As for single tasks
(``tests/e2e/test_workflows_failures.py``), the run ends in bounded time with
the worker's rank and host named -- here next to the chunk it held.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")

FLOW = """
import os, signal, time
from workflows import app, foreach

def body(i, how):
    if i == 50:
        if how == "native":
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(3600)                      # no interrupt reaches it
        elif how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.002)
    return i

@app
def work(i, how):
    return body(i, how)

@app(timeout=1)
def timed(i, how):
    return body(i, how)

def main(args):
    how, kind = args.argv
    return foreach(timed if kind == "timed" else work, range(120), how)
"""


def run(tmp_path, how, kind, *options, timeout=180):
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", WORKFLOWS_TIMEOUT_GRACE="2")
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [MPIRUN, "-n", "4", "--oversubscribe", sys.executable, "-m", "workflows", "run",
           str(flow), "--out", str(tmp_path), *options, "--", how, kind]
    t = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc, time.monotonic() - t


@needs_mpirun
@pytest.mark.parametrize("dispatch", ["central", "nodes"])
def test_worker_killed_in_an_array_is_named_with_its_chunk(tmp_path, dispatch):
    proc, took = run(tmp_path, "kill", "plain", "--dispatch", dispatch, "--emulate-nodes", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "died" in out or "terminated by SIGTERM" in out, out
    # The chunk holding item 50 (work#51) was running on the dead rank.
    line = next(ln for ln in out.splitlines() if "(array of " in ln and "(running)" in ln)
    assert "rank " in line and os.uname().nodename in line, line
    first, last = line.split("work#")[1:3]
    assert int(first.split(".")[0]) <= 51 <= int(last.split(" ")[0]), line
    assert "signal 9" in out  # mpirun's own message
    assert took < 60, f"took {took:.0f} s"


@needs_mpirun
def test_stuck_item_gives_up_its_worker_and_fails_its_chunk(tmp_path):
    proc, took = run(tmp_path, "native", "timed")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "given up" in out and "(array of " in out, out
    # Every item of the stuck chunk failed with the give-up message naming the worker;
    # the others succeeded (the summary is printed before MPI_Abort).
    summary = next(ln for ln in out.splitlines() if "120 tasks:" in ln)
    succeeded = int(summary.split("120 tasks: ")[1].split(" succeeded")[0])
    failed = int(summary.split("succeeded, ")[1].split(" failed")[0])
    assert succeeded + failed == 120 and 2 <= failed <= 30, summary
    assert "was given up" in out and "timed#51(50, 'native')" in out, out
    assert "MPI_Abort" in out
    assert took < 60, f"took {took:.0f} s"  # ~10 s of chunk timeouts + 2 s grace
