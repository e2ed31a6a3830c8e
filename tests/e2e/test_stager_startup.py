"""Start-up: what a rank of ``stager stage`` imports, measured under a real ``mpirun``.

At thousands of ranks every module imported is a metadata lookup on the
shared filesystem from every rank. Rank 0 plans (it needs lark; h5py when the
spec has ``h5`` blocks); the other ranks receive the plan and must load none
of the heavy packages, and a rank that is not a node's leader needs no h5py
even when HDF5 selections are staged.
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

HEAVY = ("lark", "h5py", "numba", "scipy", "matplotlib", "parsl", "numpy", "zmq", "tifffile")

DRIVER = """
import json, os, sys
from stager.cli import main
rc = main(sys.argv[2:])
from mpi4py import MPI
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
rank = MPI.COMM_WORLD.rank
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "rc": rc, "heavy": heavy}, f)
""".replace("HEAVY", repr(HEAVY))


def _loaded(tmp_path, spec, ranks=3, nodes=2):
    """Run ``stager stage`` through its CLI entry on ``ranks`` ranks; rank -> modules loaded."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (make setup installs openmpi-bin)")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    seen = tmp_path / "loaded"
    seen.mkdir()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable, str(driver), str(seen),
           "stage", str(spec), "--emulate-nodes", str(nodes), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = [json.loads(p.read_text()) for p in sorted(seen.iterdir())]
    assert sorted(o["rank"] for o in out) == list(range(ranks)) and all(o["rc"] == 0 for o in out)
    return {o["rank"]: set(o["heavy"]) for o in out}


def test_non_planning_ranks_load_no_heavy_package(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(os.urandom(100_000))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {tmp_path}/src/a.bin\n}}\n")
    loaded = _loaded(tmp_path, spec)
    assert "lark" in loaded[0]  # rank 0 parsed the spec: the measurement sees imports
    # 3 ranks on 2 emulated nodes (node0: rank 0, node1: ranks 1, 2): rank 1 is node1's
    # leader, rank 2 neither planner nor leader
    for rank in (1, 2):
        assert loaded[rank] == set(), f"rank {rank} loaded {sorted(loaded[rank])}"


def test_only_leaders_load_h5py_for_hdf5_selections(tmp_path):
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        stack = np.arange(4096, dtype=np.uint16).reshape(4, 32, 32)
        f.create_dataset("entry/data/data", data=stack, chunks=(1, 32, 32))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n h5 {{\n"
                    f"  {tmp_path}/scan.h5:/entry/data/data\n}}\n")
    loaded = _loaded(tmp_path, spec)
    from core.nodes import emulated_ids

    assert emulated_ids(3, 2) == ["node0", "node1", "node1"]
    assert {"lark", "h5py"} <= loaded[0]
    assert "h5py" in loaded[1]           # node1's leader reads and writes HDF5
    assert not loaded[2] & {"lark", "h5py", "numba", "scipy", "matplotlib", "parsl"}, \
        f"rank 2 (not a leader, not the planner) loaded {sorted(loaded[2])}"
