"""``python -m streams.simulate`` from the shell: the native path through a rendezvous
file, and the Stream V2 path, each with a withheld frame."""
import subprocess
import sys
import threading

import pytest

from streams import Receiver, StreamV2Receiver, synthetic_frame, write_rendezvous

pytestmark = pytest.mark.timeout(120)


def test_native_simulator_cli(tmp_path):
    rv = tmp_path / "rv.json"
    rx = Receiver(lambda p: None, idle_timeout=30)
    out = []
    th = threading.Thread(target=lambda: out.extend(rx.serve(1, timeout=90)))
    cmd = [sys.executable, "-m", "streams.simulate", "--rendezvous", str(rv),
           "--producers", "2", "--sectors", "3", "--scan-shape", "2", "3", "--shape", "24", "16",
           "--encoding", "bslz4", "--withhold", "4", "--drop", "1:2", "--wait", "60",
           "--insecure"]     # a plain receiver: its rendezvous names no key
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    write_rendezvous(rv, [rx.bind()])
    th.start()
    text, _ = proc.communicate(timeout=90)
    th.join(90)
    rx.close()
    assert proc.returncode == 0, text
    assert "producer 0: sent" in text and "producer 1: sent" in text
    (rep,) = out
    assert rep.missing_frames.tolist() == [4] and rep.incomplete == {1: [2]}
    assert rep.complete_frames.tolist() == [0, 2, 3, 5] and rep.lost_in_transport == 0


def test_stream_v2_simulator_cli(tmp_path):
    ep = f"ipc://{tmp_path}/detector"
    frames = {}

    def deliver(part):
        for f, img in zip(part.frames, part.data):
            frames[int(f)] = img.copy()

    rx = StreamV2Receiver(deliver, ep, idle_timeout=30)
    rx.connect()                       # before the detector binds: ZeroMQ retries
    out = []
    th = threading.Thread(target=lambda: out.extend(rx.serve(1, timeout=90)))
    th.start()
    cmd = [sys.executable, "-m", "streams.simulate", "--stream2-bind", ep,
           "--scan-shape", "2", "2", "--shape", "32", "32", "--encoding", "lz4",
           "--withhold", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    th.join(90)
    rx.close()
    assert r.returncode == 0, r.stdout + r.stderr
    (rep,) = out
    assert rep.geometry.scan_shape == (2, 2) and rep.missing_frames.tolist() == [2]
    assert (frames[3] == synthetic_frame(3, (32, 32), (2, 2))).all()
