"""The rendezvous file: atomic write, strict read, waiting for it, stale files."""
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from streams.errors import RendezvousError
from streams.protocols.native.rendezvous import (Rendezvous, RendezvousEnded, RendezvousWarning,
                                                 read_rendezvous, remove_rendezvous,
                                                 wait_for_rendezvous, write_rendezvous)


def psutil_like_start():
    """This process's start time from ``ps`` (independent of the module's /proc reading)."""
    out = subprocess.run(["ps", "-o", "etimes=", "-p", str(os.getpid())], capture_output=True,
                         text=True).stdout
    return time.time() - int(out)

EPS = ["tcp://node1:40001", "tcp://node2:40002"]


def test_write_read_round_trip(tmp_path):
    p = tmp_path / "rv.json"
    rv = write_rendezvous(p, EPS, "tcp://node1:40100")
    d = json.loads(p.read_text())
    assert d == {"protocol": "mpistage-stream/1", "receivers": EPS,
                 "live": "tcp://node1:40100", "curve_serverkey": None,
                 "client_certificate": None, "viewer_certificate": None,
                 "token": None, "host": socket.gethostname(), "pid": os.getpid(),
                 "started": d["started"]}
    assert abs(d["started"] - psutil_like_start()) < 2     # this process's start
    assert read_rendezvous(p) == rv == Rendezvous(tuple(EPS), "tcp://node1:40100",
                                                  host=d["host"], pid=d["pid"],
                                                  started=d["started"])
    assert os.listdir(tmp_path) == ["rv.json"]            # no temporary file left
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600 and not rv.curve


def test_curve_keys_round_trip_and_mode(tmp_path):
    import zmq

    key = zmq.curve_keypair()[0].decode()
    p = tmp_path / "rv.json"
    rv = write_rendezvous(p, EPS, None, key, "/x/rv.json.client.key_secret", mode=0o640)
    d = json.loads(p.read_text())
    assert d["curve_serverkey"] == key and d["client_certificate"].endswith(".key_secret")
    assert read_rendezvous(p) == rv and rv.curve and rv.server_key == key
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640


@pytest.mark.parametrize("content", [
    "not json", "[]", '{"protocol": "mpistage-stream/2", "receivers": ["tcp://a:1"]}',
    '{"protocol": "mpistage-stream/1", "receivers": []}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:0"]}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:*"]}',
    '{"protocol": "mpistage-stream/1", "receivers": ["ipc:///tmp/x"]}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:1", "tcp://a:1"]}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:1"], "live": 5}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:1"], "curve_serverkey": "short"}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:1"], "curve_serverkey": 5}',
    '{"protocol": "mpistage-stream/1", "receivers": ["tcp://a:1"], '
    '"client_certificate": "relative/c.key_secret"}'])
def test_invalid_files_are_refused(tmp_path, content):
    p = tmp_path / "rv.json"
    p.write_text(content)
    with pytest.raises(RendezvousError):
        read_rendezvous(p)


def test_unknown_keys_and_null_live_are_accepted(tmp_path):
    p = tmp_path / "rv.json"
    p.write_text(json.dumps({"protocol": "mpistage-stream/1", "receivers": ["tcp://[::1]:5"],
                             "live": None, "job": 1234}))
    assert read_rendezvous(p).receivers == ("tcp://[::1]:5",)


def test_writer_refuses_unbound_endpoints(tmp_path):
    with pytest.raises(RendezvousError):
        write_rendezvous(tmp_path / "rv.json", ["tcp://*:*"])
    assert not (tmp_path / "rv.json").exists()


@pytest.mark.timeout(30)
def test_wait_sees_a_file_written_later_and_skips_a_stale_one(tmp_path):
    p = tmp_path / "rv.json"
    write_rendezvous(p, ["tcp://old:1"])
    os.utime(p, (time.time() - 3600, time.time() - 3600))
    start = time.time()
    t = threading.Timer(0.5, write_rendezvous, (p, EPS))
    t.start()
    rv = wait_for_rendezvous(p, timeout=20, poll=0.05, newer_than=start)
    t.join()
    assert rv.receivers == tuple(EPS)


@pytest.mark.timeout(30)
def test_wait_times_out_with_a_clear_message(tmp_path):
    with pytest.raises(RendezvousError, match="start the receiving job"):
        wait_for_rendezvous(tmp_path / "none.json", timeout=0.3, poll=0.05)


def test_a_file_of_another_user_or_writable_by_others_is_refused(tmp_path):
    p = tmp_path / "rv.json"
    write_rendezvous(p, EPS)
    os.chmod(p, 0o620)
    with pytest.raises(RendezvousError, match="writable by group"):
        read_rendezvous(p)
    os.chmod(p, 0o600)
    if os.geteuid() == 0:   # chown needs root
        os.chown(p, 65534, 65534)
        with pytest.raises(RendezvousError, match="owned by uid 65534"):
            read_rendezvous(p)
        assert read_rendezvous(p, trust_owner="nobody").receivers == tuple(EPS)
    q = tmp_path / "link.json"
    os.symlink(p, q)
    with pytest.raises(RendezvousError, match="symlink"):
        read_rendezvous(q)


def test_a_world_writable_directory_is_refused_without_sticky_bit_warned_with(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    p = d / "rv.json"
    write_rendezvous(p, EPS)
    os.chmod(d, 0o777)
    with pytest.raises(RendezvousError, match="without the sticky bit"):
        read_rendezvous(p)
    os.chmod(d, 0o1777)
    with pytest.warns(RendezvousWarning, match="sticky"):
        assert read_rendezvous(p).receivers == tuple(EPS)


def test_a_file_of_an_ended_job_is_refused_or_waited_past(tmp_path):
    """Written by a process that has exited: refused at once, naming the job; with
    wait_ended a new job's file is taken when it appears."""
    p = tmp_path / "rv.json"
    code = ("import sys; from streams.protocols.native.rendezvous import write_rendezvous; "
            "write_rendezvous(sys.argv[1], ['tcp://old:1'])")
    subprocess.run([sys.executable, "-c", code, str(p)], check=True,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    with pytest.raises(RendezvousEnded, match=r"pid \d+ on .* has ended"):
        read_rendezvous(p)
    with pytest.raises(RendezvousEnded):
        wait_for_rendezvous(p, timeout=5)          # at once, not after the timeout
    t = threading.Timer(0.5, write_rendezvous, (p, EPS))
    t.start()
    rv = wait_for_rendezvous(p, timeout=20, poll=0.05, wait_ended=True)
    t.join()
    assert rv.receivers == tuple(EPS)


def test_remove_leaves_a_file_that_replaced_ours(tmp_path):
    p = tmp_path / "rv.json"
    write_rendezvous(p, EPS)
    st = os.stat(p)
    write_rendezvous(p, ["tcp://new:1"])        # another job's, renamed over ours
    remove_rendezvous(p, (st.st_dev, st.st_ino))
    assert p.exists()
    st = os.stat(p)
    remove_rendezvous(p, (st.st_dev, st.st_ino))
    assert not p.exists()
