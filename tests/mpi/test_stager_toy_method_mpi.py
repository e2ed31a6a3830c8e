"""The toy transfer method ``relay`` (tests/toymethod.py) stages, resumes and verifies
under mpirun: a method registered by one row runs through the ``files`` kind and the
one pipeline. Works at any rank count (emulated nodes: up to 2)."""
import os
import shutil

import pytest

import tests.toymethod  # noqa: F401  (registers the method: its one row)
from tests.mpiutil import assert_all, emulated, shared_tmpdir

pytestmark = pytest.mark.mpi


@pytest.fixture
def workdir():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    d = shared_tmpdir(comm, "mpistage-toymethod-")
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def test_a_toy_method_stages_resumes_and_verifies(workdir):
    from mpi4py import MPI

    from stager import stage, verify
    comm = MPI.COMM_WORLD
    k = min(2, comm.size)
    if comm.rank == 0:
        os.makedirs(os.path.join(workdir, "src"))
        for n, size in (("a.dat", 70000), ("b.dat", 0), ("c.dat", 3)):
            with open(os.path.join(workdir, "src", n), "wb") as f:
                f.write(os.urandom(size))
        with open(os.path.join(workdir, "spec.hook"), "w") as f:
            f.write(f"broadcast to {workdir}/nodes/%n files {{ src/*.dat }}\n")
    comm.Barrier()
    spec = os.path.join(workdir, "spec.hook")
    rep = stage(spec, emulated(comm, k), progress=False, method="relay")
    assert_all(comm, rep.files == 3 and rep.files_transferred == 3, str(rep))
    assert_all(comm, rep.extra["files"]["exchange"].startswith("relay"), str(rep.extra))
    same = True
    if comm.rank == 0:
        for n in rep.nodes:
            for name in ("a.dat", "b.dat", "c.dat"):
                with open(os.path.join(workdir, "src", name), "rb") as f, \
                        open(os.path.join(workdir, "nodes", n, name), "rb") as g:
                    same = same and f.read() == g.read()
    assert_all(comm, same, "a relayed copy differs from its source")
    again = stage(spec, emulated(comm, k), progress=False, method="relay")
    assert_all(comm, again.files_transferred == 0, str(again))   # resumed: nothing moves
    v = verify(spec, emulated(comm, k))
    assert_all(comm, v.files_checked == 3 * k, str(v))
