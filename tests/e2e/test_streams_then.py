"""``stager stream receive --then`` in a real receiving job: the first scan's command is
still running when the job serves the second (it waits for the second scan's file, and
gives up after a minute: had the job waited for it before serving on, it would fail); a
command that fails makes the job exit 1, naming the scan; each logs beside its scan."""
from __future__ import annotations

import shlex
import shutil
import sys

import pytest

from tests.e2e.test_streams_receive import Job, _scan

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")

COMMAND = """
import os, sys, time
h5, scan, out = sys.argv[1:]
if scan == "t1":    # runs on while the job serves t2
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "t2.h5")) and time.monotonic() < end:
        time.sleep(0.1)
    print("t1 saw t2:", os.path.exists(os.path.join(out, "t2.h5")), "h5:", os.path.exists(h5))
    sys.exit(0 if os.path.exists(os.path.join(out, "t2.h5")) else 1)
sys.exit(3)
"""


def test_the_job_serves_the_next_scan_while_a_command_runs(tmp_path):
    from streams.simulate import run_producers

    then = f"{shlex.quote(sys.executable)} -c {shlex.quote(COMMAND)} {{h5}} {{scan}} {{out}}"
    job = Job(tmp_path, "--scans", "2", "--then", then)
    rv = job.rendezvous()
    run_producers(_scan("t1"), rv)
    run_producers(_scan("t2"), rv)
    rc, out, err = job.wait(timeout=240)
    assert job.report("t1")["ok"] and job.report("t2")["ok"], out + err
    assert "t1 saw t2: True h5: True" in (job.out / "t1.then.log").read_text()
    assert "scan t1: --then exited 0" in err, err
    assert "scan t2: --then exited 3" in err, err
    assert rc == 1, out + err         # both scans served, one command failed
