"""FF-HEDM on sweeps MIDAS's way (issue 46): raw frames rendered from MIDAS's own forward
model transcribed from its C source (``tests/ff_midas.py``, not the project's model), in
MIDAS's conventions and keys, run through the documented chain (``hedm.ff``, then
``hedm.ffgrains``) as users run it.

What must come out: the same grains swept with ``OmegaStep -1`` (from ``OmegaStart 180``)
and with ``OmegaStep +1`` (from ``OmegaFirstFile -180``, MIDAS's alias) both give the true
grains -- orientations within 0.05 deg, positions within 10 um, strains within 1e-4 --
never their mirror image; the ``-1`` sweep's frames labelled with the opposite rotation
sense (the issue's "fix") are refused, saying the spots fit the opposite sense.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.slow      # about 20 s idle: two sweeps of 360 frames, both stages
N = 6
SHAPE = (192, 192)

GEOMETRY = """\
LatticeConstant 4.08 4.08 4.08 90 90 90
SpaceGroup 225
Wavelength 0.172979
Lsd 120000
BC 96.3 95.7
px 200
RhoD 18500
MinEta 6
OmegaRange -180 180
Rsample 150
Hbeam 100
StepSizePos 400
StepSizeOrient 1
OverAllRingToIndex 1
Completeness 0.7
MarginOme 1
MarginEta 300
MarginRadial 300
Width 400
MergePixels 2.5
BeamThickness 100
InputPattern ff_000001.ge3
Dark dark_000001.ge3
RawStartNr 0
NrFilesPerSweep 1
Threshold 40
MinNrPx 3
MaxNrPx 600
OutputFileName ff_peaks
NrPixelsY 192
NrPixelsZ 192
"""

SWEEPS = {"minus": "OmegaStart 180\nOmegaStep -1\n", "plus": "OmegaFirstFile -180\nOmegaStep 1\n"}


def run(flow, out, flow_args, check=True):
    env = dict(os.environ, STAGER_PROGRESS="0")
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "workflows", "run", f"hedm.{flow}", "--executor", "local",
           "--workers", "2", "--out", str(out), "--", *flow_args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    from hedm.ffparams import GRAINS_SCHEMA, PEAKS_SCHEMA, grains_params
    from hedm.ffsynth import _grains
    from hedm.params import parse_params
    from tests.ff_midas import render, sweep_spots, tilts_rx_ry_rz, write_sweep

    base = tmp_path_factory.mktemp("midas_ff")
    text = GEOMETRY + SWEEPS["minus"]
    p = grains_params(parse_params(text, GRAINS_SCHEMA, "<t>", {q.key for q in PEAKS_SCHEMA}))
    rng = np.random.default_rng(46)
    truth = _grains(N, p, 5e-4, rng)       # random orientations, positions, strains (no model)
    from hedm.ffparams import ff_arrays
    hkls = ff_arrays(p, 360, SHAPE).hkl     # the reflections (integers) on the detector
    amp = rng.uniform(6000, 15000, N)
    out = {"truth": truth}
    for name, omega in SWEEPS.items():
        start, step = (180.0, -1.0) if name == "minus" else (-180.0, 1.0)
        q = {"wl": p["Wavelength"], "lsd": p["Lsd"], "ybc": p["BC"][0], "zbc": p["BC"][1],
             "px": p["px"], "trs": tilts_rx_ry_rz(0, 0, 0), "start": start, "step": step}
        grains = [{"u": truth["u"][i], "pos": truth["pos"][i], "lattice": truth["lattice"][i]}
                  for i in range(N)]
        spots = sweep_spots(grains, hkls, q, SHAPE, 360, p["MinEta"])
        mean = render(spots[:, [2, 3, 4]], amp[spots[:, 6].astype(int)], 360, SHAPE)
        folder = base / name
        params = write_sweep(str(folder), mean, GEOMETRY + omega, np.random.default_rng(1))
        run("ff", folder / "out", ["--params", params])
        out[name] = {"params": params, "out": folder / "out", "spots": spots}
    return out


def _grains_of(out):
    from hedm.grainscsv import read_grains_csv

    rows = read_grains_csv(str(out / "Grains.csv"))["rows"]
    return rows[:, 1:10].reshape(-1, 3, 3), rows[:, 10:13], rows[:, 24:33].reshape(-1, 3, 3) / 1e6


@pytest.mark.parametrize("name", list(SWEEPS))
def test_either_sign_of_omega_step_gives_the_true_grains(sweeps, name):
    from hedm.ffsynth import score_grains

    s = sweeps[name]
    run("ffgrains", s["out"], ["--params", s["params"],
                               "--PeaksFile", str(s["out"] / "ff_peaks.h5")])
    u, pos, strain = _grains_of(s["out"])
    score = score_grains(sweeps["truth"], u, pos, strain)
    assert score["found"] == N and score["missed"] == 0 and score["extra"] == 0, score
    assert score["misorientation_deg"].max() < 0.05, score["misorientation_deg"]
    assert score["position_um"].max() < 10.0, score["position_um"]
    assert score["strain_err"].max() < 1e-4, score["strain_err"]
    rec = json.load(open(s["out"] / "ffgrains_run.json"))
    assert rec["result"]["problem"] == ""
    # a second run into the same --out replaces the first's files (they are mpistage's)
    run("ffgrains", s["out"], ["--params", s["params"],
                               "--PeaksFile", str(s["out"] / "ff_peaks.h5")])


def test_the_opposite_rotation_sense_is_refused(sweeps):
    """The -1 sweep's frames read with the opposite sense (OmegaStart -180, OmegaStep +1):
    no grain, and the run says the spots fit the opposite sense (exit 1)."""
    s = sweeps["minus"]
    out = s["out"].parent / "flipped"
    proc = run("ffgrains", out, ["--params", s["params"], "--OmegaStart", "-180",
                                 "--OmegaStep", "1", "--PeaksFile",
                                 str(s["out"] / "ff_peaks.h5")], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    problem = json.load(open(out / "ffgrains_run.json"))["result"]["problem"]
    assert "opposite rotation sense" in problem, problem
