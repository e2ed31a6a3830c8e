"""FF-HEDM from raw frames to grains: a synthetic sweep of 20 grains (random orientations,
positions and strains; spots of different grains overlap) rendered by the project's forward
model, stage 1 (``hedm/ff.py``, the peak search) and stage 2 (``hedm/ffgrains.py``:
spots, indexing, one refinement task per grain) run as users run them, under the
workflow runner with the local executor.

What must come out: every grain, no extra, orientations within 0.05 deg, positions within
a tenth of the beam height, strains within 1e-4; Grains.csv in MIDAS's layout. A sweep
read with the wrong distance fails (exit 1) naming the cause and the distance the spots
suggest.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.slow,    # 1-4 min: 360 frames through stage 1, then stage 2 thrice
              pytest.mark.timeout(900)]  # the first test also builds ``ff_sweep``
#: Tens of grains: on the 192 x 192 px detector one spot in five lies within 5 px of another
N = 20


def _env():
    env = dict(os.environ)
    env["STAGER_PROGRESS"] = "0"
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    return env


def run(flow, out, flow_args, check=True, timeout=600):
    cmd = [sys.executable, "-m", "workflows", "run", os.path.join(ROOT, "hedm", flow),
           "--executor", "local", "--workers", "2", "--out", str(out), "--", *flow_args]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def sweep(ff_sweep):
    """The commands of docs/guide/hedm.md, "Far field to grains", as printed: stage 1 and
    stage 2 into ``out``, the seeds (tests/conftest.py's ``ff_sweep``, shared with
    test_hedm_ff_grains_stream.py)."""
    assert f"--grains {N} " in ff_sweep["text"]
    return {"info": {"params": str(ff_sweep["params"])}, "out": ff_sweep["out"],
            "seeds": ff_sweep["seeds"]}


def test_raw_frames_to_grains(sweep):
    from hedm.ffsynth import load_sweep_truth, score_grains
    from hedm.grainscsv import COLUMNS, read_grains_csv

    info, out = sweep["info"], sweep["out"]
    truth = load_sweep_truth(os.path.dirname(info["params"]))
    # the sweep holds overlapping spots: spots of two grains within 3 px on a common frame
    sp, owner = truth["spots"], truth["owner"]
    close = ((np.hypot(sp[:, None, 3] - sp[None, :, 3], sp[:, None, 4] - sp[None, :, 4]) < 3)
             & (np.abs(sp[:, None, 5] - sp[None, :, 5]) < 1.5)
             & (owner[:, None] != owner[None, :]))
    assert close.sum() >= 2

    g = read_grains_csv(str(out / "Grains.csv"))
    rows = g["rows"]
    assert g["header"]["NumGrains"] == str(N) and rows.shape == (N, len(COLUMNS)) == (N, 47)
    assert list(rows[:, 0]) == list(range(1, N + 1))
    head = open(out / "Grains.csv").read().splitlines()
    assert head[8] == "%" + "\t".join(COLUMNS)       # MIDAS's column line, tab-separated
    u = rows[:, 1:10].reshape(-1, 3, 3)
    strain = rows[:, 24:33].reshape(-1, 3, 3) / 1e6   # eFab, x 10^6 in the file
    s = score_grains(truth, u, rows[:, 10:13], strain)
    assert s["found"] == N and s["missed"] == 0 and s["extra"] == 0, s
    assert s["misorientation_deg"].max() < 0.05, s["misorientation_deg"]
    assert s["position_um"].max() < 0.1 * 100.0, s["position_um"]          # Hbeam 100 um
    assert s["strain_err"].max() < 1e-4, s["strain_err"]
    # the Euler angles are the orientation's
    from kernels.crystal import euler_to_matrix
    np.testing.assert_allclose(euler_to_matrix(*rows[:, 44:47].T), u, atol=1e-5)

    rec = json.load(open(out / "ffgrains_run.json"))
    res = rec["result"]
    assert res["problem"] == "" and res["grains"] == N and res["not_converged"] == []
    assert res["indexed_fraction"] > 0.9
    # one refinement task per indexed grain, created after indexing
    assert len(rec["refine"]) == rec["index"]["candidates"] >= N
    assert rec["phases"]["refine"]["start"] >= rec["phases"]["index"]["end"]
    import h5py
    with h5py.File(out / "Grains.h5", "r") as f:
        assert f["grains"].shape == (N, 47)
        pairs = f["grain_spots"][()]
        shared = f["shared_spots"][()]
    # a shared spot is listed once, and is in two grains' spot lists
    assert len(set(shared.tolist())) == len(shared) == res["shared_spots"]
    for sid in shared[:5]:
        assert (pairs[:, 1] == sid).sum() >= 2
    # FF's grains as NF's seeds (MIDAS's SeedOrientations), the guide's last command
    seeds = sweep["seeds"]
    from hedm.nffit import read_seeds
    from kernels.crystal import misorientation
    got = read_seeds(str(seeds), N)
    assert np.all(misorientation(got, u) < 1e-4)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (openmpi-bin) is not installed")
def test_mpi_executor_gives_the_same_grains(sweep, tmp_path):
    """The data-dependent refinement tasks on the mpi executor (3 ranks): the same file."""
    out = tmp_path / "mpi"
    env = _env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [shutil.which("mpirun"), "-n", "3", "--oversubscribe", sys.executable, "-m",
           "workflows", "run", os.path.join(ROOT, "hedm", "ffgrains.py"), "--out", str(out),
           "--", "--params", sweep["info"]["params"],
           "--PeaksFile", str(sweep["out"] / "ff_peaks.h5")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "Grains.csv").read_bytes() == (sweep["out"] / "Grains.csv").read_bytes()
    rec = json.load(open(out / "ffgrains_run.json"))
    assert rec["executor"] == "mpi" and len(rec["refine"]) >= N


def test_wrong_distance_fails_naming_the_cause(sweep, tmp_path):
    info = sweep["info"]
    out = tmp_path / "wrong"
    proc = run("ffgrains.py", out, ["--params", info["params"], "--Lsd", "135000",
                                    "--PeaksFile", str(sweep["out"] / "ff_peaks.h5")],
               check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "the detector geometry does not match the frames" in text
    rec = json.load(open(out / "ffgrains_run.json"))
    problem = rec["result"]["problem"]
    guess = float(problem.split("Lsd about ")[1].split()[0])
    assert abs(guess - 120000) < 0.01 * 120000, problem       # the sweep's real distance
