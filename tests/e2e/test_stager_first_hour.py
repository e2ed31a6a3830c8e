"""``stager`` as a newcomer meets it (issue 41): an unknown option prints the
subcommand's usage, and Ctrl-C ends every command with one line (what was interrupted,
what is kept, how to go on) -- under a real ``mpirun`` for the MPI commands."""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.stagerun import Job, run, stager_lines


@pytest.mark.parametrize("argv,usage", [
    (["stage", "x.hook", "--bogus"], "usage: stager stage "),
    (["stream", "view", "rv.json", "--bogus"], "usage: stager stream view "),
    (["stream", "receive", "--rendezvous", "r", "--out", "o", "--bogus"],
     "usage: stager stream receive "),
])
def test_unknown_option_prints_the_subcommands_usage(tmp_path, argv, usage):
    r = subprocess.run([sys.executable, "-m", "stager", *argv], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith(usage), r.stderr
    assert "unrecognized arguments: --bogus" in r.stderr


def test_ctrl_c_in_watch_says_one_line(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "stager", "stream", "watch",
                          str(tmp_path / "rv.json"), "--wait", "60"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == [
        "stager stream watch: interrupted by SIGINT; nothing was being written"], err


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_ctrl_c_in_verify_under_mpirun_says_one_line(tmp_path):
    """``stager verify --wait`` waiting for another run's lock, interrupted."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(4096))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {src}/*.bin\n}}\n")
    r = run(tmp_path, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    fd = os.open(tmp_path / "out" / "node0" / ".stager" / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)          # another run holds node0's lock
    try:
        job = Job(tmp_path, 2, ["verify", str(spec), "--emulate-nodes", "2", "--wait", "60"])
        job.rank_pids()
        time.sleep(2.5)
        job.signal_mpirun(signal.SIGINT)
        res = job.wait(60)
    finally:
        os.close(fd)
    lines = stager_lines(res.stderr, "stager verify: interrupted")
    assert len(lines) == 1, res.stdout + res.stderr
    assert "verify changes nothing" in lines[0] and "run the same command again" in lines[0]
    assert "Traceback" not in res.stderr


def test_receive_help_lists_every_protocol_of_the_table():
    # the table as a fresh process has it (this worker's may hold a test's plug-in row,
    # tests/toyprotocol.py's "lines", which `stager stream receive` does not know)
    ROWS = subprocess.run([sys.executable, "-c", "from streams.protocols import ROWS; "
                           "print(*ROWS)"], capture_output=True, text=True, timeout=60,
                          check=True).stdout.split()
    r = subprocess.run([sys.executable, "-m", "stager", "stream", "receive", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    start = text.index("--protocol NAME the stream protocol:")
    assert all(name in text[start:start + 200] for name in ROWS), text[start:start + 200]
    assert {"dectris-legacy", "merlin"} <= set(ROWS)


def test_ctrl_c_in_the_simulator_says_one_line(tmp_path):
    """Waiting for a receiver on a Merlin data port, interrupted."""
    p = subprocess.Popen([sys.executable, "-m", "streams.simulate", "--protocol", "merlin",
                          "--bind", "127.0.0.1:0"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("Merlin data port on 127.0.0.1:")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert err.strip().splitlines() == ["python -m streams.simulate: interrupted by SIGINT; "
                                        "what was sent is the job's (its report counts the "
                                        "rest missing)"], err
