"""FF-HEDM live: the synthetic sweep's raw frames streamed by the detector simulator into
``stager stream receive --analysis hedm.ffpeaks`` (stage 1 as frames arrive), then stage 2
(``hedm/ffgrains.py``) on the scan's ``<scan>.h5`` at the end of the scan: the same
Grains.csv, byte for byte, as the file flow's on the same frames."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import ROOT, Job, _env

pytestmark = pytest.mark.slow      # 360 frames streamed and read from files, stage 2 twice


def _flow(flow, out, *args):
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "hedm" / flow),
                        "--executor", "local", "--workers", "2", "--out", str(out), "--",
                        *args], env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr


def test_streamed_sweep_gives_the_file_flows_grains(tmp_path):
    from hedm.ffsynth import make_sweep
    from kernels import open_frames
    from streams import ScanGeometry, SimulatedScan
    from streams.simulate import array_source, run_producers

    info = make_sweep(str(tmp_path / "sweep"), grains=8, seed=4)
    params = info["params"]
    files = tmp_path / "files"
    _flow("ff.py", files, "--params", params)
    _flow("ffgrains.py", files, "--params", params, "--PeaksFile", str(files / "ff_peaks.h5"))

    reader = open_frames(str(tmp_path / "sweep" / "ff_000001.ge3"), shape=(192, 192))
    stack = np.stack([reader.read(i) for i in range(reader.n_frames)])
    job = Job(tmp_path, "--analysis", "hedm.ffpeaks", "--set", f"params={params}",
              "--partition-frames", "8")
    rv = job.rendezvous()
    g = ScanGeometry("ff1", 2, len(stack), 2, stack.shape[1:], "<u2", (1, len(stack)))
    run_producers(SimulatedScan(g, source=array_source(stack), encoding="bslz4"), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    live = tmp_path / "live"
    _flow("ffgrains.py", live, "--params", params, "--PeaksFile", str(job.out / "ff1.h5"))
    want = (files / "Grains.csv").read_text()
    assert want.startswith("%NumGrains 8\n")
    assert (live / "Grains.csv").read_text() == want
