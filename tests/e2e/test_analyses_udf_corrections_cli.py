"""``--corrections`` and ``--udf-roi`` through the command lines, live then offline.

A Stream V2 series from the simulator, its start carrying a pixel mask
(``header_detail all``), into ``mpirun -n 2 stager stream receive`` (one receiver,
one worker: the mask travels to the worker) with ``--corrections detector
--udf-roi roi.npy``; then the offline flow on the same frames with the mask the job
kept (``OUT/SCAN.h5:/detector/pixel_mask``). Both must equal LiberTEM's
``run_udf(..., roi=roi, corrections=CorrectionSet(excluded_pixels=mask > 0))``.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("libertem")

from tests import udf_cases as uc
from tests.e2e.test_streams_receive import Job
from tests.e2e.test_analyses_udf_cli import _env
from tests.unit.test_analyses_udf_corrections import SPECS, _reference, pixel_mask, user_roi

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")

F = uc.SCAN[0] * uc.SCAN[1]


def _check(path, specs, ref, what):
    import h5py

    bad = []
    with h5py.File(path, "r") as f:
        assert f["udf"].attrs["corrections"] != "none", what
        assert (f["udf/roi"][()] == user_roi()).all(), what
        assert (f["udf/valid"][()] == user_roi()).all(), what
        for (spec, _), r in zip(specs, ref):
            label = spec.rpartition(":")[2]
            for k, x in r.items():
                y = f[f"udf/{label}/{k}"][()]
                if x.shape != y.shape or x.dtype != y.dtype or not np.allclose(
                        x, y, rtol=1e-6, atol=0, equal_nan=True):
                    bad.append(f"{what} {label}/{k}")
    assert not bad, bad


@pytest.mark.slow      # a live job and two offline runs of LiberTEM UDFs: 30 s of CPU
@pytest.mark.timeout(300)
def test_detector_mask_and_roi_live_then_offline(tmp_path):
    import h5py

    from streams.protocols.stream2.simulator import StreamV2Simulator
    from streams.protocols.stream2.streamv2 import scan_name

    np.save(tmp_path / "masks.npy", uc.masks())
    np.save(tmp_path / "roi.npy", user_roi())
    specs = [(s, {k: (str(tmp_path / "masks.npy") if v == "MASKS" else v) for k, v in p.items()})
             for s, p in SPECS]
    args = ["--analysis", "udf:" + ",".join(s for s, _ in specs),
            "--analysis-params", json.dumps([p for _, p in specs]), "--udf-roi", "roi.npy"]
    data = uc.frames(seed=4)
    ref = _reference(specs, data, user_roi(), pixel_mask())
    name = scan_name(3, f"SIM{3:023d}")
    with StreamV2Simulator(send_timeout=30) as sim:
        job = Job(tmp_path, "--stream2", sim.endpoint, "--partition-frames", "4",
                  "--v2-grace", "1", "--corrections", "detector", *args, np_=2, nodes=1)
        job.started()
        time.sleep(1.0)
        sim.send_series(3, lambda i: data[i], F, uc.FRAME, compression="bslz4",
                        scan_shape=uc.SCAN, header_detail="all",
                        pixel_mask={"threshold_1": pixel_mask().astype("<u4")})
        rc, out, err = job.wait()
    assert rc == 0, out + err
    live = job.out / f"{name}.h5"
    _check(live, specs, ref, "live")
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f["frames"] = data.reshape(*uc.SCAN, *uc.FRAME)
    r = subprocess.run(
        [sys.executable, "-m", "workflows", "run", "analyses.runner", "--executor",
         "inline", "--out", str(tmp_path / "off"), "--", "--frames", "scan.h5:/frames",
         "--partition-frames", "5", "--corrections", f"{live}:/detector/pixel_mask", *args],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    _check(tmp_path / "off" / "scan.h5", specs, ref, "offline")
    # offline has no start message: "detector" is refused, naming what to give
    r = subprocess.run(
        [sys.executable, "-m", "workflows", "run", "analyses.runner", "--executor",
         "inline", "--out", str(tmp_path / "off2"), "--", "--frames", "scan.h5:/frames",
         "--corrections", "detector", *args],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "/detector/pixel_mask" in r.stderr + r.stdout


from tests.e2e.test_streams_simplon_control import detector  # noqa: E402,F401  (the fixture)


SHAPE = {"dectris_scan_shape": "8,8"}     # the dump's 64 images


def _control_args(port, **given):
    import argparse

    from streams.controls import OPTIONS

    ns = argparse.Namespace(control=f"simplon://127.0.0.1:{port}", protocol="dectris-legacy",
                            stream2=None, corrections="detector",
                            **{o.name: None for o in OPTIONS})
    for k, v in given.items():
        setattr(ns, k, v)
    return ns


@pytest.mark.timeout(120)
def test_corrections_detector_asks_the_detector_for_its_pixel_mask(detector):  # noqa: F811
    """Active SIMPLON control with ``--corrections detector`` sets the stream's
    header_detail to all (the start then carries the pixel mask). LiberTEM-live's mock
    only takes "basic": its refusal, naming the call, shows the request was made."""
    from streams.controls import ControlError
    from streams.controls.job import _prepare

    with pytest.raises(ControlError) as e:
        _prepare(_control_args(detector.port, trigger_mode="exte"), SHAPE)
    assert "/stream/api/1.8.0/config/header_detail" in str(e.value)
    with pytest.raises(ValueError, match="needs the detector's pixel mask: --header-detail all"):
        _prepare(_control_args(detector.port, header_detail="basic"), SHAPE)
    control, _, _, mask = _prepare(_control_args(detector.port, corrections=None), SHAPE)
    assert mask is None                 # asked for only with --corrections detector
    control.finish()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flag,value,says", [
    ("--corrections", "dector", "--corrections 'dector': expected none or detector"),
    ("--udf-roi", "no-such-roi.npy", "--udf-roi no-such-roi.npy: cannot read it"),
])
def test_a_bad_corrections_word_or_roi_is_a_refused_start(tmp_path, flag, value, says):
    """As any bad option: exit 2 before the job makes anything, one line from rank 0
    (not an analysis failing on every rank with exit 1)."""
    from tests.e2e.test_streams_receive import _env as job_env

    r = subprocess.run(
        ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "stager", "stream",
         "receive", "--rendezvous", str(tmp_path / "rv.json"), "--out", str(tmp_path / "out"),
         "--emulate-nodes", "1", "--bind", "127.0.0.1", "--local", str(tmp_path / "l" / "%n"),
         "--analysis", "udf:libertem.udf.sum:SumUDF", flag, value],
        cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=170)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [x for x in r.stderr.splitlines() if says in x]
    assert len(lines) == 1 and lines[0].startswith("stager stream receive: "), r.stderr
    assert "Traceback" not in r.stderr and "rank 1" not in r.stderr, r.stderr
    assert not (tmp_path / "rv.json").exists() and not (tmp_path / "out").exists()
