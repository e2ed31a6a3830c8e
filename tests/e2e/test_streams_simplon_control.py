"""``--control simplon://``: the receiving job arms the detector itself (active) or waits
for another program's arm (passive), against LiberTEM-live's SIMPLON mock
(``libertem_live.detectors.dectris.sim.DectrisSim``: Flask REST + the legacy stream of a
dump); REST errors named; a failed arm leaves the detector disarmed."""
from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.test_streams_dectris_legacy_e2e import _dump, _peers
from tests.e2e.test_streams_receive import Job

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def detector(tmp_path):
    """LiberTEM-live's DECTRIS simulator replaying an 8x8 scan (exte, ntrigger 64)."""
    _peers()
    from libertem_live.detectors.dectris.sim import DectrisSim

    dump = tmp_path / "scan.dump"
    _dump(dump, (8, 8), (32, 32))
    sim = DectrisSim(path=str(dump), port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    yield sim
    sim.stop()


def _job(tmp_path, sim, *args, hook_out):
    import os

    os.environ["CONTROL_HOOK_OUT"] = str(hook_out)     # the job's environment (Job copies it)
    try:
        return Job(tmp_path, "--protocol", "dectris-legacy", "--dectris-endpoint",
                   f"tcp://127.0.0.1:{sim.zmqport}", "--control",
                   f"simplon://127.0.0.1:{sim.port}",
                   "--on-ready", f"{TESTS / 'control_hook.py'}:ready", *args)
    finally:
        del os.environ["CONTROL_HOOK_OUT"]


@pytest.mark.timeout(180)
def test_active_control_configures_arms_and_the_scan_arrives(tmp_path, detector):
    hook_out = tmp_path / "hook.json"
    job = _job(tmp_path, detector, "--trigger-mode", "exte", "--dectris-scan-shape", "8,8",
               hook_out=hook_out)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    info = json.loads(hook_out.read_text())
    assert info["series"] == 1 and info["images"] == 64 and info["mode"] == "active"
    assert "detector simplon://" in err and "series 1" in err
    rep = job.report("series-1")
    assert rep["ok"] and rep["frames_complete"] == 64 and rep["geometry"]["scan_shape"] == [8, 8]


@pytest.mark.timeout(180)
def test_passive_control_takes_the_scan_from_the_detector_and_waits(tmp_path, detector):
    hook_out = tmp_path / "hook.json"
    job = _job(tmp_path, detector, "--control-mode", "passive", "--dectris-scan-shape=-1,4",
               hook_out=hook_out)
    end = time.monotonic() + 60
    while not hook_out.exists():              # ready for data: the receivers wait
        assert time.monotonic() < end and job.p.poll() is None, job.p.communicate()
        time.sleep(0.1)
    info = json.loads(hook_out.read_text())
    assert info["mode"] == "passive" and info["series"] is None
    assert info["images"] == 64 and info["scan_shape"] == [16, 4]   # -1 from the detector
    time.sleep(1.0)
    req = urllib.request.Request(                # another program arms
        f"http://127.0.0.1:{detector.port}/detector/api/1.8.0/command/arm", method="PUT")
    urllib.request.urlopen(req, timeout=10).read()
    rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("series-1")
    assert rep["ok"] and rep["geometry"]["scan_shape"] == [16, 4]


def test_rest_errors_name_the_call_and_the_detectors_answer(detector):
    from streams.controls import ControlError
    from streams.controls.simplon import Simplon, SimplonClient

    c = SimplonClient(f"http://127.0.0.1:{detector.port}")
    assert c.version() == "1.8.0" and c.config("ntrigger") == 64
    with pytest.raises(ControlError) as e:
        c.set_config("trigger_mode", "ints")      # the dump was taken with exte
    msg = str(e.value)
    assert "PUT" in msg and "/detector/api/1.8.0/config/trigger_mode" in msg
    assert "HTTP 500" in msg and "does not match file content" in msg
    # active with a -1: refused before anything is set
    ctl = Simplon(f"simplon://127.0.0.1:{detector.port}", {"control_mode": "active"})
    with pytest.raises(ControlError, match="no -1"):
        ctl.prepare((-1, 8))
    with pytest.raises(ControlError, match="unreachable.*127.0.0.1:9"):
        SimplonClient("http://127.0.0.1:9", timeout=2).version()


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A detector whose arm fails (HTTP 500, its answer); records every call."""

    calls: list = []
    refuse_arm = True

    def do_PUT(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.calls.append(self.path)
        if self.path.endswith("/command/arm") and not self.refuse_arm:
            body, code = b'{"sequence id": 12}', 200
        elif self.path.endswith("/command/arm"):
            body, code = b'{"error": "high voltage not ready"}', 500
        else:
            body, code = b"[]", 200
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_a_failed_arm_leaves_the_detector_disarmed():
    from streams.controls import ControlError
    from streams.controls.simplon import Simplon

    srv = http.server.HTTPServer(("127.0.0.1", 0), _Refusing)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        ctl = Simplon(f"simplon://127.0.0.1:{srv.server_port}", {"control_mode": "active"})
        ctl.images, ctl.scan_shape, ctl.mode = 4, (2, 2), "exte"
        with pytest.raises(ControlError) as e:
            ctl.start()
        assert "command/arm" in str(e.value) and "high voltage not ready" in str(e.value)
        assert _Refusing.calls[-2:] == ["/detector/api/1.8.0/command/arm",
                                        "/detector/api/1.8.0/command/disarm"]
        # a hook that fails after a good arm disarms too
        _Refusing.calls.clear()
        _Refusing.refuse_arm = False

        def hook(info):
            assert info["series"] == 12
            raise RuntimeError("the scan engine is not there")

        with pytest.raises(RuntimeError, match="scan engine"):
            ctl.start(hook)
        assert _Refusing.calls == ["/detector/api/1.8.0/command/arm",
                                   "/detector/api/1.8.0/command/disarm"]
    finally:
        srv.shutdown()
