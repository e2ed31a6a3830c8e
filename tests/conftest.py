"""Shared fixtures of the three test tiers.

* ``tests/unit`` -- serial, no MPI: plain pytest;
* ``tests/mpi`` -- ``@pytest.mark.mpi``, run by ``make test-mpi`` as
  ``mpirun -n 4 python -m pytest --with-mpi -m mpi``; every test passes at any
  rank count (1..4) and checks through ``tests.mpiutil.assert_all``, so a
  failure on one rank fails every rank instead of leaving them in a collective;
* ``tests/e2e`` -- through the command line, ``mpirun`` subprocesses, sbatch.

``comm`` imports mpi4py only when an MPI test asks for it, so the serial tiers
never initialise MPI.

``make test-serial`` runs the serial tiers in parallel workers (pytest-xdist,
``--dist loadgroup``); :func:`pytest_collection_modifyitems` below puts each test in
the ``xdist_group`` that says which tests must share a worker (docs/contributing.md,
"Running the tests").
"""
from __future__ import annotations

import shutil

import pytest

#: Marks of tests that use one machine-wide thing (the local Slurm cluster's
#: daemons, FUSE mounts, host names in namespaces): one worker runs them all, one
#: after the other, in the group ``machine``.
MACHINE_MARKS = ("slurm", "fuse", "osnodes")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Give tests an ``xdist_group`` for ``--dist loadgroup`` (no effect without xdist).

    * tests marked ``slurm``, ``fuse`` or ``osnodes`` (:data:`MACHINE_MARKS`): the
      group ``machine``, and with them every test of their file if the file has a
      module fixture;
    * the tests of a file that uses a session fixture of this suite (``nf_layer``,
      ``corpus``): a group named after the fixture, so it is built once, not once per
      worker;
    * the tests of a file that has a module fixture: a group per file, so the fixture
      is built once (the NF fits' fixtures take tens of seconds);
    * every other test: no group; each goes to whichever worker is free.

    A test given an ``xdist_group`` by hand keeps it. Nothing is done unless the run
    is ``--dist loadgroup`` (the MPI suite and the plain venv of
    tests/e2e/test_serial_venv.py have no xdist).
    """
    if config.getoption("dist", "no") != "loadgroup":
        return
    files: dict = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        f = files.setdefault(path, {"session": set(), "module": False, "machine": False})
        f["machine"] |= any(item.get_closest_marker(m) for m in MACHINE_MARKS)
        for defs in item._fixtureinfo.name2fixturedefs.values():
            fixdef = defs[-1]  # the one this test gets (a closer definition overrides)
            if not getattr(fixdef.func, "__module__", "").startswith("tests."):
                continue  # pytest's own (tmp_path_factory, ...) are cheap
            if fixdef.scope == "session":
                f["session"].add(fixdef.argname)
            elif fixdef.scope != "function":
                f["module"] = True
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        path = item.nodeid.split("::")[0]
        f = files[path]
        if any(item.get_closest_marker(m) for m in MACHINE_MARKS) or \
                (f["machine"] and f["module"]):
            group = "machine"
        elif f["session"]:
            group = "session-" + min(f["session"])
        elif f["module"]:
            group = path
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))


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
