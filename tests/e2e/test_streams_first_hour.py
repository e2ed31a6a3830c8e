"""A receiving job as a newcomer meets it (issue 41): partial results with the default
partitions, no silent waits (a wrong scan shape, a wrong certificate), ``--then``
checked at the start, one line on Ctrl-C, nothing left behind at a clean end. Real
``mpirun`` jobs (2 emulated nodes), real sockets."""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job, _env, _scan
from tests.stagerun import wait_for

pytestmark = pytest.mark.timeout(400)


def test_the_tour_scan_gives_growing_partials_with_the_default_partitions(tmp_path):
    """README step 5's scan (16 x 16 frames of 64 x 64, stem4d.flow), no
    ``--partition-frames``: the live images grow while it runs, not only at its end."""
    from streams.simulate import run_producers
    from streams.view import attach

    job = Job(tmp_path, "--analysis", "stem4d.flow", "--scans", "2")
    rv = job.rendezvous()
    # a first small scan: every worker compiles its kernels (seconds under load) before
    # the tour's scan, whose partials are what this test counts
    run_producers(_scan("warm-up", scan_shape=(4, 4), shape=(64, 64)), rv)
    wait_for(lambda: (job.out / "warm-up.h5").exists(), 120, "the first scan's result")
    view = attach(str(job.rv), str(job.out))
    try:
        view.wait_connected()
        scan = _scan("sim-0001", scan_shape=(16, 16), shape=(64, 64), rate=60.0)   # ~4 s
        feed = threading.Thread(target=run_producers, args=(scan, rv))
        feed.start()
        parts = list(view.partials("sim-0001", timeout=200))
        feed.join(60)
    finally:
        view.close()
    rc, out, err = job.wait()
    assert rc == 0, out + err
    sums = [float(p.images["sum_image"].sum()) for p in parts]
    growing = [s for a, s in zip(sums, sums[1:]) if s > a]
    assert len(growing) >= 5, sums        # five partials, each with more than the last
    assert sums[0] < sums[-1] and parts[-1].final and parts[-1].complete == 256
    assert all(b >= a for a, b in zip(sums, sums[1:])), sums


def test_a_wrong_dectris_scan_shape_ends_the_job_at_arming(tmp_path):
    """The detector takes 16 images, the job was told 8 x 8: refused at the series'
    start, and the job ends saying why instead of waiting in silence."""
    from streams.protocols.dectris_legacy.simulator import LegacySimulator

    shape = (32, 32)
    with LegacySimulator() as sim:
        job = Job(tmp_path, "--protocol", "dectris-legacy", "--dectris-endpoint", sim.endpoint,
                  "--dectris-scan-shape", "8,8")
        job.started()
        time.sleep(1.5)     # both receivers connected: the simulator deals round-robin
        sim.send_series(1, lambda i: np.full(shape, i, "<u2"), 16, shape)
        rc, out, err = job.wait(timeout=30)
    assert rc == 1, out + err
    last = err.split("-" * 20)[0].strip().splitlines()[-1]
    assert "refused at its arming" in last, err
    assert "scan shape (8, 8) holds 64 images, the detector takes 16" in last, err
    rej = json.loads((job.out / "rejections.json").read_text())
    assert rej["by_reason"].get("scan_shape", 0) >= 1, rej


def test_a_producer_with_a_wrong_certificate_stops_with_the_cause(tmp_path):
    import zmq.auth

    job = Job(tmp_path)
    job.rendezvous()
    os.mkdir(tmp_path / "other")
    _, foreign = zmq.auth.create_certificates(str(tmp_path / "other"), "intruder")
    os.chmod(foreign, 0o600)
    try:
        r = subprocess.run([sys.executable, "-m", "streams.simulate", "--rendezvous",
                            str(job.rv), "--scan-shape", "4", "4", "--shape", "32", "32",
                            "--scan", "s1", "--certificate", foreign], env=_env(),
                           capture_output=True, text=True, timeout=30)
    finally:
        job.p.send_signal(signal.SIGINT)
        job.wait()
    assert r.returncode == 1, r.stdout + r.stderr
    assert "refused this producer's CURVE certificate" in r.stderr, r.stderr
    assert foreign in r.stderr


def test_a_then_command_that_cannot_run_is_refused_before_any_data(tmp_path):
    job = Job(tmp_path, "--then", "no-such-indexer-41 {h5}")
    rc, out, err = job.wait(timeout=60)
    assert rc == 2, out + err
    assert "'no-such-indexer-41' is not found on PATH" in err, err
    assert not job.rv.exists()


def test_interrupted_says_one_line_and_a_clean_end_leaves_nothing_behind(tmp_path):
    """Ctrl-C: one line naming the open scan and where its report is. A job that ends
    cleanly removes its certificates and its default node-local directory."""
    from streams.simulate import run_producers

    # the default node-local directory is /tmp/mpistage-stream-UID-XXXXXXXX/%n (mkdtemp);
    # one of that form here, so that other jobs in /tmp cannot confuse the test
    local = tmp_path / f"mpistage-stream-{os.getuid()}-test"
    job = Job(tmp_path, "--local", str(local / "%n"))
    rv = job.rendezvous()
    certs = [rv.client_certificate, rv.viewer_certificate]
    assert all(os.path.exists(c) for c in certs) and (local / "node0").is_dir()
    run_producers(_scan(), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    left = [p for p in glob.glob(str(job.rv) + "*")]
    assert left == [], left
    assert not local.exists()

    again = Job(tmp_path, "--local", "")       # the default node-local directory
    rv = again.rendezvous()
    feed = threading.Thread(target=run_producers, args=(_scan("s2", rate=10.0), rv),
                            kwargs={"send_timeout": 30.0, "linger": 0})
    feed.start()
    wait_for(lambda: (again.out / "s2.receiving").exists(), 60, "the scan to begin")
    time.sleep(1.0)
    os.kill(again.p.pid, signal.SIGINT)          # Ctrl-C on mpirun
    rc, out, err = again.wait()
    feed.join(60)
    assert rc != 0
    lines = [x for x in err.splitlines() if "interrupted by" in x]
    assert len(lines) == 1, err
    assert "scan s2 was open" in lines[0] and str(again.out / "s2.json") in lines[0], err
    rep = json.loads((again.out / "s2.json").read_text())
    assert rep["terminated"] and rep["signal"] in ("SIGINT", "SIGTERM")
    assert glob.glob(str(again.rv) + "*") == []


def test_a_scan_waiting_for_a_receiver_to_close_it_says_so(tmp_path):
    """Receiver 1 never gets the scan's end: the job says, after 5 s, that it waits for
    that receiver and how long (--close-wait), then ends the scan when that has passed."""
    from streams import ScanGeometry
    from streams.protocols.native.headers import encode_end
    from streams.protocols.native.producer import Producer

    job = Job(tmp_path, "--idle-timeout", "60", "--close-wait", "8")
    rv = job.rendezvous()
    g = ScanGeometry("s1", 1, 4, 1, (8, 8), "<u2", (2, 2))
    with Producer(rv, 0) as p:
        p.begin(g)
        for f in range(4):
            p.send_sector("s1", f, 0, np.full((8, 8), f, np.uint16))
        p.send_parts(0, [encode_end("s1", 0, p.sent["s1"][0]), b""])   # to receiver 0 only
    rc, out, err = job.wait(timeout=120)
    assert "scan s1: receiver(s) 1 have not closed it; waiting up to 8 s" in err, err
    assert job.report("s1")["frames_complete"] == 4, out + err
