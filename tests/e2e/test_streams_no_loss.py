"""A receiving job never loses a scan it received (issue 41): a repeated scan name, a
drain that fails after the acquisition. Real ``mpirun`` jobs (2 emulated nodes), real
sockets, the detector simulator."""
from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from tests.e2e.test_streams_receive import Job, _env, _scan
from tests.stagerun import wait_for

pytestmark = pytest.mark.timeout(400)


def test_a_repeated_scan_name_is_received_under_a_new_name_and_both_runs_kept(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--analysis", "stem4d.flow")
    run_producers(_scan(), job.rendezvous())
    rc, out, err = job.wait()
    assert rc == 0, out + err
    names = ("s1.h5", "s1.json", "s1.live.h5", "s1.live.png")
    first = {n: (job.out / n).read_bytes() for n in names}

    again = Job(tmp_path, "--analysis", "stem4d.flow")       # the same --out, the same name
    run_producers(_scan(), again.rendezvous())
    rc, out, err = again.wait()
    assert rc == 0, out + err
    assert "scan s1 is written as s1.2" in err, err
    assert "(written as s1.2)" in out and "s1.2.h5" in out, out
    assert {n: (job.out / n).read_bytes() for n in names} == first   # the first run intact
    rep = json.loads((job.out / "s1.2.json").read_text())
    assert rep["served"] and rep["name"] == "s1.2" and rep["scan_as_sent"] == "s1"
    assert rep["frames_complete"] == 64
    for n in ("s1.2.h5", "s1.2.live.h5", "s1.2.live.png"):
        assert (job.out / n).is_file(), n

    # with --overwrite the scan keeps its name and replaces the first run's files
    third = Job(tmp_path, "--analysis", "stem4d.flow", "--overwrite")
    run_producers(_scan(), third.rendezvous())
    rc, out, err = third.wait()
    assert rc == 0, out + err
    assert "written as" not in out + err
    assert (job.out / "s1.json").read_bytes() != first["s1.json"]
    assert not (job.out / "s1.3.json").exists()


def test_a_drain_that_fails_after_the_scan_keeps_the_results_and_exits_1(tmp_path):
    """Something else takes the scan's file name in OUT while the scan runs: the drain
    refuses it, the results go to a new directory of OUT named on the last line, the job
    exits 1 without MPI_ABORT, and ``watch --final`` says the end failed."""
    from streams.simulate import run_producers

    job = Job(tmp_path, "--analysis", "stem4d.flow")
    rv = job.rendezvous()
    werr = tmp_path / "watch.err"
    with open(werr, "w") as fd:
        w = subprocess.Popen([sys.executable, "-m", "stager", "stream", "watch", str(job.rv),
                              "--final", "--timeout", "200"], env=_env(),
                             stdout=subprocess.PIPE, stderr=fd, text=True)
    wait_for(lambda: "watching" in werr.read_text() or w.poll() is not None, 120,
             "the watcher to connect")
    feed = threading.Thread(target=run_producers, args=(_scan(rate=16.0), rv))   # ~4 s
    feed.start()
    # the job settles the scan's output name at its begin, before the result exists
    wait_for(lambda: (job.out / "s1.receiving").exists(), 60, "the scan's name to be taken")
    assert json.loads((job.out / "s1.receiving").read_text())["state"] == "receiving"
    assert not (job.out / "s1.json").exists()   # the report's file means the scan ended
    (job.out / "s1.h5").write_bytes(b"a file of the user's, not mpistage's")
    feed.join(120)
    rc, out, err = job.wait()
    wout, _ = w.communicate(timeout=120)
    assert rc == 1, out + err
    assert "MPI_ABORT" not in out + err, err
    # the job's last line (mpirun adds its banner about the exit status below it)
    last = err.split("-" * 20)[0].strip().splitlines()[-1]
    assert "scan s1: not drained" in last and "its results are kept in" in last, err
    kept = [p for p in job.out.iterdir() if p.name.startswith("s1.undrained-")]
    assert len(kept) == 1 and str(kept[0]) in last
    assert json.loads((kept[0] / "s1.json").read_text())["frames_complete"] == 64
    assert (kept[0] / "s1.h5").read_bytes()[:4] == b"\x89HDF"
    assert (job.out / "s1.h5").read_bytes() == b"a file of the user's, not mpistage's"
    assert w.returncode == 1, wout + werr.read_text()
    assert "[final, FAILED: scan s1: not drained" in wout, wout
