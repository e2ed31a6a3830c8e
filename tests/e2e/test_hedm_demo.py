"""``python -m hedm.demo`` (what ``make demo`` runs), at a small size, as a user runs it:
raw frames -> staged stage 1 -> staged stage 2 -> map, scored against the truth."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.slow,
              # a backstop beyond the run's own 600 s (which reports what it printed):
              # setup.cfg's 300 s ends the whole xdist worker, not just the test
              pytest.mark.timeout(660),
              pytest.mark.skipif(shutil.which("mpirun") is None,
                                 reason="mpirun (openmpi-bin) is not installed")]


def test_demo_small_end_to_end(tmp_path):
    out = tmp_path / "demo-out"
    stage_root = f"/dev/shm/pytest-demo-{uuid.uuid4().hex[:8]}"
    bench = tmp_path / "bench"
    env = dict(os.environ)
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    # a user's map of the same name: --overwrite lets the demo replace it (refused without:
    # tests/e2e/test_hedm_nf_outputs.py)
    out.mkdir()
    (out / "nf_map.mic").write_text("my own map\n")
    # 3 grains in a 15 um disk (258 grid points), the demo's detector and 1 deg frames
    cmd = [sys.executable, "-m", "hedm.demo", "--np", "4", "--out", str(out),
           "--rsample", "15", "--grains", "3", "--stage-root", stage_root,
           "--record-phases", str(bench), "--overwrite"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        leftover = os.path.exists(stage_root)
        shutil.rmtree(stage_root, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not leftover, "the demo must clean the staged copies"
    text = proc.stdout
    for heading in ("truth", "dataset", "jobs", "stage 1", "stage 2", "phases", "accuracy",
                    "outputs"):
        assert f"\n{heading}" in text, text
    assert text.count("amplification 1.00") == 2 and "2 nodes (stripe)" in text
    # The printed report is also saved, and its numbers come from the run's files.
    saved = (out / "demo_report.txt").read_text().strip()
    assert saved.startswith("mpistage demo:") and text.rstrip().endswith(saved)
    facts = json.loads((out / "demo_report.json").read_text())
    images = facts["stage1"]["images"]
    assert images["pixels_set"] > 10_000
    assert images["missing"] + images["extra"] <= images["pixels_set"] // 10_000, images
    acc = facts["accuracy"]
    assert acc["points"] == 258 and acc["fraction"] >= 0.80, acc
    assert acc["interior_fraction"] >= 0.95 and facts["targets"]["met"], acc
    assert acc["grains_found"] == 3
    for stage in ("stage1", "stage2"):
        assert facts[stage]["runner"]["tasks"]["failed"] == 0
    assert facts["stage2"]["workflow"]["fit_log"]["input_loads"] <= 12   # once per worker
    for name in ("nf_map.h5", "nf_map.mic", "nf_map.png", "nf_map_vs_truth.png",
                 "nffit_run.json", "run_fit.json", "reduced/nf_spots.h5",
                 "reduced/nf_spots_binary.npy", "reduced/nf_run.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "nf_map.mic").read_text().startswith("%TriEdgeSize")
    assert "hedm/nffit.py" in (out / "demo_report.log").read_text()     # the jobs' log
    phases = json.loads((bench / "demo_phases.json").read_text())
    names = [p["phase"] for p in phases["phases"]]
    for want in ("compile kernels", "stage 1: stage", "stage 1: per-frame tasks",
                 "stage 1: drain", "stage 2: stage", "stage 2: fit", "stage 2: write",
                 "stage 2: drain", "total"):
        assert want in names, names
    assert all(p["seconds"] is not None and p["seconds"] >= 0 for p in phases["phases"])
    assert "| stage 2: fit |" in (bench / "demo_phases.md").read_text()
