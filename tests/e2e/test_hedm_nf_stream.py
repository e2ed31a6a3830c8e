"""NF-HEDM stage-1 reduction live on a detector stream: the same spots as the file flow.

The raw TIFF frames of a small synthetic layer (:func:`hedm.nfsynth.make_layer`: 2
distances) are reduced by ``python -m workflows run hedm/nf.py`` from files, then
streamed by the detector simulator (2 producers x 2 sectors, bslz4) into
``stager stream receive --analysis hedm.nfreduce --set params=nf.params --set
background=FILES/work`` (the backgrounds the file flow wrote) on 2 emulated nodes,
partitions of 3 frames so the merge order is not the frame order. The streamed spot
tables and binary images must equal the file flow's -- no NF code written for the
stream (an analysis runs on any source).
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import ROOT, Job, _datasets, _env

pytestmark = pytest.mark.slow


def test_nf_reduce_streamed_equals_the_file_flow(tmp_path):
    from kernels import TiffSeries
    from hedm.nfsynth import make_layer
    from streams import ScanGeometry, SimulatedScan
    from streams.simulate import array_source, run_producers

    layer = tmp_path / "layer"
    made = make_layer(str(layer), frames=6, grains=3, rsample=30.0)
    d, n = made["distances"], made["frames_per_distance"]
    params = str(layer / "nf.params")
    files = tmp_path / "files"
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "hedm/nf.py"),
                        "--executor", "inline", "--out", str(files), "--", "--params", params],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    reference = _datasets(files / "nf_spots.h5")
    ref_binary = np.load(files / "nf_spots_binary.npy")

    reader = TiffSeries(str(layer / "stem_%06d.tif"), 0, d * n)
    stack = np.stack([reader.read(i) for i in range(reader.n_frames)])
    assert stack.dtype == np.uint16
    job = Job(tmp_path, "--analysis", "hedm.nfreduce", "--set", f"params={params}",
              "--set", f"background={files / 'work'}",
              "--partition-frames", "3")
    rv = job.rendezvous()
    g = ScanGeometry("nf1", 2, len(stack), 2, stack.shape[1:], "<u2", (d, n))
    run_producers(SimulatedScan(g, source=array_source(stack), encoding="bslz4"), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    assert job.report("nf1")["ok"]
    streamed = _datasets(job.out / "nf1.h5")
    assert len(reference["spots"]) > 1000 and len(reference["spot_centroids"]) > 20
    for name in ("spots", "spot_centroids", "frames", "background"):
        assert np.array_equal(streamed[name], reference[name]), name
    assert np.array_equal(streamed["binary_images"], ref_binary)
    # stage 2's input, left beside the scan's file by the analysis's write_files
    assert np.array_equal(np.load(job.out / "nf1_binary.npy"), ref_binary)
    assert streamed["n_pixels_image"].shape == (d, n)
    assert streamed["n_pixels_image"].sum() == len(reference["spots"])
    assert np.array_equal(streamed["n_spots_image"].ravel(), reference["frames"]["n_spots"])
    # what viewers were shown last (the final live message, as OUT/nf1.live.h5): spots per
    # frame, and each distance's spot pixels = the binary images summed over its frames
    live = _datasets(job.out / "nf1.live.h5")
    assert np.array_equal(live["n_spots_image"], streamed["n_spots_image"])
    bits = np.unpackbits(ref_binary, axis=-1, bitorder="little")[..., :live["spot_pixels_d0"]
                                                                    .shape[1]]
    for dd in range(d):
        assert np.array_equal(live[f"spot_pixels_d{dd}"], bits[dd].sum(axis=0)), dd
    assert live["spot_pixels_d0"].sum() > 0


def test_a_live_scan_without_any_spot_fails(tmp_path):
    """A background above every pixel leaves no spot: the scan's file is written, but the
    job says why the result is useless and exits 1 (the file flow's rule), never 0."""
    from kernels import TiffSeries
    from hedm.nfsynth import make_layer
    from streams import ScanGeometry, SimulatedScan
    from streams.simulate import array_source, run_producers

    layer = tmp_path / "layer"
    made = make_layer(str(layer), frames=2, grains=2, rsample=30.0)
    d, n = made["distances"], made["frames_per_distance"]
    reader = TiffSeries(str(layer / "stem_%06d.tif"), 0, d * n)
    stack = np.stack([reader.read(i) for i in range(reader.n_frames)])
    np.save(tmp_path / "bright.npy", np.full(stack.shape[1:], 65535, np.uint16))
    job = Job(tmp_path, "--analysis", "hedm.nfreduce", "--set",
              f"params={layer / 'nf.params'}", "--set", f"background={tmp_path / 'bright.npy'}")
    rv = job.rendezvous()
    g = ScanGeometry("nf0", 1, len(stack), 1, stack.shape[1:], "<u2", (d, n))
    run_producers(SimulatedScan(g, source=array_source(stack)), rv)
    rc, out, err = job.wait()
    assert rc == 1, out + err
    rep = job.report("nf0")
    assert rep["frames_complete"] == len(stack)       # every frame arrived: not a loss
    assert "no spot found at distance(s) 0, 1" in rep["result_invalid"], rep
    assert "RESULT INVALID" in out + err
    assert (job.out / "nf0.h5").exists()               # kept for inspection
