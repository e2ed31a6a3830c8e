"""core.mpi.launcher.without_launcher on a real mpirun rank: a program that starts MPI, run by
one rank of a job with the launcher's variables taken out, is its own one-rank job. With
them it would try to join this job and abort before MPI_Init."""
import subprocess
import sys

import pytest

from core.mpi.launcher import without_launcher
from tests.mpiutil import assert_all

pytestmark = pytest.mark.mpi

CHILD = "from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.size, c.rank)"


def test_a_child_of_a_rank_is_its_own_job():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r = subprocess.run([sys.executable, "-c", CHILD], env=without_launcher(),
                       capture_output=True, text=True, timeout=120)
    ok = r.returncode == 0 and r.stdout.split() == ["1", "0"]
    assert_all(comm, ok, f"rank {comm.rank}: child exited {r.returncode}: {r.stdout!r} "
                         f"{r.stderr[-500:]!r}")
