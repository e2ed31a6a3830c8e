"""The ``staged`` analysis source: a dataset a ``scatter ... h5`` block spread over the
nodes in frame ranges is analysed where each range lies, from its node-local copy.

``mpirun -n 4 python -m workflows run analyses.runner --stage s.hook --emulate-nodes 2
-- --frames scan.h5:/entry/data/data``: the per-frame sums must equal the source's,
and every partition must have been placed as a ``staged`` ref on a node holding its
range, reading a copy that exists there (not the shared file).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import _env

h5py = pytest.importorskip("h5py")
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def test_a_scattered_dataset_is_read_from_each_nodes_frame_range(tmp_path):
    rng = np.random.default_rng(9)
    stack = rng.integers(0, 4000, (12, 6, 5)).astype(np.uint16)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f.create_dataset("entry/data/data", data=stack, chunks=(1, 6, 5))
    (tmp_path / "s.hook").write_text(f"scatter to {tmp_path}/nodes/%n h5 {{\n"
                                     f"  {tmp_path}/scan.h5:/entry\n}}\n")
    out = tmp_path / "out"
    r = subprocess.run(
        ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m", "workflows", "run",
         "analyses.runner", "--stage", "s.hook", "--emulate-nodes", "2", "--out", str(out),
         "--", "--frames", "scan.h5:/entry/data/data", "--partition-frames", "4"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out / "scan.h5", "r") as f:
        assert np.array_equal(f["sum_image"][()].reshape(-1),
                              stack.reshape(12, -1).sum(axis=1, dtype=np.float64))
        assert f["frames_complete"][()].all()

    # the placement the run made, made again from the stage the run left
    from analyses.runner import place
    from analyses.sources import partitions, read_partition

    nodes = sorted(os.listdir(tmp_path / "nodes"))
    assert len(nodes) == 2, nodes
    args = argparse.Namespace(stage_report=argparse.Namespace(nodes=tuple(nodes)),
                              stage_spec=str(tmp_path / "s.hook"))
    refs = place(partitions(str(tmp_path / "scan.h5"), 12, 4, dataset="/entry/data/data"),
                 args)
    assert {r.kind for r in refs} == {"staged"} and {r.node for r in refs} == set(nodes)
    assert sorted(p for r in refs for p in range(r.start, r.stop)) == list(range(12))
    for ref in refs:
        assert ref.path.startswith(str(tmp_path / "nodes" / ref.node)), ref
        assert os.path.isfile(ref.path) and ref.shared == (str(tmp_path / "scan.h5"),)
        frames, positions, _ = read_partition(ref)
        assert np.array_equal(frames, stack[ref.start:ref.stop]), ref
        # soft placement elsewhere: the shared file, at the positions themselves
        shared, _, _ = read_partition(ref, [ref.shared[0]])
        assert np.array_equal(shared, frames)
