"""The receiving job's own files, trusted like staging roots: a second user on the node.

Real ``mpirun -n 2`` receiving jobs on loopback, and another user (``nobody``, through
``setpriv``) who prepares what the job will use before or while it runs: the
node-local directory, the ``--authorized-keys`` directory, the rendezvous file. Each
case ends with the legitimate scan exact or a refusal naming its cause, never a
hang, never exit 0 with someone else's frames; a finished job leaves no rendezvous
that a later producer or viewer could take for a running one, and what a job
refused while no scan was open is in its last line and ``rejections.json``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.e2e.test_streams_receive import _env

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun"),
]

needs_second_user = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="acting as a second user (nobody) needs root and setpriv")
NOBODY = 65534


def as_nobody(code: str, *args: str, wait: bool = True):
    """Run Python ``code`` as user ``nobody`` (no groups), from a directory it may read."""
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
           sys.executable, "-c", code, *args]
    if not wait:
        return subprocess.Popen(cmd, env=_env(), cwd="/", stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    r = subprocess.run(cmd, env=_env(), cwd="/", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def base():
    """A directory both users reach (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="mpistage-trust-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Receive:
    """``mpirun -n 2 stager stream receive`` (one emulated node: a receiver, a worker)."""

    def __init__(self, tmp: Path, *args: str, rv: Path = None, out: Path = None):
        self.rv, self.out = rv or tmp / "rv.json", out or tmp / "out"
        cmd = ["mpirun", "--mca", "odls_base_sigkill_timeout", "5", "-n", "2",
               "--oversubscribe", sys.executable, "-m", "stager", "stream", "receive",
               "--rendezvous", str(self.rv), "--out", str(self.out), "--emulate-nodes", "1",
               "--bind", "127.0.0.1", "--live-interval", "0.2", "--idle-timeout", "10", *args]
        self.p = subprocess.Popen(cmd, cwd=tmp, env=_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)

    def started(self, timeout: float = 60.0) -> dict:
        """The rendezvous file, once the job wrote it (its JSON)."""
        end = time.monotonic() + timeout
        while True:
            try:
                if self.rv.stat().st_uid == os.getuid():     # not one planted by another
                    return json.loads(self.rv.read_text())
            except (OSError, ValueError):
                pass
            if time.monotonic() > end or self.p.poll() is not None:
                self.p.kill()
                raise AssertionError(f"no rendezvous: {self.p.communicate()}")
            time.sleep(0.1)

    def wait(self, timeout: float = 120.0):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            raise AssertionError(f"the job hung: {out}\n{err}") from None
        return self.p.returncode, out, err


def _simulate(rv: Path, *args: str, wait: bool = True, timeout: float = 120):
    cmd = [sys.executable, "-m", "streams.simulate", "--rendezvous", str(rv), "--producers",
           "2", "--sectors", "2", "--scan-shape", "8", "8", "--shape", "64", "64",
           "--scan", "s1", *args]
    if not wait:
        return subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _sums_exact(out: Path, scan: str = "s1") -> None:
    """The job's per-frame sums equal the simulator's frames (8x8 of 64x64)."""
    from streams.simulate import synthetic_frame

    with h5py.File(out / f"{scan}.h5") as f:
        s = f["sum_image"][()].ravel()
        assert f["frames_complete"][()].all()
    want = [synthetic_frame(i, (64, 64), (8, 8), "<u2").astype(np.float64).sum()
            for i in range(64)]
    assert np.array_equal(s, want)


PLANT_LOCAL = r"""
import os, sys
d = sys.argv[1]
for sub in ("", "node0", "node0/s1"):
    os.makedirs(os.path.join(d, sub), exist_ok=True)
    os.chmod(os.path.join(d, sub), 0o777)
with open(os.path.join(d, "node0", "s1", "forged.txt"), "w") as f:
    f.write("not the scan's\n")
"""


@needs_second_user
def test_another_user_cannot_put_files_into_the_scan_output(base):
    """Case 1. The default node-local directory is not predictable from the pid any
    more: the directory another user makes there (0777, a file in it) is not used and
    nothing of it reaches OUT; a --local directory of another user is refused by name."""
    (base / "job1").mkdir()
    job = Receive(base / "job1")
    d = job.started()
    ranks = subprocess.run(["pgrep", "-P", str(job.p.pid)], capture_output=True,
                           text=True).stdout.split()
    # the old default, /tmp/mpistage-stream-UID-PID of rank 0: planted for every rank
    planted = [Path(f"/tmp/mpistage-stream-{os.getuid()}-{pid}")
               for pid in {*ranks, str(d.get("pid"))}]
    for p in planted:
        as_nobody(PLANT_LOCAL, str(p))
    try:
        r = _simulate(job.rv)
        assert r.returncode == 0, r.stdout + r.stderr
        rc, out, err = job.wait()
        assert rc == 0, out + err
        assert not (job.out / "forged.txt").exists(), sorted(os.listdir(job.out))
        assert all((p / "node0" / "s1" / "forged.txt").exists() for p in planted)  # untouched
        _sums_exact(job.out)
    finally:
        for p in planted:
            shutil.rmtree(p, ignore_errors=True)

    # --local naming a directory another user made: refused before anything is bound
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)     # like /tmp
    theirs = shared / "theirs"
    as_nobody(PLANT_LOCAL, str(theirs))
    (base / "job2").mkdir()
    job = Receive(base / "job2", "--local", f"{theirs}/%n")
    rc, out, err = job.wait()
    assert rc == 1, out + err
    assert f"{theirs}" in err and "owned by uid 65534" in err, err
    assert not job.rv.exists() and not (job.out / "forged.txt").exists()


ADD_KEY = r"""
import sys, zmq.auth
zmq.auth.create_certificates(sys.argv[1], "nobody")
"""


@needs_second_user
def test_an_authorized_keys_directory_others_can_write_is_refused(base):
    """Case 2. ``nobody`` adds its own certificate to a 0777 --authorized-keys
    directory: the job refuses the directory (exit 2, naming it) before it binds; a
    key file of another user in a directory of one's own is refused the same way."""
    import zmq.auth

    keys = base / "keys"
    keys.mkdir()
    zmq.auth.create_certificates(str(keys), "beamline")
    os.chmod(keys, 0o777)
    as_nobody(ADD_KEY, str(keys))
    assert (keys / "nobody.key").stat().st_uid == NOBODY
    (base / "j").mkdir()
    job = Receive(base / "j", "--authorized-keys", str(keys))
    rc, out, err = job.wait()
    assert rc == 2, out + err
    assert str(keys) in err and "writable by" in err, err
    assert not job.rv.exists()

    os.chmod(keys, 0o755)      # the directory is the user's again; nobody's key still in it
    job = Receive(base / "j", "--authorized-keys", str(keys))
    rc, out, err = job.wait()
    assert rc == 2, out + err
    assert str(keys / "nobody.key") in err and "owned by uid 65534" in err, err


LISTEN = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.PULL)
port = s.bind_to_random_port("tcp://127.0.0.1")
with open(sys.argv[1], "w") as f:
    f.write('{"protocol": "mpistage-stream/1", "receivers": ["tcp://127.0.0.1:%d"], '
            '"live": "tcp://127.0.0.1:%d", "curve_serverkey": null, '
            '"client_certificate": null}' % (port, port))
print("listening", flush=True)
n = 0
while s.poll(int(float(sys.argv[2]) * 1000)):
    s.recv_multipart()
    n += 1
print("got", n, flush=True)
"""


@needs_second_user
def test_producers_and_viewers_refuse_a_planted_rendezvous(base):
    """Case 3. In a shared sticky directory (like /tmp) ``nobody`` plants the
    rendezvous file a producer will look for: 0644, no CURVE key, its own socket. The
    simulator and ``watch`` refuse it naming the owner, and send nothing; a keyless
    file of one's own (an --insecure job) is refused without --insecure. The real
    job then writes its file there: the producer warns about the directory and the
    scan arrives exact."""
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    rv = shared / "rv.json"
    thief = as_nobody(LISTEN, str(rv), "8", wait=False)
    assert thief.stdout.readline().strip() == "listening"
    assert rv.stat().st_uid == NOBODY
    r = _simulate(rv, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"rendezvous file {rv}" in r.stderr and "owned by uid 65534" in r.stderr, r.stderr
    w = subprocess.run([sys.executable, "-m", "stager", "stream", "watch", str(rv),
                        "--timeout", "5"], env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert w.returncode == 2 and "owned by uid 65534" in w.stderr, w.stderr
    # the same keyless content as one's own file: plain text only when asked for
    mine = base / "mine"
    mine.mkdir()
    (mine / "rv.json").write_text(rv.read_text())
    os.chmod(mine / "rv.json", 0o600)
    r = _simulate(mine / "rv.json", timeout=60)
    assert r.returncode == 1 and "names no CURVE server key" in r.stderr, r.stderr
    got, terr = thief.communicate(timeout=60)
    assert "got 0" in got, got + terr          # nothing ever reached the other user

    job = Receive(base, rv=rv)                   # replaces the planted file (sticky: root)
    d = job.started()
    assert d["curve_serverkey"] and rv.stat().st_uid == os.getuid()
    r = _simulate(rv)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RendezvousWarning" in r.stderr and "sticky" in r.stderr, r.stderr
    rc, out, err = job.wait()
    assert rc == 0, out + err
    _sums_exact(job.out)


def test_refusals_while_no_scan_is_open_are_reported(tmp_path):
    """Case 8. A Stream V2 detector outside --allow-from, a plain and a foreign-key
    viewer on the live socket, no scan ever opens: the job ends at its --timeout,
    exit 1, its last line says what was refused and from where, and
    ``rejections.json`` counts every refusal."""
    import zmq
    import zmq.auth

    from streams.protocols.stream2.simulator import StreamV2Simulator

    with StreamV2Simulator(send_timeout=30) as sim:
        job = Receive(tmp_path, "--stream2", sim.endpoint, "--allow-from", "10.9.9.9",
                      "--timeout", "6")
        d = job.started()
        ctx = zmq.Context()
        plain = ctx.socket(zmq.SUB)
        plain.connect(d["live"])
        other = ctx.socket(zmq.SUB)
        pub, sec = zmq.auth.create_certificates(str(tmp_path), "stranger")
        other.curve_serverkey = d["curve_serverkey"].encode()
        other.curve_publickey, other.curve_secretkey = zmq.auth.load_certificate(sec)
        other.connect(d["live"])
        try:
            rc, out, err = job.wait()
        finally:
            plain.close(0)
            other.close(0)
            ctx.term()
    assert rc == 1, out + err
    last = [ln for ln in err.splitlines() if ln.startswith("stager")][-1]   # mpirun's after
    assert last.startswith("stager stream receive: nothing served: ") and \
        "connections from 127.0.0.1 refused by --allow-from" in last, err
    assert "live viewers:" in last and "(key not authorised)" in last, last
    rej = json.loads((job.out / "rejections.json").read_text())
    n = rej["connections_refused"]["address_not_allowed"]
    outside = rej["connections_refused_while_no_scan_open"]
    assert n >= 1 and outside["address_not_allowed"] == n, rej     # no scan ever opened
    assert set(outside) <= {"address_not_allowed", "handshake_aborted"}, rej
    assert f"{n} connection" in last
    live = rej["live_viewers_refused"]
    assert live.get("unauthorised_key", 0) >= 1, live
    # the plain viewer fails the handshake (or hangs up first, a race of the two ends)
    assert live.get("not_curve", 0) + live.get("handshake_aborted", 0) >= 1, live


WRITE_STALE = ("import sys, zmq; from streams.protocols.native.rendezvous import "
               "write_rendezvous; write_rendezvous(sys.argv[1], ['tcp://127.0.0.1:9'], "
               "'tcp://127.0.0.1:9', zmq.curve_keypair()[0].decode(), "
               "'/nonexistent.key_secret')")


def test_a_finished_job_leaves_no_rendezvous_and_the_next_one_is_found(tmp_path):
    """Case 9. A rendezvous file of a job that has ended (its rank 0 gone) is refused by
    the simulator and by ``watch``, naming the job; with ``--wait`` both wait for the
    next job's, ``watch`` from before that job wrote it. The scan is exact, the job
    removes its file when it ends, and ``watch`` (no --final) exits then. A job ended
    by SIGTERM removes its file too."""
    rv = tmp_path / "rv.json"
    subprocess.run([sys.executable, "-c", WRITE_STALE, str(rv)], env=_env(), check=True)
    r = _simulate(rv, timeout=60)
    assert r.returncode == 1 and "has ended" in r.stderr, r.stdout + r.stderr
    w = subprocess.run([sys.executable, "-m", "stager", "stream", "watch", str(rv),
                        "--timeout", "5"], env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert w.returncode == 2 and "has ended" in w.stderr, w.stderr
    rv.unlink()

    watch = subprocess.Popen([sys.executable, "-m", "stager", "stream", "watch", str(rv),
                              "--wait", "60", "--timeout", "120"], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert watch.poll() is None          # waiting for the file, not failed at once
    subprocess.run([sys.executable, "-c", WRITE_STALE, str(tmp_path / "old.json")],
                   env=_env(), check=True)
    os.rename(tmp_path / "old.json", rv)      # appears whole, its writer already gone
    sim = _simulate(rv, "--wait", "60", "--rate", "32", wait=False)   # 2 s: watch sees it
    time.sleep(1.0)
    assert sim.poll() is None            # an ended job's file: waiting for a new one
    job = Receive(tmp_path)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    sout, serr = sim.communicate(timeout=60)
    assert sim.returncode == 0, sout + serr
    _sums_exact(job.out)
    assert not rv.exists(), "the rendezvous file outlived its job"
    wout, werr = watch.communicate(timeout=30)
    assert watch.returncode == 0, wout + werr
    assert "the job ended" in werr and "64/64 complete" in wout, wout + werr

    job = Receive(tmp_path)
    job.started()
    job.p.send_signal(signal.SIGTERM)
    rc, out, err = job.wait(60)
    assert rc != 0 and not rv.exists(), (rc, out, err)
