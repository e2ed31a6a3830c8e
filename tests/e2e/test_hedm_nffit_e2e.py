"""NF-HEDM stage 2 staged under MPI equals the serial run, exactly.

``mpirun -n 4 python -m workflows run hedm/nffit.py --stage hedm/hooks/nffit.hook
--emulate-nodes 2`` (the binary images, parameter file, grid and seeds broadcast to
both emulated nodes, 3 worker ranks fitting blocks of grid rows on their node's
memory-mapped copy, results drained) against ``--executor inline`` on the unstaged
files in this one process: every dataset of the HDF5 map and every byte of the
``.mic`` are equal.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = shutil.which("mpirun")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")]


def _env(**extra):
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", STAGER_PROGRESS="0", **extra)
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    return env


@pytest.fixture
def layer(nf_layer):
    """The session's synthetic NF layer (tests/conftest.py ``nf_layer``)."""
    return nf_layer


@pytest.fixture
def stage_root():
    root = f"/dev/shm/pytest-nffit-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def h5_map(path):
    import h5py

    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f}, dict(f.attrs)


def test_staged_mpi_map_equals_serial_map(layer, stage_root, tmp_path):
    flow = os.path.join(ROOT, "hedm", "nffit.py")
    env = _env(HEDM_STAGE=stage_root, HEDM_NF_DATA=layer, HEDM_NF_REDUCED=layer)
    mpi_out = tmp_path / "mpi"
    cmd = [MPIRUN, "-n", "4", "--oversubscribe", sys.executable, "-m", "workflows", "run", flow,
           "--stage", os.path.join(ROOT, "hedm", "hooks", "nffit.hook"), "--emulate-nodes", "2",
           "--out", str(mpi_out), "--", "--params", f"{stage_root}/%n/nffit/nf.params",
           "--results", f"{stage_root}/%n/results", "--GridPointsPerTask", "20"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "amplification 1.00" in proc.stdout + proc.stderr
    # exactly stage 2's inputs on both nodes; node-local results drained, then removed
    for node in ("node0", "node1"):
        staged = sorted(os.path.basename(p) for p in glob.glob(f"{stage_root}/{node}/nffit/*"))
        assert staged == ["grid.txt", "nf.params", "nf_spots_binary.npy", "seeds.txt"], staged
        assert not os.path.exists(f"{stage_root}/{node}/results")

    serial_out = tmp_path / "serial"
    cmd = [sys.executable, "-m", "workflows", "run", flow, "--executor", "inline",
           "--out", str(serial_out), "--", "--params", os.path.join(layer, "nf.params")]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    got, got_attrs = h5_map(mpi_out / "nf_map.h5")
    want, want_attrs = h5_map(serial_out / "nf_map.h5")
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].tobytes() == want[name].tobytes(), name       # NaNs included
    assert got_attrs["GridPointsPerTask"] == 20 and want_attrs["GridPointsPerTask"] == 0
    got_attrs.pop("GridPointsPerTask")
    want_attrs.pop("GridPointsPerTask")
    assert got_attrs == want_attrs
    assert (mpi_out / "nf_map.mic").read_bytes() == (serial_out / "nf_map.mic").read_bytes()
    assert (got["confidence"] > 0.9).mean() > 0.9

    # every worker mapped the images (and read the other inputs) once, then reused them
    log = json.load(open(mpi_out / "nffit_run.json"))["fit_log"]
    assert log["tasks"] == 13 and log["points"] == 258
    workers = {t["worker"] for t in log["per_task"]}
    assert 1 <= len(workers) <= 3
    assert log["input_loads"] == 4 * len(workers), log["input_loads"]
    for w in workers:
        mine = [t for t in log["per_task"] if t["worker"] == w]
        assert sorted(t["cached_inputs"] for t in mine) == [0] + [4] * (len(mine) - 1)
    assert np.all(np.diff([t["start"] for t in log["per_task"]]) > 0)   # merged in grid order
