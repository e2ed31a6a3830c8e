"""``python -m workflows run`` as a newcomer types it (issue 41): a flow path as the docs
write it from outside the clone, a flow's ``--help``, and Ctrl-C on the local executor and
under a real ``mpirun``: one line saying what was interrupted and what is kept."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.e2e.test_workflows_run import MPIRUN, _env, needs_mpirun

SLOW = '''
import time
from workflows import app


@app
def nap(i):
    time.sleep(0.05 if i < 2 else 60)
    return i


def main(args):
    return [nap(i) for i in range(4)]
'''


def _run(cwd, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "workflows", "run", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=timeout)


def test_a_flow_path_as_the_docs_write_it_runs_from_outside_the_clone(tmp_path):
    """``hedm/ff.py`` from another directory is the installed ``hedm.ff``'s file."""
    r = _run(tmp_path, "hedm/ff.py", "--out", str(tmp_path / "o"), "--", "--help")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "usage: ff.py (flow arguments)" in r.stdout and "--params" in r.stdout
    assert "error" not in r.stderr, r.stderr


def test_a_missing_flow_names_the_module_form(tmp_path):
    r = _run(tmp_path, "mine/words.py")
    assert r.returncode == 2
    assert "'mine/words.py' not found in " + str(tmp_path) in r.stderr, r.stderr
    assert "module name" in r.stderr and "hedm.ff" in r.stderr, r.stderr


def test_flow_help_exits_0(tmp_path):
    """``FLOW -- --help``: the flow's help, exit 0, no error line and no run directory."""
    r = _run(tmp_path, "workflows/examples/mapreduce.py", "--", "--help")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--values" in r.stdout and r.stderr == ""
    assert list(tmp_path.iterdir()) == []


@needs_mpirun
def test_flow_help_under_mpirun_exits_0_said_once(tmp_path):
    r = subprocess.run([MPIRUN, "-n", "2", sys.executable, "-m", "workflows", "run",
                        "workflows/examples/mapreduce.py", "--", "--help"], cwd=tmp_path,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("usage: mapreduce.py") == 1, r.stdout


def _interrupt(argv, cwd, sig, group):
    """Start ``argv``, wait for its two quick tasks' marks, send ``sig`` (to its process
    group: a terminal's Ctrl-C), return (exit status, output)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if (cwd / "started").exists():
                break
        time.sleep(1.5)  # the first tasks finished, the slow ones run
        assert proc.poll() is None, proc.communicate()[0]
        (os.killpg if group else os.kill)(proc.pid, sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


def _flow(tmp_path):
    flow = tmp_path / "slow.py"
    flow.write_text(SLOW.replace("def main(args):", "def main(args):\n"
                                 f"    open({str(tmp_path / 'started')!r}, 'w').close()"))
    return flow


def test_ctrl_c_on_the_local_executor_says_one_line(tmp_path):
    flow = _flow(tmp_path)
    code, out = _interrupt([sys.executable, "-m", "workflows", "run", str(flow), "--executor",
                            "local", "--workers", "2", "--out", str(tmp_path / "out")],
                           tmp_path, signal.SIGINT, group=True)
    assert code == 130, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    lines = [x for x in out.splitlines() if "interrupted" in x]
    assert len(lines) == 1, out
    assert "interrupted by SIGINT" in lines[0] and f"kept: {tmp_path / 'out'}" in lines[0]
    assert "2 of 4 launched tasks had finished" in lines[0], lines[0]


@needs_mpirun
def test_ctrl_c_under_mpirun_says_one_line(tmp_path):
    """mpirun turns Ctrl-C into SIGTERM for every rank (SIGKILL a second later)."""
    flow = _flow(tmp_path)
    code, out = _interrupt([MPIRUN, "-n", "3", "--oversubscribe", sys.executable, "-m",
                            "workflows", "run", str(flow), "--out", str(tmp_path / "out")],
                           tmp_path, signal.SIGINT, group=False)
    assert code != 0, out
    # the mpi executor's root reports the tasks in workers' hands below its line
    lines = [x for x in out.splitlines() if "terminated by SIGTERM" in x]
    assert len(lines) == 1, out
    assert "Ctrl-C" in lines[0] and f"kept: {tmp_path / 'out'}" in lines[0], lines[0]
    assert "Traceback" not in out, out


@needs_mpirun
def test_ctrl_c_under_mpirun_on_the_local_executor_says_one_line(tmp_path):
    flow = _flow(tmp_path)
    code, out = _interrupt([MPIRUN, "-n", "2", "--oversubscribe", sys.executable, "-m",
                            "workflows", "run", str(flow), "--executor", "local", "--workers",
                            "2", "--out", str(tmp_path / "out")],
                           tmp_path, signal.SIGINT, group=False)
    assert code != 0, out
    lines = [x for x in out.splitlines() if "workflows run slow.py: interrupted" in x]
    assert len(lines) == 1, out
    assert "interrupted by SIGTERM" in lines[0] and f"kept: {tmp_path / 'out'}" in lines[0]
    assert "Traceback" not in out, out
