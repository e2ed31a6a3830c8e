"""The MPI test helpers themselves: agreement on failure, shared temp dirs."""
import os

import pytest

from tests.mpiutil import assert_all, shared_tmpdir

pytestmark = pytest.mark.mpi


def test_shared_tmpdir_is_the_same_on_every_rank():
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    path = shared_tmpdir(comm)
    paths = comm.allgather(path)
    assert_all(comm, len(set(paths)) == 1, f"different dirs: {paths}")
    comm.Barrier()
    if comm.rank == 0:
        os.rmdir(path)


def test_assert_all_fails_on_every_rank_when_one_rank_fails():
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with pytest.raises(AssertionError) as info:
        assert_all(comm, comm.rank != comm.size - 1, "last rank says no")
    assert f"rank {comm.size - 1} on " in str(info.value)
    assert_all(comm, True)
