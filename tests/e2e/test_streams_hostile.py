"""Streams no one else can write into, end to end: real ``mpirun``, real sockets.

Every test starts a receiving job (``mpirun -n 4``, 2 emulated nodes: a receiver
and a worker on each) with CURVE on by default, lets hostile peers at it (plain
ZeroMQ producers, producers with a key of their own, malformed and oversized
messages from an authorised one, a silent TCP connection, a spill directory that
fills up) beside the authorised producers of the scan, and checks the files the
job leaves: the scan exact, every hostile case refused and counted by reason.
"""
from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time

import h5py
import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job, _env, _scan

pytestmark = pytest.mark.timeout(300)


def _sums_exact(job, scan):
    """The job's per-frame sums equal the frames the authorised producers sent."""
    with h5py.File(job.out / f"{scan.geometry.scan}.h5") as f:
        s = f["sum_image"][()].ravel()
    want = np.array([scan.frame(i).astype(np.float64).sum() for i in range(scan.geometry.frames)])
    assert s.shape == want.shape and np.array_equal(s, want)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_producers_without_the_certificate_are_refused_and_the_scan_is_exact(tmp_path):
    import zmq.auth

    from streams.simulate import run_producers

    job = Job(tmp_path)
    rv = job.rendezvous()
    assert rv.curve and rv.client_certificate == str(job.rv) + ".client.key_secret"
    assert _mode(job.rv) == 0o600 and _mode(rv.client_certificate) == 0o600
    watch = subprocess.Popen([sys.executable, "-m", "stager", "stream", "watch", str(job.rv),
                              "--final", "--timeout", "120"], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # a viewer without the certificate connects to the live socket and sees nothing
    blind = subprocess.run([sys.executable, "-m", "stager", "stream", "watch", rv.live,
                            "--timeout", "3"], env=_env(), capture_output=True, text=True,
                           timeout=60)
    good = _scan()
    evil = _scan(source=lambda i: np.full((64, 64), 7, np.uint16))
    os.mkdir(tmp_path / "intruder")
    _, foreign = zmq.auth.create_certificates(str(tmp_path / "intruder"), "intruder")
    os.chmod(foreign, 0o600)
    hostile = [run_producers(evil, list(rv.receivers), wait=False, send_timeout=2.0, linger=0),
               run_producers(evil, rv, wait=False, certificate=foreign, send_timeout=2.0,
                             linger=0)]
    time.sleep(1.0)          # their connection attempts are refused while the scan runs
    run_producers(good, rv)
    rc, out, err = job.wait()
    for threads, _, _ in hostile:
        for t in threads:
            t.join(30)
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and rep["frames_complete"] == 64 and rep["ended_by"] == "end"
    m = rep["messages"]
    assert m["lost_in_transport"] == 0 and m["received_data"] == m["sent"] == 64 * 4
    assert not m["rejected"] and not m["rejected_unattributed"]
    refused = rep["connections_refused"]
    # The plain producer is refused as not_curve, or as handshake_aborted when it saw the
    # mechanism mismatch first and hung up before this end read its greeting (a race of
    # the two ends: under load every attempt can go that way; tests/unit/
    # test_streams_security.py waits for the not_curve classification itself).
    assert refused.get("not_curve", 0) + refused.get("handshake_aborted", 0) >= 1, refused
    assert refused.get("unauthorised_key", 0) >= 1, refused
    assert set(refused) <= {"not_curve", "unauthorised_key", "handshake_aborted"}, refused
    assert rep["security"]["mode"] == "curve" and rep["security"]["server_key"] == rv.server_key
    assert "refused" in out     # the summary line says so
    _sums_exact(job, good)
    wout, werr = watch.communicate(timeout=60)
    assert watch.returncode == 0, wout + werr
    final = [ln for ln in wout.splitlines() if "[final]" in ln]
    assert final and "64/64 complete" in final[-1], wout
    n = int(re.search(r"(\d+) connections refused", final[-1]).group(1))
    assert n == sum(refused.values())
    assert blind.returncode == 1 and "complete" not in blind.stdout, blind.stdout


def test_insecure_keeps_plain_sockets_and_says_so(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--insecure")
    rv = job.rendezvous()
    assert not rv.curve and rv.client_certificate is None and _mode(job.rv) == 0o600
    assert not list(tmp_path.glob("rv.json.client*"))
    good = _scan()
    # a plain producer (no CURVE keys) with the job's token (from the rendezvous)
    run_producers(good, list(rv.receivers), token=rv.token)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and rep["security"]["mode"] == "insecure"
    assert "not authenticated" in rep["security"]["warning"]
    assert "WARNING: --insecure" in err
    _sums_exact(job, good)


def _hostile_messages(g, f0, s0, token):
    """(name, parts, counted, reason, attributed to the scan) aimed at receiver 0; the
    begins carry the job's ``token`` (without it: test_streams_roles.py)."""
    import msgpack

    from streams.protocol import ScanGeometry
    from streams.protocols.native.headers import encode_begin, encode_data

    r0, r1 = g.sector_rows(s0)
    good = (r1 - r0) * g.shape[1] * g.itemsize
    data = b"\1" * good
    other = ScanGeometry(g.scan, g.producers, g.frames, g.sectors, (g.shape[1], g.shape[0] // 2),
                         g.dtype, g.scan_shape)
    huge = ScanGeometry("huge", 1, 10000, 1, (4096, 4096), "<u2", (100, 100))
    return [
        ("header_over_4096", [msgpack.packb({"kind": "data", "scan": g.scan, "frame": f0,
                                             "pad": "x" * 5000}), data],
         False, "malformed_header", False),
        ("not_a_map", [msgpack.packb([1, 2, 3]), b""], False, "malformed_header", False),
        ("begin_too_large", [encode_begin(huge, 0, token), b""], False, "too_large", False),
        ("payload_length", [encode_data(g.scan, f0, s0, (r0, r1)), data + b"\0"], True,
         "wrong_payload_size", True),
        ("frame_out_of_range", [encode_data(g.scan, g.frames, s0, (r0, r1)), data], True,
         "out_of_range", True),
        ("sector_out_of_range", [encode_data(g.scan, f0, g.sectors, (r0, r1)), data], True,
         "out_of_range", True),
        ("rows_out_of_range", [encode_data(g.scan, f0, s0, (r0, r0 + 1)), data], True,
         "out_of_range", True),
        ("second_begin_other_shape", [encode_begin(other, 0, token), b""], False, "conflict",
         True),
        ("unknown_scan", [encode_data("no-such-scan", f0, s0, (r0, r1)), data], False,
         "unknown_scan", False),
        ("name_with_slash", [msgpack.packb({"kind": "data", "scan": "a/../../b", "frame": 0,
                                            "sector": 0, "rows": [r0, r1],
                                            "encoding": "raw"}), data],
         False, "malformed_header", False),
        ("name_dotdot", [encode_data("..", f0, s0, (r0, r1)), data], False,
         "malformed_header", False),
        ("name_too_long", [encode_data("x" * 129, f0, s0, (r0, r1)), data], False,
         "malformed_header", False),
    ]


def test_hostile_messages_are_refused_counted_and_the_scan_stays_exact(tmp_path):
    """An authorised producer (0) sends, on its own socket to receiver 0, every malformed
    or hostile message of ``_hostile_messages`` -- before its data (so a rejected sector is then
    accepted when it arrives right), and a second, equal copy of one of its sectors
    after -- while a silent TCP connection sits on receiver 0. The scan is exact,
    each case counted under its reason, memory within --memory."""
    from streams.protocols.native.producer import Producer
    from streams.simulate import run_producer

    job = Job(tmp_path, "--memory", "16", "--handshake-timeout", "1")
    rv = job.rendezvous()
    scan = _scan()
    g = scan.geometry
    mine = [(f, s) for f, s in scan.sent_by(0) if f % 2 == 0]
    f0, s0 = mine[0]
    cases = _hostile_messages(g, f0, s0, rv.token)
    host, port = rv.receivers[0][len("tcp://"):].rsplit(":", 1)
    silent = socket.create_connection((host, int(port)))
    others = [threading.Thread(target=run_producer, args=(scan, rv, p)) for p in (1, 2, 3)]
    try:
        for t in others:
            t.start()
        with Producer(rv, 0) as p:
            p.begin(g)
            for _name, parts, counted, _, _ in cases:
                p.send_parts(0, parts)
                p.sent[g.scan][0] += counted
            for f, s in scan.sent_by(0):
                p.send_sector(g.scan, f, s, scan.frame(f))
            # the same sector again, the same content: a duplicate, the first copy kept
            # (other content: test_streams_roles.py)
            p.send_sector(g.scan, f0, s0, scan.frame(f0))
            time.sleep(2.0)     # the silent connection is dropped while the scan is open
            p.end(g.scan)
        for t in others:
            t.join(60)
        rc, out, err = job.wait()
    finally:
        silent.close()
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and rep["frames_complete"] == 64, rep
    m = rep["messages"]
    assert m["lost_in_transport"] == 0, m
    want_attr: dict = {"duplicate": 1}
    want_unattr: dict = {}
    for _, _, _, reason, attributed in cases:
        d = want_attr if attributed else want_unattr
        d[reason] = d.get(reason, 0) + 1
    assert m["rejected"] == dict(sorted(want_attr.items())), m
    assert m["rejected_unattributed"] == dict(sorted(want_unattr.items())), m
    ex = rep["rejection_examples"]
    assert any(e.startswith(f"duplicate: scan s1 frame {f0} sector {s0} arrived twice")
               for e in ex), ex
    assert any(e.startswith("(no scan of its own) too_large: begin for scan huge")
               for e in ex), ex
    assert rep["connections_refused"] == {"handshake_timeout": 1}
    assert rep["buffer_bytes"] <= 16 << 20
    _sums_exact(job, scan)


def test_a_full_spill_directory_stops_the_job_naming_node_and_frames(tmp_path):
    """ENOSPC on a real 1 MiB tmpfs: a clear error, exit non-zero, nothing silently dropped."""
    from streams.errors import StreamError
    from streams.simulate import run_producers

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        job = Job(tmp_path, "--spill", f"{small}/%n", "--partition-frames", "4")
        rv = job.rendezvous()
        try:      # 256 frames of 32 KiB: 8 MiB for a 1 MiB spill
            run_producers(_scan(scan_shape=(16, 16), shape=(128, 128)), rv, send_timeout=20.0,
                          linger=0)
        except StreamError:
            pass    # the job stopped while they were sending
        rc, out, err = job.wait()
        left = [p.name for p in small.rglob("*") if p.is_file() and ".tmp" in p.name]
        spilled = {p: _mode(p) for p in small.rglob("part-*.h5")}
        dirs = {p: _mode(p) for p in small.rglob("*") if p.is_dir() and ".stager" not in str(p)}
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
    assert rc != 0, out + err
    msg = re.search(r"spill on node (node[01]): no space left in (\S+) writing .*frames "
                    r"([0-9, -]+)\)", err)
    assert msg, err
    assert msg.group(2).startswith(str(small))
    assert "the job stops rather than drop spilled frames" in err.lower()
    assert not left, left        # no temporary file left behind
    # what was spilled before the disk filled: 0600 files in 0700 directories
    assert spilled and set(spilled.values()) == {0o600}, spilled
    assert dirs and set(dirs.values()) == {0o700}, dirs


def test_stream_v2_from_the_named_interface_and_allowed_address(tmp_path):
    """Stream V2 cannot use CURVE: the clients connect from --bind's address and ZAP
    admits only --allow-from; the series arrives whole, the report says so."""
    from streams.protocols.stream2.simulator import StreamV2Simulator
    from streams.simulate import synthetic_frame

    with StreamV2Simulator(send_timeout=30) as sim:
        job = Job(tmp_path, "--stream2", sim.endpoint, "--allow-from", "127.0.0.1",
                  "--partition-frames", "4", "--v2-grace", "1")
        info = job.started()
        assert info["curve_serverkey"] and _mode(job.rv) == 0o600   # the live socket's key
        time.sleep(1.0)     # every client connected: the detector deals round-robin
        sim.send_series(3, lambda i: synthetic_frame(i, (32, 32), (4, 8)), 32, (32, 32),
                        scan_shape=(4, 8), series_unique_id="u3")
        rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("series-3-u3")
    assert rep["ok"] and rep["frames_complete"] == 32 and not rep["connections_refused"]
    assert rep["security"]["allow_from"] == ["127.0.0.1"]
    bad = subprocess.run(["mpirun", "-n", "1", sys.executable, "-m", "stager", "stream",
                          "receive", "--rendezvous", str(tmp_path / "rv2.json"), "--out",
                          str(tmp_path / "out2"), "--allow-from", "127.0.0.1"],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--allow-from is for Stream V2" in bad.stderr, bad.stderr


def test_authorized_keys_admit_a_beamline_s_own_certificates(tmp_path):
    """--authorized-keys DIR: no client certificate is written; a producer with a key in
    DIR streams the scan exactly, the job's rendezvous names no certificate."""
    import zmq.auth

    from streams.simulate import run_producers

    keys, mine = tmp_path / "keys", tmp_path / "mine"
    keys.mkdir()
    mine.mkdir()
    pub, secret = zmq.auth.create_certificates(str(mine), "receiver-server-1")
    os.chmod(secret, 0o600)
    os.rename(pub, keys / "receiver-server-1.key")
    job = Job(tmp_path, "--authorized-keys", str(keys))
    rv = job.rendezvous()
    assert rv.curve and rv.client_certificate is None
    assert not list(tmp_path.glob("rv.json.client*"))
    good = _scan()
    run_producers(good, rv, certificate=secret)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and not rep["connections_refused"]
    assert rep["security"]["authorized_keys"] == str(keys) and rep["security"]["authorized"] == 1
    _sums_exact(job, good)
