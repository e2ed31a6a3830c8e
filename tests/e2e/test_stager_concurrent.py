"""Two stager runs at once on one destination, under real ``mpirun``.

One run at a time per destination root: the second run fails at once naming the
holder (user, host, pid, start time), or with ``--wait`` waits and then finds every
copy current; either way the copies are correct and ``clean`` is complete. A lock
left by a run that died is taken over, and the report says from whom.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from tests.stagerun import Job, journal_lines, run, stager_lines, wait_for

# slow: each test stages 150 files slowly (SLOW) while a second run meets the lock: a
# minute of wall each at load 10, 28 s of CPU for the file
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")]

SLOW = ["--emulate-nodes", "2", "--chunk-size", "1K", "--small-file-threshold", "512",
        "--no-progress"]
#: The runs after the one that holds the lock: the copies made at the default chunk size
#: (the 1 KiB chunks only keep the first run busy; the later ones find the copies current
#: or make them after taking the lock over)
QUICK = ["--emulate-nodes", "2", "--no-progress"]


@pytest.fixture
def data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(150):
        (src / f"f{i:03d}.bin").write_bytes(os.urandom(128 << 10))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {src}/*.bin\n}}\n")
    return tmp_path, spec


def _all_copies_correct(tmp: Path) -> None:
    for node in ("node0", "node1"):
        for p in (tmp / "src").iterdir():
            assert (tmp / "out" / node / p.name).read_bytes() == p.read_bytes(), (node, p)


def test_second_run_fails_naming_the_holder_or_waits(data):
    tmp, spec = data
    first = Job(tmp, 2, ["stage", str(spec), *SLOW])
    wait_for(lambda: journal_lines(tmp / "out" / "node0") >= 1 or first.proc.poll() is not None,
             what="the first run's copies")
    assert first.proc.poll() is None, "the first run ended too early"
    pid0 = first.rank_pids()[0]
    second = run(tmp, 2, "stage", str(spec), *SLOW)
    assert second.returncode == 1, second.stdout + second.stderr
    (line,) = stager_lines(second.stderr)
    assert "is in use by another stager run" in line, line
    assert f"on host {socket.gethostname()}, pid {pid0}, since " in line, line
    assert "--wait" in line, line
    waiting = run(tmp, 2, "stage", str(spec), *QUICK, "--wait", "--json", str(tmp / "w.json"))
    r = first.wait(120)
    assert r.returncode == 0, r.stderr
    assert waiting.returncode == 0, waiting.stderr
    rep = json.loads((tmp / "w.json").read_text())
    assert rep["files_transferred"] == 0 and rep["files_skipped"] == 150, rep
    _all_copies_correct(tmp)
    r = run(tmp, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert not (tmp / "out").exists()


def test_lock_of_a_killed_run_is_taken_over(data):
    tmp, spec = data
    first = Job(tmp, 2, ["stage", str(spec), *SLOW])
    wait_for(lambda: journal_lines(tmp / "out" / "node0") >= 1, what="the first run's copies")
    pids = first.rank_pids()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)  # no clean-up at all: the holder files stay
    first.wait(60)
    assert (tmp / "out" / "node0" / ".stager" / "holder").exists()
    r = run(tmp, 2, "stage", str(spec), *QUICK, "--json", str(tmp / "r.json"))
    assert r.returncode == 0, r.stderr
    taken = json.loads((tmp / "r.json").read_text())["extra"]["records"]["locks_taken_over"]
    assert len(taken) == 2 and all(f"pid {p}" in " ".join(taken) for p in pids), taken
    _all_copies_correct(tmp)
    r = run(tmp, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0 and not (tmp / "out").exists(), r.stderr
