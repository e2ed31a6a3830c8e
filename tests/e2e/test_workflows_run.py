"""``python -m workflows run``: the same flow on every executor, failures, exit codes.

These tests start ``python -m workflows run`` (and ``mpirun -n 4`` of it) as
subprocesses, the way users run flows; each subprocess has a timeout, so a
hang fails the test instead of blocking the suite.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAPREDUCE = os.path.join(ROOT, "workflows", "examples", "mapreduce.py")
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")


def _env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)  # a serial test must not look like an MPI rank to the child
    return env


def run_flow(flow, *args, np=None, timeout=240, env=None):
    cmd = [sys.executable, "-m", "workflows", "run", flow, *args]
    if np:
        cmd = [MPIRUN, "-n", str(np), "--oversubscribe", *cmd]
    return subprocess.run(cmd, cwd=ROOT, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def read(path):
    with open(path, "rb") as fh:
        return fh.read()


def test_mapreduce_identical_on_every_executor(tmp_path):
    outputs = {}
    runs = [("inline", None), ("local", None), ("parsl", None)]
    if MPIRUN:
        runs.append(("mpi", 4))
    for name, np in runs:
        out = tmp_path / name
        args = ["--out", str(out), "--", "--n", "24", "--values", "200"]
        if np is None:
            args = ["--executor", name] + args
        proc = run_flow(MAPREDUCE, *args, np=np)
        assert proc.returncode == 0, f"{name}: {proc.stdout}\n{proc.stderr}"
        assert f"on {name}" in proc.stdout and "0 failed" in proc.stdout
        outputs[name] = read(out / "mapreduce.txt")
    first = outputs["inline"]
    assert first.startswith(b"inputs 24\n")
    for name, data in outputs.items():
        assert data == first, f"{name} output differs from inline"
    if not MPIRUN:
        pytest.skip("mpi part not run: mpirun (openmpi-bin) is not installed")


FAILING_FLOW = """
import os
from workflows import app, command, foreach, reduce_tree

@app
def work(i):
    if i == 5:
        raise ValueError(f"item {i} is corrupt")
    return i

@app
def merge(a, b):
    return a + b

@command(["sh", "-c", "echo broken >&2; exit 7"])
def broken_tool():
    "Exit 7."

def main(args):
    return [reduce_tree(merge, foreach(work, range(12))), broken_tool()]
"""


@pytest.mark.parametrize("executor,np", [("local", None), ("mpi", 4)])
def test_failing_tasks_exit_nonzero_with_summary(tmp_path, executor, np):
    if np and not MPIRUN:
        pytest.skip("mpirun (openmpi-bin) is not installed")
    flow = tmp_path / "failing.py"
    flow.write_text(FAILING_FLOW)
    args = ["--out", str(tmp_path)] if np else ["--executor", executor, "--out", str(tmp_path)]
    proc = run_flow(str(flow), *args, np=np, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 failed" in proc.stdout
    assert "item 5 is corrupt" in proc.stderr and "work#" in proc.stderr
    assert "exited with code 7" in proc.stderr and "broken" in proc.stderr
    assert "--- remote traceback ---" in proc.stderr
    if np:
        # The task ran on a worker rank, and the error says which.
        assert any(f"failed on rank {r} " in proc.stderr for r in (1, 2, 3)), proc.stderr


def test_bad_input_exits_2(tmp_path):
    proc = run_flow(str(tmp_path / "missing.py"), "--executor", "inline")
    assert proc.returncode == 2 and "not found" in proc.stderr
    nomain = tmp_path / "nomain.py"
    nomain.write_text("x = 1\n")
    proc = run_flow(str(nomain), "--executor", "inline")
    assert proc.returncode == 2 and "no main(args)" in proc.stderr
    proc = run_flow(MAPREDUCE, "--executor", "inline", "--", "--n", "many")
    assert proc.returncode == 2 and "bad flow arguments" in proc.stderr


HOOK_MODULE = """
import os, time

def mark(ctx):
    time.sleep(0.2)   # tasks must not start before this finished on every node
    with open(os.path.join(os.environ["HOOK_DIR"], f"{ctx.phase}-{ctx.node}"), "w") as fh:
        fh.write(f"{ctx.rank} {ctx.node_index} {ctx.n_nodes}")
"""

HOOK_FLOW = """
import os
from workflows import app

@app
def look(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith("startup-"))

def main(args):
    return look(os.environ["HOOK_DIR"])
"""


@needs_mpirun
def test_leader_hooks_once_per_emulated_node_before_tasks(tmp_path):
    (tmp_path / "hookmod_wf.py").write_text(HOOK_MODULE)
    flow = tmp_path / "hookflow.py"
    flow.write_text(HOOK_FLOW)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = _env()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    env["HOOK_DIR"] = str(marks)
    env["STAGER_LEADER_HOOK_SHUTDOWN"] = "hookmod_wf:mark"
    proc = run_flow(str(flow), "--emulate-nodes", "2", "--leader-hook-startup", "hookmod_wf:mark",
                    "--out", str(tmp_path), np=4, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result: ['startup-node0', 'startup-node1']" in proc.stdout
    assert sorted(os.listdir(marks)) == ["shutdown-node0", "shutdown-node1",
                                         "startup-node0", "startup-node1"]
    # Leaders are the lowest rank of each block of two ranks.
    assert (marks / "startup-node0").read_text() == "0 0 2"
    assert (marks / "startup-node1").read_text() == "2 1 2"


@needs_mpirun
def test_failing_leader_hook_fails_every_rank(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text("def main(args):\n    return None\n")
    proc = run_flow(str(flow), "--leader-hook-startup", "no_such_module_xyz:f",
                    "--out", str(tmp_path / "out"), np=2, timeout=120)
    assert proc.returncode == 1
    assert "cannot import" in proc.stderr


def test_help_lists_options():
    proc = subprocess.run([sys.executable, "-m", "workflows", "run", "--help"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for flag in ("--executor", "--stage", "--emulate-nodes", "--node-id-env", "--out",
                 "--leader-hook-startup", "--leader-hook-shutdown", "--timeout",
                 "--task-timeout", "--isolate", "--dispatch"):
        assert flag in proc.stdout


STAGED_FLOW = """
import os
from workflows import app

@app
def count(folder):
    return sorted(os.listdir(folder))

def main(args):
    return [count(os.path.join(args.argv[0], f"node{i}")) for i in range(2)]
"""


@needs_mpirun
def test_stage_then_run_in_one_job(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"frame{i}.bin").write_bytes(bytes([i]) * 4096)
    local = tmp_path / "local"
    spec = tmp_path / "frames.hook"
    spec.write_text(f"broadcast to {local}/%n files {{ {src}/*.bin }}\n")
    flow = tmp_path / "staged.py"
    flow.write_text(STAGED_FLOW)
    report = tmp_path / "run.json"
    proc = run_flow(str(flow), "--stage", str(spec), "--emulate-nodes", "2", "--out",
                    str(tmp_path), "--report", str(report), "--", str(local), np=4, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for node in ("node0", "node1"):
        names = sorted(n for n in os.listdir(local / node) if not n.startswith("."))
        assert names == ["frame0.bin", "frame1.bin", "frame2.bin"]
    import json

    data = json.loads(report.read_text())
    assert data["executor"] == "mpi" and data["tasks"]["succeeded"] == 2
    assert "stage" in data["seconds"] and data["exit_code"] == 0


CANCELLED_FLOW = """
from concurrent.futures import Future
from workflows import app

@app
def same(x):
    return x

def main(args):
    gate = Future()
    out = same(gate)
    out.cancel()          # cancelled while it waits for its input
    gate.set_result(1)
    return out
"""


def test_cancelled_result_exits_1_with_a_message(tmp_path):
    # Future.exception() raises on a cancelled future: the runner crashed with a
    # traceback (and under mpirun left the other ranks waiting) instead of reporting.
    flow = tmp_path / "cancelled.py"
    flow.write_text(CANCELLED_FLOW)
    proc = run_flow(str(flow), "--executor", "inline", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "was cancelled" in proc.stderr and "Traceback" not in proc.stderr
