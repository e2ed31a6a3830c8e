"""The staged NF- and FF-HEDM workflows end to end, the way users run them.

Each test starts ``mpirun -n 4 --oversubscribe python -m workflows run
hedm/XX.py --stage hedm/hooks/XX.hook --emulate-nodes 2`` (or the
``local`` executor without mpirun) as a subprocess with a timeout, on a small
synthetic dataset with ground truth, and checks the drained result files:

* spots / peaks equal, exactly, what the kernels give when run serially on
  the same frames in one process;
* >= 95% of the planted spots are recovered;
* the ``local`` and ``mpi`` executors write identical HDF5 datasets.
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
        env.pop(var, None)  # a serial test must not look like an MPI rank to the child
    return env


def run(flow, out, flow_args, *, np=None, stage=None, env=None, executor=None, timeout=300):
    cmd = [sys.executable, "-m", "workflows", "run", os.path.join(ROOT, "hedm", flow),
           "--out", str(out)]
    if executor:
        cmd += ["--executor", executor, "--workers", "2"]
    if stage:
        cmd += ["--stage", os.path.join(ROOT, "hedm", "hooks", stage), "--emulate-nodes", "2"]
    cmd += ["--", *flow_args]
    if np:
        cmd = [MPIRUN, "-n", str(np), "--oversubscribe", *cmd]
    proc = subprocess.run(cmd, cwd=ROOT, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture
def stage_root():
    root = f"/dev/shm/pytest-hedm-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def nf_data(tmp_path_factory):
    from kernels.synth import DetectorModel
    from hedm.synth import make_nf_dataset

    folder = str(tmp_path_factory.mktemp("nf"))
    make_nf_dataset(folder, DetectorModel(shape=(128, 112), n_frames=16, n_spots=40, seed=11),
                    {"BackgroundTasks": 3})
    return folder


@pytest.fixture(scope="module")
def ff_data(tmp_path_factory):
    from kernels.synth import DetectorModel
    from hedm.synth import make_ff_dataset

    folder = str(tmp_path_factory.mktemp("ff"))
    make_ff_dataset(folder, DetectorModel(shape=(120, 128), n_frames=12, n_spots=48, seed=12,
                                          frames_per_spot=1))
    return folder


def h5_datasets(path):
    import h5py

    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f}, dict(f.attrs)


def same_attrs(a, b):
    """Equal root attributes (some are arrays: the scan's shape, the frames' shape)."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def serial_nf(folder):
    """The NF kernels run serially, in this process, on the same frames."""
    from kernels.nf import NFWorkspace, median_background, reduce_frame
    from kernels import TiffSeries
    from hedm.nf import kernel_params, read_nf_params, spot_tables
    from hedm.common import merge_tables

    p = read_nf_params(os.path.join(folder, "nf.params"))
    reader = TiffSeries(os.path.join(folder, p["InputPattern"]), p["RawStartNr"],
                        p["NrFilesPerDistance"])
    stack = np.stack([reader.read(i) for i in range(reader.n_frames)])
    background = median_background(stack)
    work = NFWorkspace(background.shape)
    tables = [spot_tables(p["RawStartNr"] + i, reduce_frame(stack[i], background,
                                                             kernel_params(p), work))
              for i in range(len(stack))]
    table = tables[0]
    for t in tables[1:]:
        table = merge_tables(table, t)
    return table, background, stack.max(axis=0)


def test_nf_staged_mpi_equals_serial_kernels_and_local(nf_data, stage_root, tmp_path):
    from hedm.synth import load_truth, score

    env = _env(HEDM_STAGE=stage_root, HEDM_NF_DATA=nf_data)
    out = tmp_path / "mpi"
    proc = run("nf.py", out, ["--params", f"{stage_root}/%n/nf/nf.params",
                                   "--results", f"{stage_root}/%n/results"],
               np=4, stage="nf.hook", env=env)
    assert "amplification 1.00" in proc.stdout + proc.stderr
    # Staged on both emulated nodes; node-local results drained, then removed.
    for node in ("node0", "node1"):
        assert len(glob.glob(f"{stage_root}/{node}/nf/stem_*.tif")) == 16
        assert not os.path.exists(f"{stage_root}/{node}/results")
    got, attrs = h5_datasets(out / "nf_spots.h5")
    table, background, max_projection = serial_nf(nf_data)
    assert np.array_equal(got["spots"], table["pixels"])
    assert np.array_equal(got["spot_centroids"], table["centroids"])
    assert np.array_equal(got["frames"], table["frames"])
    assert np.array_equal(got["background"], background[None])      # (distances, H, W)
    assert np.array_equal(got["max_projection"], max_projection[None])
    assert attrs["NrFilesPerDistance"] == 16 and attrs["workflow"] == "hedm_nf"
    assert os.path.getsize(out / "nf_spots.png") > 10_000
    s = score(load_truth(nf_data), got["spot_centroids"])
    assert s["planted"] >= 100 and s["recovered_fraction"] >= 0.95, s
    # Tasks on the same worker reused the background: one read per worker at most.
    record = json.load(open(out / "nf_run.json"))
    log = record["frame_log"]
    assert log["tasks"] == 16 and log["background_reads"] <= 3
    # the runner drained the flow's --results and said so in the flow's record
    assert record["drain"]["files"] >= 2 and record["drain"]["bytes"] > 0, record["drain"]
    assert log["background_reads"] + log["background_cache_hits"] == 16

    # The same workflow on the local executor (no MPI, no staging): identical datasets.
    local = tmp_path / "local"
    run("nf.py", local, ["--params", os.path.join(nf_data, "nf.params")], executor="local")
    other, other_attrs = h5_datasets(local / "nf_spots.h5")
    assert sorted(other) == sorted(got)
    for name in got:
        assert np.array_equal(other[name], got[name]), name
        assert other[name].dtype == got[name].dtype, name
    assert same_attrs(other_attrs, attrs)


def test_ff_staged_mpi_equals_serial_kernels_and_local(ff_data, stage_root, tmp_path):
    from kernels.ff import find_peaks
    from kernels import GEFile
    from hedm.ff import kernel_params, load_dark, read_ff_params
    from hedm.synth import load_truth, score

    env = _env(HEDM_STAGE=stage_root, HEDM_FF_DATA=ff_data)
    out = tmp_path / "mpi"
    run("ff.py", out, ["--params", f"{stage_root}/%n/ff/ff.params",
                            "--results", f"{stage_root}/%n/results"],
        np=4, stage="ff.hook", env=env)
    got, attrs = h5_datasets(out / "ff_peaks.h5")

    p = read_ff_params(os.path.join(ff_data, "ff.params"))
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    dark = load_dark(os.path.join(ff_data, p["Dark"]), shape)
    reader = GEFile(os.path.join(ff_data, p["InputPattern"]), shape=shape)
    want = np.concatenate([find_peaks(reader.read(i), dark, kernel_params(p), frame_index=i)
                           for i in range(p["NrFrames"])])
    assert np.array_equal(got["peaks"], want)
    assert np.array_equal(got["dark"], dark)
    assert got["frames"]["n_peaks"].sum() == len(want)
    csv_lines = open(out / "ff_peaks.csv").read().splitlines()
    assert len(csv_lines) == len(want) + 1 and csv_lines[0].startswith("frame,peak,")
    s = score(load_truth(ff_data), got["peaks"])
    assert s["planted"] >= 40 and s["recovered_fraction"] >= 0.95, s
    log = json.load(open(out / "ff_run.json"))["frame_log"]
    assert log["dark_reads"] <= 3 and log["dark_reads"] + log["dark_cache_hits"] == 12

    local = tmp_path / "local"
    run("ff.py", local, ["--params", os.path.join(ff_data, "ff.params")], executor="local")
    other, other_attrs = h5_datasets(local / "ff_peaks.h5")
    assert sorted(other) == sorted(got)
    for name in got:
        assert np.array_equal(other[name], got[name]), name
    assert same_attrs(other_attrs, attrs)


def test_bad_parameter_fails_all_ranks_with_file_line(nf_data, stage_root, tmp_path):
    bad = tmp_path / "bad.params"
    text = open(os.path.join(nf_data, "nf.params")).read()
    bad.write_text(text + "LoGMaskRadis 4\n")
    lineno = len(text.splitlines()) + 1
    cmd = [MPIRUN, "-n", "4", "--oversubscribe", sys.executable, "-m", "workflows", "run",
           os.path.join(ROOT, "hedm", "nf.py"), "--out", str(tmp_path / "o"), "--",
           "--params", str(bad)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert (f"{bad}:{lineno}: unknown parameter 'LoGMaskRadis': did you mean 'LoGMaskRadius'?"
            in proc.stderr), proc.stderr
