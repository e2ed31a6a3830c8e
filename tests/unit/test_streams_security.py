"""CURVE, ZAP and refusal counting on real ZeroMQ sockets on 127.0.0.1 (no mocks).

Receivers run in threads of this process with the job's security
(:class:`streams.security.StreamSecurity`: a server key pair in memory, a
client certificate written beside the rendezvous file); producers connect with
it, without it (plain ZeroMQ), or with a certificate of their own.
"""
import os
import stat
import threading
import time

import numpy as np
import pytest

from streams import (Receiver, ScanGeometry, SimulatedScan, read_rendezvous,
                           run_producers, write_rendezvous)
from streams.errors import StreamError
from streams.protocols.native.producer import Producer
from streams.security import StreamSecurity, load_client_certificate

pytestmark = pytest.mark.timeout(120)


def geometry(name="scan-a", P=2, S=2, grid=(4, 4), shape=(32, 24)):
    return ScanGeometry(name, P, grid[0] * grid[1], S, shape, "<u2", grid)


class Sink:
    def __init__(self):
        self.frames = {}

    def __call__(self, part):
        for f, img in zip(part.frames, part.data):
            assert int(f) not in self.frames, f"frame {f} delivered twice"
            self.frames[int(f)] = img.copy()


def start(tmp_path, sec, sink, scans=1, timeout=60, **kw):
    """One receiver in a thread with ``sec``; the rendezvous file written as the job does."""
    rx = Receiver(sink, security=sec, partition_frames=2, **kw)
    ep = rx.bind()
    rv_path = tmp_path / "rv.json"
    write_rendezvous(rv_path, [ep], None, sec.server_public if sec.curve else None,
                     sec.client_certificate)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("reports", rx.serve(scans,
                                                                           timeout=timeout)))
    t.start()
    return rx, t, out, read_rendezvous(rv_path)


def wait_refused(rx, reason, n=1, timeout=20.0):
    end = time.monotonic() + timeout
    while rx.refused[reason] < n and time.monotonic() < end:
        time.sleep(0.05)
    return rx.refused[reason]


def test_job_files_are_private_and_name_the_server_key(tmp_path):
    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"))
    write_rendezvous(tmp_path / "rv.json", ["tcp://127.0.0.1:5"], None, sec.server_public,
                     sec.client_certificate)
    for p in (tmp_path / "rv.json", tmp_path / "rv.json.client.key_secret",
              tmp_path / "rv.json.client.key"):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    rv = read_rendezvous(tmp_path / "rv.json")
    assert rv.curve and rv.server_key == sec.server_public and len(rv.server_key) == 40
    assert rv.client_certificate == str(tmp_path / "rv.json.client.key_secret")
    pub, secret = load_client_certificate(rv.client_certificate)
    assert pub.decode() in sec.authorized and secret
    assert sec.server_secret not in (tmp_path / "rv.json").read_text()
    assert "secret" not in str(sec.describe()).replace("key_secret", "")
    # a certificate others can read is refused by the producer side
    os.chmod(rv.client_certificate, 0o644)
    with pytest.raises(StreamError, match="chmod 600"):
        load_client_certificate(rv.client_certificate)


def test_a_planted_certificate_is_refused_before_it_is_read(tmp_path):
    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"))
    cert = sec.client_certificate
    link = tmp_path / "link.key_secret"
    link.symlink_to(cert)               # a symlink: refused, not followed
    with pytest.raises(StreamError, match="symlink"):
        load_client_certificate(str(link))
    fifo = tmp_path / "fifo.key_secret"
    os.mkfifo(fifo, 0o600)              # a FIFO: refused at once, no blocking open
    with pytest.raises(StreamError, match="not a regular file"):
        load_client_certificate(str(fifo))
    if os.geteuid() == 0:               # root reads anyone's file: the owner decides
        os.chown(cert, 65534, 65534)
        with pytest.raises(StreamError, match="owned by"):
            load_client_certificate(cert)


def test_unauthenticated_producers_are_refused_and_never_counted(tmp_path):
    """A plain producer and one with a foreign key send a whole scan of the same name
    while the authorised producers send theirs: the scan is exact, the hostile
    frames are neither data nor rejections, the refusals are counted by reason."""
    import zmq.auth

    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"))
    sink = Sink()
    rx, t, out, rv = start(tmp_path, sec, sink)
    good = SimulatedScan(geometry())
    evil = SimulatedScan(geometry(), source=lambda i: np.full((32, 24), 7, np.uint16))
    # plain ZeroMQ: no certificate at all
    plain = Producer(list(rv.receivers), 0, send_timeout=0.5, linger=0)
    # CURVE with the right server key but a key pair of its own
    os.mkdir(tmp_path / "other")
    _, other_cert = zmq.auth.create_certificates(str(tmp_path / "other"), "intruder")
    os.chmod(other_cert, 0o600)
    foreign = Producer(rv, 0, certificate=other_cert, send_timeout=0.5, linger=0)
    try:     # queued for a connection that never completes, or blocked at the HWM
        plain.begin(evil.geometry)
        for f, s in evil.sent_by(0):
            plain.send_sector("scan-a", f, s, evil.frame(f))
    except StreamError as e:
        assert "accepted nothing" in str(e)
    # the foreign key pair: refused at the handshake, and told so before it sends
    with pytest.raises(StreamError, match="refused this producer's CURVE certificate"):
        foreign.begin(evil.geometry)
    assert wait_refused(rx, "not_curve") >= 1
    assert wait_refused(rx, "unauthorised_key") >= 1
    run_producers(good, rv)
    t.join(60)
    plain.close()
    foreign.close()
    rx.close()
    rep = out["reports"][0]
    assert rep.ok and rep.ended_by == "end" and rep.lost_in_transport == 0
    assert rep.received_data == rep.sent == 16 * 2 and not rep.rejected
    assert not rep.rejected_unattributed
    assert rep.refused["not_curve"] >= 1 and rep.refused["unauthorised_key"] >= 1
    # a refused plain peer that hangs up first may also count as handshake_aborted
    assert set(rep.refused) <= {"not_curve", "unauthorised_key", "handshake_aborted"}
    assert any(e.startswith("refused unauthorised_key: CURVE key") for e in rep.examples)
    assert rep.to_dict()["connections_refused"] == dict(sorted(rep.refused.items()))
    for f in range(16):
        assert np.array_equal(sink.frames[f], good.frame(f)), f


def test_authorised_producer_gets_the_same_result_as_plain(tmp_path):
    """The same scan through a CURVE job and an --insecure one: identical frames."""
    results = []
    for mode in ("curve", "insecure"):
        d = tmp_path / mode
        d.mkdir()
        sec = StreamSecurity.for_job(str(d / "rv.json")) if mode == "curve" \
            else StreamSecurity.insecure()
        sink = Sink()
        rx, t, out, rv = start(d, sec, sink)
        assert rv.curve == (mode == "curve")
        run_producers(SimulatedScan(geometry(), encoding="bslz4"), rv, insecure=mode == "insecure")
        t.join(60)
        rx.close()
        rep = out["reports"][0]
        assert rep.ok and not rep.refused and rep.lost_in_transport == 0
        results.append(sink.frames)
    assert sorted(results[0]) == sorted(results[1]) == list(range(16))
    for f in range(16):
        assert np.array_equal(results[0][f], results[1][f])


def test_authorized_keys_directory(tmp_path):
    import zmq.auth

    keys = tmp_path / "keys"
    keys.mkdir()
    mine = tmp_path / "mine"
    mine.mkdir()
    pub, secret = zmq.auth.create_certificates(str(mine), "beamline-a")
    os.chmod(secret, 0o600)
    os.rename(pub, keys / "beamline-a.key")
    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"), authorized_keys=str(keys))
    assert sec.client_certificate is None and not (tmp_path / "rv.json.client.key_secret").exists()
    sink = Sink()
    rx, t, out, rv = start(tmp_path, sec, sink)
    with pytest.raises(StreamError, match="names no client certificate"):
        Producer(rv, 0)
    run_producers(SimulatedScan(geometry()), rv, certificate=secret)
    t.join(60)
    rx.close()
    assert out["reports"][0].ok and len(sink.frames) == 16
    (tmp_path / "empty").mkdir()
    with pytest.raises(StreamError, match="no certificate"):
        StreamSecurity.for_job(str(tmp_path / "rv2.json"), authorized_keys=str(tmp_path / "empty"))
    with pytest.raises(StreamError, match="not a directory"):
        StreamSecurity.for_job(str(tmp_path / "rv2.json"), authorized_keys=str(mine / "none"))


def test_a_silent_tcp_connection_is_dropped_and_counted(tmp_path):
    import socket

    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"), handshake_s=0.3)
    sink = Sink()
    rx, t, out, rv = start(tmp_path, sec, sink)
    host, port = rv.receivers[0][6:].rsplit(":", 1)
    idle = socket.create_connection((host, int(port)))
    try:
        assert wait_refused(rx, "handshake_timeout") == 1
        run_producers(SimulatedScan(geometry()), rv)
        t.join(60)
    finally:
        idle.close()
        rx.close()
    rep = out["reports"][0]
    assert rep.ok and rep.refused == {"handshake_timeout": 1}


def test_live_socket_needs_the_client_certificate(tmp_path):
    from streams.job.live import LivePublisher, LiveView

    # a Stream V2 job's --allow-from names the detector: viewers are admitted by key
    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"), allow_from=("10.99.0.1",))
    out = tmp_path / "out"
    pub = LivePublisher("tcp://127.0.0.1:*", str(out), security=sec)
    import zmq.auth

    good = LiveView(pub.endpoint, sec.server_public, sec.client_certificate)
    plain = LiveView(pub.endpoint)
    os.mkdir(tmp_path / "other")
    _, other = zmq.auth.create_certificates(str(tmp_path / "other"), "viewer")
    os.chmod(other, 0o600)
    foreign = LiveView(pub.endpoint, sec.server_public, other)
    try:
        img = {"sum": np.arange(12.0).reshape(3, 4)}
        valid = np.ones((3, 4), bool)
        msg = None
        for _ in range(100):     # PUB drops until the subscription arrived
            pub.publish("s1", img, valid, {"complete": 1})
            msg = good.receive(0.05)
            if msg is not None:
                break
        assert msg is not None and np.array_equal(msg.images["sum"], img["sum"])
        assert plain.receive(0.3) is None and foreign.receive(0.1) is None
        pub.publish("s1", img, valid, {"complete": 1})
        assert pub.refused.get("unauthorised_key", 0) >= 1      # counted, bounded
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
        for suffix in (".live.h5", ".live.png"):
            assert stat.S_IMODE(os.stat(out / f"s1{suffix}").st_mode) == 0o600
        with pytest.raises(StreamError, match="certificate"):
            LiveView(pub.endpoint, sec.server_public, None)
    finally:
        good.close()
        plain.close()
        foreign.close()
        pub.close()


def test_live_snapshots_refuse_a_symlinked_directory(tmp_path):
    from core.localfs import UnsafePathError
    from streams.job.live import LivePublisher

    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "out")
    with pytest.raises(UnsafePathError, match="symlink"):
        LivePublisher("tcp://127.0.0.1:*", str(tmp_path / "out"))


def test_stream2_allow_list_refuses_other_addresses(tmp_path):
    """Stream V2 is plain ZeroMQ: ZAP accepts only --allow-from addresses."""
    import zmq

    from streams.protocols.stream2.receiver import StreamV2Receiver

    ctx = zmq.Context.instance()
    det = ctx.socket(zmq.PUSH)
    det.setsockopt(zmq.LINGER, 0)
    det.bind("tcp://127.0.0.1:*")
    ep = det.getsockopt(zmq.LAST_ENDPOINT).decode()
    try:
        cases = [(StreamSecurity.insecure(("10.99.0.1",)), True),
                 (StreamSecurity.insecure(("127.0.0.1",)), False),
                 # a CURVE job (its live socket) still admits the plain detector by address
                 (StreamSecurity.for_job(str(tmp_path / "rv.json"), allow_from=("127.0.0.1",)),
                  False)]
        for sec, refused in cases:
            rx = StreamV2Receiver(lambda p: None, ep, security=sec, source="127.0.0.1")
            rx.connect()
            try:
                end = time.monotonic() + 5
                connected = False
                while time.monotonic() < end and not rx.refused and not connected:
                    rx.step(0.05)
                    if not refused:
                        try:     # goes out only once the handshake completed
                            det.send(b"ping", zmq.NOBLOCK)
                            connected = True
                        except zmq.Again:
                            pass
                if refused:
                    assert rx.refused["address_not_allowed"] >= 1
                else:
                    rx.step(0.2)
                    assert connected and not rx.refused
            finally:
                rx.close()
    finally:
        det.close()
