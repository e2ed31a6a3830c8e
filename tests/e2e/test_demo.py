"""``python -m hedm.demo`` (what ``make demo`` runs), at a small size, as a user runs it."""
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
              pytest.mark.skipif(shutil.which("mpirun") is None,
                                 reason="mpirun (openmpi-bin) is not installed")]


def test_demo_small_end_to_end(tmp_path):
    out = tmp_path / "demo-out"
    stage_root = f"/dev/shm/pytest-demo-{uuid.uuid4().hex[:8]}"
    bench = tmp_path / "bench"
    env = dict(os.environ)
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "hedm.demo", "--np", "4", "--out", str(out),
           "--frames", "24", "--size", "128", "--spots", "40", "--stage-root", stage_root,
           "--record-phases", str(bench)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    finally:
        leftover = os.path.exists(stage_root)
        shutil.rmtree(stage_root, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not leftover, "the demo must clean the staged copies"
    text = proc.stdout
    for heading in ("dataset", "staging", "tasks", "phases", "spots", "outputs"):
        assert f"\n{heading}" in text, text
    assert "amplification 1.00" in text and "2 nodes (stripe)" in text
    # The printed report is also saved, and its numbers come from the run's files.
    saved = (out / "demo_report.txt").read_text().strip()
    assert saved.startswith("mpistage demo:") and text.rstrip().endswith(saved)
    facts = json.loads((out / "demo_report.json").read_text())
    score = facts["spots"]["score"]
    assert score["planted"] == 120 and score["recovered_fraction"] >= 0.95, score
    assert facts["tasks"]["failed"] == 0
    assert facts["frame_log"]["background_reads"] <= 3
    for name in ("nf_spots.h5", "nf_spots.png", "nf_run.json", "run.json"):
        assert (out / name).stat().st_size > 0, name
    phases = json.loads((bench / "demo_phases.json").read_text())
    names = [p["phase"] for p in phases["phases"]]
    for want in ("stage", "background", "per-frame tasks", "reduce (tree)", "drain"):
        assert want in names, names
    assert all(p["seconds"] is not None and p["seconds"] >= 0 for p in phases["phases"])
    assert "| stage |" in (bench / "demo_phases.md").read_text()
