"""FF's grains seed NF, from raw FF and raw NF frames: ``python -m hedm.demo --seeds ff``
(what ``make demo-ff-nf`` runs), at a small size, as a user runs it.

One microstructure (3 Voronoi grains in a 15 um disk) seen by both detectors: NF stage 1
on the layer's raw frames, FF stage 1 on raw FF frames rendered from the same grains, FF
stage 2 (indexing, one refinement task per grain), then NF stage 2 seeded from FF's
``Grains.csv`` instead of the simulator's seeds -- every job staged under ``mpirun``,
drained and cleaned. The map must reach the NF demo's targets (80% of the grid points,
95% of the interior points within 0.25 deg of the truth); ``--record-phases`` times FF's
phases between NF's.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.slow,       # four staged mpirun jobs, four cleans
              pytest.mark.timeout(660),
              pytest.mark.skipif(shutil.which("mpirun") is None,
                                 reason="mpirun (openmpi-bin) is not installed")]


def test_raw_ff_and_nf_frames_to_a_map_seeded_by_ff(tmp_path):
    from hedm.grainscsv import read_grains_csv
    from hedm.nffit import read_seeds

    out = tmp_path / "demo-out"
    bench = tmp_path / "bench"
    stage_root = f"/dev/shm/pytest-ffnf-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "hedm.demo", "--np", "4", "--out", str(out), "--rsample",
           "15", "--grains", "3", "--stage-root", stage_root, "--seeds", "ff",
           "--record-phases", str(bench)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        leftover = os.path.exists(stage_root)
        shutil.rmtree(stage_root, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not leftover, "the chain must clean the staged copies"
    facts = json.loads((out / "demo_report.json").read_text())
    ff = facts["ff"]
    # FF from raw frames: every grain, none extra, orientations well inside 0.25 deg
    assert ff["found"] == 3 and ff["missed"] == 0 and ff["extra"] == 0, ff
    assert ff["max_misorientation_deg"] < 0.05, ff
    # the FF stages ran staged under mpirun, every task succeeded
    for name in ("run.json", "run_grains.json"):
        run = json.loads((out / "ff" / name).read_text())
        assert run["stage"]["bytes_written"] > 0 and run["tasks"]["failed"] == 0, run
    # NF stage 2 was seeded with FF's grains, not the layer's (13 seeds, 10 spurious)
    staged_seeds = read_seeds(str(out / "dataset" / "nf-ffseeds" / "seeds.txt"))
    csv = read_grains_csv(str(out / "ff" / "Grains.csv"))["rows"][:, 1:10].reshape(-1, 3, 3)
    assert len(staged_seeds) == 3
    assert np.allclose(staged_seeds, csv, atol=1e-6)
    assert facts["stage2"]["runner"]["stage"]["files"] == 4
    # ... and reached the NF demo's accuracy
    acc = facts["accuracy"]
    assert acc["fraction"] >= 0.80 and acc["interior_fraction"] >= 0.95, acc
    assert facts["targets"]["met"] and acc["grains_found"] == 3, acc
    assert "FF seeds" in proc.stdout and "3 found, 0 missed, 0 extra" in proc.stdout
    # --record-phases: FF's phases between NF's, from the FF jobs' own records
    rec = json.loads((bench / "demo_ff_nf_phases.json").read_text())
    names = [p["phase"] for p in rec["phases"]]
    order = ["stage 1: drain", "FF truth + raw frames", "FF stage 1: stage",
             "FF stage 1: per-frame tasks", "FF stage 1: drain", "FF stage 1: whole job",
             "FF stage 2: stage", "FF stage 2: spots", "FF stage 2: indexing",
             "FF stage 2: refinement", "FF stage 2: write", "FF stage 2: drain",
             "FF stage 2: whole job", "stage 2: fit", "total"]
    assert [n for n in names if n in order] == order, names
    assert all(p["seconds"] is not None and p["seconds"] >= 0 for p in rec["phases"])
    ff2 = rec["task_phases"]["ff_stage2"]
    assert ff2["refine"]["tasks"] == 3 and ff2["refine"]["start"] >= ff2["index"]["end"]
    assert rec["staging"]["ff_stage2"]["files"] >= 2 and rec["ff_grains"]["found"] == 3
    assert "| FF stage 2: refinement |" in (bench / "demo_ff_nf_phases.md").read_text()
    assert not (bench / "demo_phases.json").exists()      # the NF demo's record is not replaced
