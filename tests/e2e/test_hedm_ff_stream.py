"""FF-HEDM peak search live on a detector stream: the same peaks as the file flow.

The FF frames of a synthetic sweep (a GE file and a GE dark, as ``hedm/ff.py``
reads them) are streamed by the detector simulator (2 producers x 2 sectors, bslz4)
into ``stager stream receive --analysis hedm.ffpeaks --set params=ff.params`` on 2
emulated nodes; the streamed ``/peaks`` and ``/frames`` tables must equal those of
``python -m workflows run hedm/ff.py`` on the same files -- no FF code written for
the stream (an analysis runs on any source).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import ROOT, Job, _datasets, _env

pytestmark = pytest.mark.slow


def _ff_dataset(folder: str, frames: int = 8):
    from hedm.synth import make_ff_dataset
    from kernels.synth import DetectorModel

    make_ff_dataset(folder, DetectorModel(shape=(96, 80), n_frames=frames, n_spots=40, seed=3,
                                          frames_per_spot=1))
    return os.path.join(folder, "ff.params")


def test_ff_peaks_streamed_equal_the_file_flow(tmp_path):
    from kernels import open_frames
    from streams import ScanGeometry, SimulatedScan
    from streams.simulate import array_source, run_producers

    params = _ff_dataset(str(tmp_path / "ff"))
    files = tmp_path / "files"
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "hedm/ff.py"),
                        "--executor", "inline", "--out", str(files), "--", "--params", params],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    reference = _datasets(files / "ff_peaks.h5")

    reader = open_frames(str(tmp_path / "ff" / "ff_000001.ge3"), shape=(96, 80))
    stack = np.stack([reader.read(i) for i in range(reader.n_frames)])
    assert stack.dtype == np.uint16
    job = Job(tmp_path, "--analysis", "hedm.ffpeaks", "--set", f"params={params}",
              "--partition-frames", "2")
    rv = job.rendezvous()
    g = ScanGeometry("ff1", 2, len(stack), 2, stack.shape[1:], "<u2", (1, len(stack)))
    run_producers(SimulatedScan(g, source=array_source(stack), encoding="bslz4"), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    assert job.report("ff1")["ok"]
    streamed = _datasets(job.out / "ff1.h5")
    assert len(reference["peaks"]) > 20        # the comparison compares something
    assert np.array_equal(streamed["peaks"], reference["peaks"])
    assert np.array_equal(streamed["frames"], reference["frames"])
    assert np.array_equal(streamed["dark"], reference["dark"])
    assert streamed["n_peaks_image"].sum() == len(reference["peaks"])
    # what viewers were shown last (OUT/ff1.live.h5): peaks per frame, and where they are
    live = _datasets(job.out / "ff1.live.h5")
    assert np.array_equal(live["n_peaks_image"], streamed["n_peaks_image"])
    where = np.zeros(stack.shape[1:])
    np.add.at(where, (np.rint(reference["peaks"]["row"]).astype(int),
                      np.rint(reference["peaks"]["col"]).astype(int)), 1)
    assert np.array_equal(live["peaks"], where) and where.sum() == len(reference["peaks"])
    # the analysis's own files (write_files) beside the scan's HDF5, as from the file flow
    assert (job.out / "ff1.csv").read_text() == (files / "ff_peaks.csv").read_text()
    assert (job.out / "ff1.png").stat().st_size > 0
    assert {"ff1.csv", "ff1.png"} <= set(job.report("ff1")["outputs"].values())


def test_ff_peaks_refuses_frames_it_cannot_search(tmp_path):
    from analyses.loading import load_analysis
    from hedm.errors import HedmError
    from streams.protocol import ScanGeometry

    a = load_analysis("hedm.ffpeaks", {"threshold": 10.0})
    with pytest.raises(HedmError, match="uint16.*float32"):
        a.prepare(ScanGeometry("s", 1, 4, 1, (8, 8), "<f4", (1, 4)))
    with pytest.raises(HedmError, match="dark file .* does not exist"):
        load_analysis("hedm.ffpeaks", {"dark": str(tmp_path / "missing.ge3")})


def test_a_sweep_with_no_peak_fails_the_file_flow_after_writing(tmp_path):
    """A Threshold above every peak: the file flow writes its outputs for inspection, says
    why in ff_run.json and on stderr, and exits non-zero -- never an empty table with 0."""
    import json

    params = _ff_dataset(str(tmp_path / "ff"), frames=3)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "hedm/ff.py"),
                        "--executor", "inline", "--out", str(out), "--", "--params", params,
                        "--Threshold", "65535"],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "no peak found" in r.stderr + r.stdout and "Threshold (65535.0)" in r.stderr + r.stdout
    assert (out / "ff_peaks.h5").is_file() and (out / "ff_peaks.csv").is_file()
    assert "no peak found" in json.loads((out / "ff_run.json").read_text())["result"]["problem"]
