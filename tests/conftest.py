"""Shared fixtures of the three test tiers.

* ``tests/unit`` -- serial, no MPI: plain pytest;
* ``tests/mpi`` -- ``@pytest.mark.mpi``, run by ``make test-mpi`` as
  ``mpirun -n 4 python -m pytest --with-mpi -m mpi``; every test passes at any
  rank count (1..4) and checks through ``tests.mpiutil.assert_all``, so a
  failure on one rank fails every rank instead of leaving them in a collective;
* ``tests/e2e`` -- through the command line, ``mpirun`` subprocesses, sbatch.

``comm`` imports mpi4py only when an MPI test asks for it, so the serial tiers
never initialise MPI.
"""
from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def comm():
    """``MPI.COMM_WORLD`` (MPI tests only)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def mpi_tmpdir(comm):
    """One temporary directory shared by every rank (made on rank 0), removed afterwards."""
    from tests.mpiutil import shared_tmpdir

    path = shared_tmpdir(comm, "mpistage-test-")
    yield path
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def nf_layer(tmp_path_factory):
    """A small synthetic NF layer (3 grains in a 15 um disk, 2 x 360 frames of 1 deg), its
    binary images written as stage 1 would (no raw frames); built once per session and
    shared (tests/unit/test_hedm_nffit.py, tests/e2e/test_hedm_nffit_e2e.py): read it,
    write elsewhere."""
    from hedm.nfsynth import make_layer

    folder = str(tmp_path_factory.mktemp("layer"))
    make_layer(folder, frames=360, rsample=15.0, grains=3, raw_frames=False)
    return folder
