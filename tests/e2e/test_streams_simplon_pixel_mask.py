"""``--corrections detector`` with ``--control simplon://``: for a scan whose start
carries no pixel mask (``header_detail basic``), the job takes the detector's mask from
the SIMPLON REST API (``GET /detector/api/1.8.0/config/pixel_mask``, a ``darray``).

LiberTEM-live's SIMPLON mock (``libertem_live.detectors.dectris.sim``) does not serve
that call (HTTP 500, "not implemented"), so the control here is a small real HTTP
server answering in SIMPLON's shape (version, the passive mode's configuration reads,
the mask as a base64 ``darray`` with its shape width first); the frames still come from
LiberTEM-live's simulator replaying a dump. The result must equal LiberTEM's own
``run_udf(..., corrections=CorrectionSet(excluded_pixels=mask > 0))``.
"""
from __future__ import annotations

import http.server
import json
import threading

import numpy as np
import pytest

from tests.e2e.test_streams_dectris_legacy_e2e import _arm, _dump, _peers
from tests.e2e.test_streams_receive import Job
from tests.unit.test_streams_simplon_darray import darray

SCAN, FRAME = (4, 4), (24, 32)          # not square: the darray's width-first shape shows


def detector_mask() -> np.ndarray:
    m = np.zeros(FRAME, "<u4")
    m[3, 7] = 1                  # dead
    m[12, 20] = 8                # hot (any bit set excludes it)
    m[20:22, 28] = 2
    return m


class _Simplon(http.server.BaseHTTPRequestHandler):
    """SIMPLON 1.8's answers a passive control and the pixel-mask call need."""

    calls: list = []
    config = {"trigger_mode": "exte", "nimages": 1, "ntrigger": SCAN[0] * SCAN[1]}
    mask_status = 200
    mask_value = None           # None: darray(detector_mask())

    def do_GET(self):
        self.calls.append(self.path)
        code = 200
        if self.path == "/detector/api/version/":
            body = {"value": "1.8.0", "value_type": "string"}
        elif self.path == "/detector/api/1.8.0/config/pixel_mask":
            value = self.mask_value or darray(detector_mask())
            body, code = {"value": value, "value_type": "uint",
                          "access_mode": "rw"}, self.mask_status
            if code != 200:
                body = {"error": "Parameter pixel_mask not implemented."}
        elif self.path.startswith("/detector/api/1.8.0/config/"):
            name = self.path.rsplit("/", 1)[1]
            body = {"value": self.config[name], "value_type": "uint", "access_mode": "rw"}
        else:
            body, code = {"error": "no such call"}, 404
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def simplon():
    _Simplon.calls, _Simplon.mask_status, _Simplon.mask_value = [], 200, None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Simplon)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _reference(frames: np.ndarray, mask: np.ndarray):
    from libertem.api import Context
    from libertem.corrections import CorrectionSet
    from libertem.udf.sum import SumUDF
    from libertem.udf.sumsigudf import SumSigUDF

    ctx = Context.make_with("inline")
    ds = ctx.load("memory", data=frames.reshape(*SCAN, *FRAME), num_partitions=2)
    return ctx.run_udf(ds, [SumUDF(), SumSigUDF()],
                       corrections=CorrectionSet(excluded_pixels=mask > 0))


@pytest.mark.timeout(240)
def test_the_detectors_pixel_mask_from_simplon_when_the_start_carries_none(tmp_path,
                                                                           simplon):
    _peers()
    import h5py
    from libertem_live.detectors.dectris.sim import DectrisSim

    from streams.simulate import synthetic_frame

    dump = tmp_path / "scan.dump"
    _dump(dump, SCAN, FRAME)                   # header_detail basic: no mask in the start
    frames = np.stack([synthetic_frame(i, FRAME, SCAN) for i in range(SCAN[0] * SCAN[1])])
    want = _reference(frames, detector_mask())
    sim = DectrisSim(path=str(dump), port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    try:
        job = Job(tmp_path, "--protocol", "dectris-legacy", "--dectris-endpoint",
                  f"tcp://127.0.0.1:{sim.zmqport}", "--control",
                  f"simplon://127.0.0.1:{simplon.server_port}", "--control-mode", "passive",
                  "--dectris-scan-shape=-1,4", "--corrections", "detector", "--analysis",
                  "udf:libertem.udf.sum:SumUDF,libertem.udf.sumsigudf:SumSigUDF",
                  "--partition-frames", "4", np_=2, nodes=1)   # one receiver, one worker
        job.started()
        _arm(sim.port)                          # another program arms (passive)
        rc, out, err = job.wait()
    finally:
        sim.stop()
    assert rc == 0, out + err
    assert "/detector/api/1.8.0/config/pixel_mask" in _Simplon.calls
    with h5py.File(job.out / "series-1.h5", "r") as f:
        assert f["udf"].attrs["corrections"] == "detector"
        got = f["udf/SumUDF/intensity"][()]
        np.testing.assert_allclose(got, want[0]["intensity"].data, rtol=1e-6)
        np.testing.assert_allclose(f["udf/SumSigUDF/intensity"][()],
                                   want[1]["intensity"].data, rtol=1e-6)
    plain = frames.sum(axis=0, dtype="f8")
    assert not np.allclose(got[3, 7], plain[3, 7])      # the dead pixel was patched
    assert np.allclose(got[0, 0], plain[0, 0])


def test_a_detector_without_the_call_is_said_once_and_a_nonsense_mask_refused(simplon):
    """A refusal (LiberTEM-live's mock answers HTTP 500) leaves the starts to carry the
    mask, said as a warning; an answer that is no mask refuses the start."""
    import argparse

    from streams.controls import OPTIONS, ControlError
    from streams.controls.job import _prepare

    ns = argparse.Namespace(control=f"simplon://127.0.0.1:{simplon.server_port}",
                            protocol="dectris-legacy", stream2=None, corrections="detector",
                            **{o.name: None for o in OPTIONS})
    ns.control_mode = "passive"
    _, key, shape, mask = _prepare(ns, {"dectris_scan_shape": "-1,4"})
    assert key == "dectris_scan_shape" and shape == (4, 4)
    assert mask.dtype == bool and (mask == (detector_mask() != 0)).all()
    _Simplon.mask_status = 500
    assert _prepare(ns, {"dectris_scan_shape": "-1,4"})[3] is None
    ns.corrections = "none"                   # the call is made only for "detector"
    _Simplon.calls.clear()
    _prepare(ns, {"dectris_scan_shape": "-1,4"})
    assert not any(c.endswith("pixel_mask") for c in _Simplon.calls)
    ns.corrections, _Simplon.mask_status = "detector", 200
    _Simplon.mask_value = darray(detector_mask(), filters=["lz4"])
    with pytest.raises(ControlError, match="config/pixel_mask.*filters"):
        _prepare(ns, {"dectris_scan_shape": "-1,4"})
