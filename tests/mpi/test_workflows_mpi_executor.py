"""The mpi executor and collective HDF5 results under mpirun (``@pytest.mark.mpi``).

Run: ``mpirun -n 4 --oversubscribe bash tests/mpi_pytest.sh .venv/bin/python -m mpi -q
tests/mpi/test_workflows_mpi_executor.py``. Every test passes at any rank count 1..4, with both
dispatch modes (``central``; ``nodes`` over two emulated nodes when there are two ranks).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from tests.mpiutil import assert_all, emulated, shared_tmpdir
from workflows import DependencyFailure, TaskFailure, app, foreach, reduce_tree

pytestmark = pytest.mark.mpi


@app
def whoami(i):
    from mpi4py import MPI

    return i, MPI.COMM_WORLD.Get_rank()


@app
def concat(a, b):
    return a + b


@app
def explode(i):
    if i == 3:
        raise RuntimeError(f"task {i} exploded on purpose")
    return [i]


def _comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


DISPATCH = [("central", 1), ("nodes", 2)]


def _executor(comm, dispatch, nodes):
    from workflows.executors import MPIExecutor

    return MPIExecutor(emulated(comm, min(nodes, comm.size)), dispatch=dispatch)


@pytest.mark.parametrize("dispatch,nodes", DISPATCH)
def test_tasks_run_on_worker_ranks(dispatch, nodes):
    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, dispatch, nodes) as ex:
        if ex is not None:
            results = [f.result() for f in foreach(whoami, range(40))]
            ranks = {r for _, r in results}
            expected = set(ex.roles.workers) if comm.size > 1 else {0}
            ok = [i for i, _ in results] == list(range(40)) and ranks <= expected
            ok = ok and (comm.size == 1 or 0 not in ranks)
            msg = f"ranks used {sorted(ranks)}"
            merged = reduce_tree(concat, [[i] for i in range(33)]).result()
            ok = ok and merged == list(range(33))
    assert_all(comm, ok, msg)


@pytest.mark.parametrize("dispatch,nodes", DISPATCH)
def test_worker_failure_propagates_without_hang(dispatch, nodes):
    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, dispatch, nodes) as ex:
        if ex is not None:
            total = reduce_tree(concat, foreach(explode, range(8)))
            err = total.exception(timeout=120)
            ok = isinstance(err, DependencyFailure) and "exploded on purpose" in str(err)
            root = err.root if ok else None
            ok = ok and isinstance(root, TaskFailure) and "explode#" in root.task
            if comm.size > 1:
                ok = ok and " on rank 0 " not in root.where and "rank" in root.where
            ok = ok and len(ex.runtime.failures) == 1
            msg = f"error was {err!r}"
    assert_all(comm, ok, msg)


def test_collective_hdf5_results_uneven_rows():
    import h5py

    from workflows.results import write_collective

    comm = _comm()
    folder = shared_tmpdir(comm)
    path = os.path.join(folder, "results.h5")
    # Rank r contributes r rows (rank 0 none) of 3 values r*100 + row.
    n = comm.rank
    local = (comm.rank * 100 + np.arange(n * 3, dtype=np.float64)).reshape(n, 3)
    total = write_collective(comm, path, "/spots/table", local, attrs={"units": "counts"},
                             mode="w")
    comm.Barrier()
    ok, msg = h5py.get_config().mpi, "h5py has no MPI"
    if comm.rank == 0 and ok:
        with h5py.File(path, "r") as f:
            data = f["/spots/table"][...]
            expected = np.concatenate(
                [(r * 100 + np.arange(r * 3, dtype=np.float64)).reshape(r, 3)
                 for r in range(comm.size)])
            ok = data.shape == (total, 3) and np.array_equal(data, expected)
            ok = ok and f["/spots/table"].attrs["units"] == "counts"
            msg = f"read back {data.shape}, expected {expected.shape}"
    assert_all(comm, ok, msg)


def test_collective_hdf5_layout_mismatch_fails_on_every_rank():
    from workflows import ResultsError
    from workflows.results import write_collective

    comm = _comm()
    folder = shared_tmpdir(comm)
    last = comm.rank == comm.size - 1
    # a scalar on the last rank only: every rank fails, none is left in a collective
    mine = np.float64(1.0) if last else np.zeros((2, 3))
    with pytest.raises(ResultsError, match=rf"scalar on rank\(s\) \[{comm.size - 1}\]"):
        write_collective(comm, os.path.join(folder, "x.h5"), "x", mine)
    if comm.size == 1:
        return
    local = np.zeros((2, 4 if last else 3))
    with pytest.raises(ResultsError, match="disagree"):
        write_collective(comm, os.path.join(folder, "bad.h5"), "x", local, mode="w")


def test_gathered_hdf5_results():
    import h5py

    from workflows.results import write_gathered

    comm = _comm()
    folder = shared_tmpdir(comm)
    path = os.path.join(folder, "gathered.h5")
    local = np.full((comm.rank + 1, 2), comm.rank, dtype=np.int32)
    total = write_gathered(comm, path, "ranks", local, mode="w")
    comm.Barrier()
    ok, msg = total == sum(r + 1 for r in range(comm.size)), f"total {total}"
    if comm.rank == 0:
        with h5py.File(path, "r") as f:
            data = f["ranks"][...]
        ok = ok and data[:, 0].tolist() == [r for r in range(comm.size) for _ in range(r + 1)]
    assert_all(comm, ok, msg)
