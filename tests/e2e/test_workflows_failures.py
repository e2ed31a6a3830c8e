"""Runs that go wrong end in bounded time with the task named.

Each test starts ``python -m workflows run`` -- under a real ``mpirun -n 4``
where the case is about MPI -- with a subprocess timeout, so a regression
fails instead of hanging the suite: a task that hangs at 0 % CPU, one that
hangs where no interrupt reaches, one that kills its worker rank (SIGKILL,
``os._exit(3)``) with and without isolation.
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
    if i == 5:
        if how == "hang":
            time.sleep(3600)                      # blocked at 0 % CPU
        elif how == "native":
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(3600)                      # no interrupt reaches it
        elif how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif how == "exit":
            os._exit(3)
    time.sleep(0.05)
    return i

@app
def work(i, how):
    return body(i, how)

@app(timeout=1)
def timed(i, how):
    return body(i, how)

def main(args):
    how, kind = args.argv
    return foreach(timed if kind == "timed" else work, range(12), how)
"""


def _env(**extra):
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", WORKFLOWS_TIMEOUT_GRACE="2")
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    env.update(extra)
    return env


def run(tmp_path, how, kind, *options, np=4, timeout=180):
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW)
    cmd = [sys.executable, "-m", "workflows", "run", str(flow), "--out", str(tmp_path),
           *options, "--", how, kind]
    if np:
        cmd = [MPIRUN, "-n", str(np), "--oversubscribe", *cmd]
    t = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)
    return proc, time.monotonic() - t


@needs_mpirun
@pytest.mark.parametrize("dispatch", ["central", "nodes"])
def test_run_timeout_ends_a_hanging_task(tmp_path, dispatch):
    proc, took = run(tmp_path, "hang", "plain", "--timeout", "4", "--dispatch", dispatch,
                     "--emulate-nodes", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "TaskTimeout" in out and "work#6(5, 'hang')" in out, out
    assert "run's time limit" in out and "--- remote traceback ---" in out
    assert "time.sleep(3600)" in out  # where the task was when it was interrupted
    assert took < 90, f"took {took:.0f} s"


@needs_mpirun
def test_app_timeout_names_task_and_rank(tmp_path):
    proc, took = run(tmp_path, "hang", "timed")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "11 succeeded, 1 failed" in proc.stdout, out
    assert "task timed#6(5, 'hang') failed on rank " in out and "timeout of 1 s" in out, out
    assert " on rank 0 " not in out.split("task timed#6")[1].split("\n")[0]
    assert took < 90


@needs_mpirun
def test_stuck_worker_is_given_up_and_the_job_ends(tmp_path):
    proc, took = run(tmp_path, "native", "timed")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "timed#6(5, 'native')" in out and "given up" in out, out
    assert "FAILED:" in out and "MPI_Abort" in out  # the summary came first
    assert took < 90


@needs_mpirun
@pytest.mark.parametrize("how,code,dispatch", [("kill", "signal 9", "central"),
                                               ("exit", "code", "central"),
                                               ("kill", "signal 9", "nodes")])
def test_worker_that_dies_is_named(tmp_path, how, code, dispatch):
    proc, took = run(tmp_path, how, "plain", "--dispatch", dispatch, "--emulate-nodes", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    # mpirun names the dead rank and its signal or exit code; our report (made by the
    # worker's server as soon as its process is gone, or on SIGTERM) names the task it
    # was running, and its rank and host.
    assert "died" in out or "terminated by SIGTERM" in out, out
    line = next(ln for ln in out.splitlines() if "work#6 (running)" in ln)
    assert "rank " in line and os.uname().nodename in line, line
    assert code in out  # mpirun's own message
    assert took < 60, f"took {took:.0f} s"


@needs_mpirun
@pytest.mark.parametrize("how,expected", [("kill", "killed by signal 9 (SIGKILL)"),
                                          ("exit", "exited with code 3")])
def test_isolated_worker_death_is_a_task_failure(tmp_path, how, expected):
    proc, took = run(tmp_path, how, "plain", "--isolate")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "11 succeeded, 1 failed" in proc.stdout, out
    assert "TaskCrashed" in out and expected in out, out
    line = next(ln for ln in out.splitlines() if "task work#6(5, " in ln)
    assert " failed on rank " in line and " on rank 0 " not in line, line
    assert took < 90


@pytest.mark.parametrize("executor", ["inline", "local"])
def test_serial_executors_honour_the_run_timeout(tmp_path, executor):
    proc, took = run(tmp_path, "hang", "plain", "--executor", executor, "--timeout", "3",
                     np=None)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "work#6(5, 'hang')" in out and "TaskTimeout" in out, out
    assert took < 60


def test_parsl_honours_app_timeout(tmp_path):
    proc, took = run(tmp_path, "hang", "timed", "--executor", "parsl", "--workers", "2",
                     np=None, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "timed#6(5, 'hang')" in out and "timeout of 1 s" in out, out
    assert took < 180


def test_bad_timeout_is_bad_input(tmp_path):
    proc, _ = run(tmp_path, "hang", "plain", "--executor", "inline", "--timeout", "0", np=None)
    assert proc.returncode == 2 and "--timeout" in proc.stderr
