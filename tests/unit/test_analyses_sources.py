"""The offline sources are rows of one table: a new one (``tests/toysource.py``) is a class
plus a row, and the offline runner reads it like the built-in ones."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from analyses.sources import SOURCES, PartitionRef, frame_files, read_partition
from core.errors import UnknownName
from core.table import Table

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_the_sources_are_one_table_of_rows():
    assert isinstance(SOURCES, Table)
    assert {"dataset", "frames", "spill", "staged"} <= set(SOURCES.names())
    assert all(callable(s.read) for s in SOURCES.loaded())
    with pytest.raises(UnknownName, match="unknown analysis source 'tiff'.*dataset"):
        read_partition(PartitionRef("x.tif", kind="tiff"))


def test_a_new_source_is_one_row_and_the_runner_reads_it(tmp_path):
    import h5py

    rng = np.random.default_rng(4)
    stack = rng.integers(0, 1000, (7, 5, 4)).astype("<u2")
    np.save(tmp_path / "toy.npy", stack)
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "tests" /
                        "toysource.py"), "--executor", "inline", "--out", str(tmp_path / "out"),
                        "--", "--npy", str(tmp_path / "toy.npy")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(tmp_path / "out" / "toy.h5", "r") as f:
        assert np.array_equal(f["sum_image"][()].reshape(-1),
                              stack.reshape(7, -1).sum(axis=1, dtype=np.float64))
        assert f["frames_complete"][()].all() and f.attrs["ok"]
    # registered in this process too: read as any source, its one file listed
    sys.path.insert(0, str(ROOT))
    from tests import toysource  # noqa: F401  (registers the row)

    ref = PartitionRef(str(tmp_path / "toy.npy"), start=2, stop=5, kind="npy")
    frames, positions, complete = read_partition(ref)
    assert np.array_equal(frames, stack[2:5]) and positions.tolist() == [2, 3, 4]
    assert frame_files(ref) == [str(tmp_path / "toy.npy")] and complete.all()
