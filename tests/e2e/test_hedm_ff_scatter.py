"""FF-HEDM on a scatter block: a dataset larger than one node's storage.

Each emulated node's destination is a real tmpfs too small for the whole dataset:
a broadcast stage into it fails the capacity check before writing anything; the
scatter stage fits (each node holds about half the frames), each frame's task runs
where its frame is, and the peaks equal the same flow run on the shared files.
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

from tests.e2e.test_hedm_e2e import ROOT, _env, h5_datasets

MPIRUN = shutil.which("mpirun")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")]

FRAMES = 16


@pytest.fixture(scope="module")
def ff_series(tmp_path_factory):
    from kernels.synth import DetectorModel
    from hedm.synth import make_ff_dataset

    folder = str(tmp_path_factory.mktemp("ffs"))
    make_ff_dataset(folder, DetectorModel(shape=(256, 256), n_frames=FRAMES, n_spots=60, seed=5,
                                          frames_per_spot=1),
                    {"InputPattern": "ff_%06d.tif"})
    return folder


@pytest.fixture
def small_nodes():
    """Two 1.7 MiB tmpfs mounts, one per emulated node (the frames alone are 2 MiB)."""
    root = f"/dev/shm/pytest-ffs-{uuid.uuid4().hex[:8]}"
    mounted = []
    try:
        for node in ("node0", "node1"):
            d = os.path.join(root, node)
            os.makedirs(d)
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1700k", "tmpfs", d],
                               capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): the per-node "
                            "capacity limit needs a real small filesystem (root)")
            mounted.append(d)
        yield root
    finally:
        for d in mounted:
            subprocess.run(["umount", "-l", d])
        shutil.rmtree(root, ignore_errors=True)


def _run(out, hook, env, extra=(), pre=()):
    cmd = [MPIRUN, "-n", "4", "--oversubscribe", sys.executable, "-m", "workflows", "run",
           os.path.join(ROOT, "hedm", "ff.py"), "--out", str(out), "--emulate-nodes", "2", *pre,
           "--executor", "mpi", "--stage", os.path.join(ROOT, "hedm", "hooks", hook), "--",
           "--params", f"{env['HEDM_STAGE']}/%n/ff/ff.params", *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_ff_on_scatter_fits_where_broadcast_cannot_and_equals_it(ff_series, small_nodes,
                                                                   tmp_path):
    env = _env(HEDM_STAGE=small_nodes, HEDM_FF_DATA=ff_series)
    frames_bytes = sum(os.path.getsize(os.path.join(ff_series, f))
                       for f in os.listdir(ff_series) if f.endswith(".tif"))
    assert frames_bytes > 1700 << 10  # larger than one node's storage
    # the whole dataset to every node does not fit: refused before anything is written
    with open(os.path.join(tmp_path, "ff_all.hook"), "w") as f:
        f.write(f"broadcast to {small_nodes}/%n/ff files {{ {ff_series}/ff_*.tif "
                f"{ff_series}/dark_*.ge3 {ff_series}/ff.params }}\n")
    cmd = [MPIRUN, "-n", "2", "--oversubscribe", sys.executable, "-m", "stager", "stage",
           os.path.join(tmp_path, "ff_all.hook"), "--emulate-nodes", "2"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "space" in r.stderr.lower(), r.stderr
    assert not any(n.endswith(".tif") for _, _, fs in os.walk(small_nodes) for n in fs)

    # scattered: fits, every frame's task runs where its frame is
    out = tmp_path / "scatter"
    r = _run(out, "ff_scatter.hook", env, ["--hard-placement"])
    assert r.returncode == 0, r.stdout + r.stderr
    got, _ = h5_datasets(out / "ff_peaks.h5")
    run = json.load(open(out / "ff_run.json"))
    sc = run["scatter"]
    assert sc["frames_placed"] == FRAMES and sc["placed"] == FRAMES
    assert sc["ran_where_placed"] == FRAMES and sc["read_shared"] == []
    held = {n: sorted(f for f in os.listdir(os.path.join(small_nodes, n, "ff"))
                      if f.endswith(".tif")) for n in ("node0", "node1")}
    assert len(held["node0"]) + len(held["node1"]) == FRAMES, held
    assert not set(held["node0"]) & set(held["node1"]), held

    # the same flow on the shared files, no staging (local executor): the same peaks
    local = tmp_path / "local"
    cmd = [sys.executable, "-m", "workflows", "run", os.path.join(ROOT, "hedm", "ff.py"),
           "--out", str(local), "--executor", "local", "--workers", "2", "--",
           "--params", os.path.join(ff_series, "ff.params")]
    r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    want, _ = h5_datasets(local / "ff_peaks.h5")
    assert len(want["peaks"]) > 0
    for name in want:
        assert np.array_equal(got[name], want[name]), name


def test_a_vanished_frame_soft_reads_the_shared_file_hard_fails_naming_it(ff_series,
                                                                         small_nodes, tmp_path):
    """A leader hook removes frame 3's copy after staging (where a node lost it)."""
    env = _env(HEDM_STAGE=small_nodes, HEDM_FF_DATA=ff_series)
    hook = ["--leader-hook-startup", "tests.ff_vanish_hook:remove_frame_3"]
    out = tmp_path / "soft"
    r = _run(out, "ff_scatter.hook", env, pre=hook)
    assert r.returncode == 0, r.stdout + r.stderr
    sc = json.load(open(out / "ff_run.json"))["scatter"]
    # frame 3 read from the shared file; so did every task another node's idle worker
    # took over (soft placement), and only those
    assert 3 in sc["read_shared"], sc
    assert len(sc["read_shared"]) <= sc["placed"] - sc["ran_where_placed"] + 1, sc
    hard = tmp_path / "hard"
    r = _run(hard, "ff_scatter.hook", env, ["--hard-placement"], pre=hook)
    assert r.returncode != 0
    assert "the staged copy" in r.stderr and "ff_000003.tif is missing" in r.stderr, r.stderr
    assert "node node" in r.stderr, r.stderr
