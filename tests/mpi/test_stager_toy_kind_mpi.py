"""The toy ``text`` kind (tests/toykind.py) staged, resumed, verified and cleaned under
mpirun beside a ``files`` block: a kind registered by one row runs through the one
pipeline. Works at any rank count (emulated nodes: up to 2)."""
import os
import shutil

import pytest

import tests.toykind  # noqa: F401  (registers the kind: its one row)
from tests.mpiutil import assert_all, emulated, shared_tmpdir

pytestmark = pytest.mark.mpi


@pytest.fixture
def workdir():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    d = shared_tmpdir(comm, "mpistage-toykind-")
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _spec(d, comm, extra=""):
    if comm.rank == 0:
        os.makedirs(os.path.join(d, "src"), exist_ok=True)
        with open(os.path.join(d, "src", "a.txt"), "w", encoding="utf-8") as f:
            f.write("ünïcode\n" * 100)
        with open(os.path.join(d, "src", "b.txt"), "wb") as f:
            f.write("caf\xe9\n".encode("latin-1"))
        with open(os.path.join(d, "src", "c.dat"), "wb") as f:
            f.write(os.urandom(5000))
        with open(os.path.join(d, "spec.hook"), "w") as f:
            f.write(f"broadcast to {d}/nodes/%n/t text {{ src/a.txt src/b.txt@latin-1 {extra}}}\n"
                    f"broadcast to {d}/nodes/%n/f files {{ src/c.dat }}\n")
    comm.Barrier()
    return os.path.join(d, "spec.hook")


def test_a_toy_kind_stages_resumes_verifies_and_cleans(workdir):
    from mpi4py import MPI

    from stager import VerifyError, clean, stage, verify
    comm = MPI.COMM_WORLD
    k = min(2, comm.size)
    spec = _spec(workdir, comm)
    rep = stage(spec, emulated(comm, k), progress=False)
    assert_all(comm, rep.files == 3 and rep.files_transferred == 3, str(rep))
    assert_all(comm, rep.extra["text"] == {"decoded": 2, "outputs": 2, "label": "text files"},
               str(rep.extra))
    assert_all(comm, "2 of them text files" in rep.summary(), rep.summary())
    ok = True
    if comm.rank == 0:
        for n in rep.nodes:
            for name in ("a.txt", "b.txt"):
                with open(os.path.join(workdir, "src", name), "rb") as f, \
                        open(os.path.join(workdir, "nodes", n, "t", name), "rb") as g:
                    ok = ok and f.read() == g.read()
    assert_all(comm, ok, "a text copy differs from its source")
    again = stage(spec, emulated(comm, k), progress=False)
    assert_all(comm, again.files_transferred == 0, str(again))
    checked = verify(spec, emulated(comm, k))
    assert_all(comm, checked.files_checked == 3 * k, str(checked))
    # the kind's own check of its recorded copy, before the checksum: same file, same
    # size, a byte that is not UTF-8
    if comm.rank == 0:
        with open(os.path.join(workdir, "nodes", rep.nodes[0], "t", "a.txt"), "r+b") as f:
            f.write(b"\xff")
    comm.Barrier()
    try:
        verify(spec, emulated(comm, k))
        why = ""
    except VerifyError as e:
        why = " ".join(m.reason for m in e.mismatches)
    assert_all(comm, why == "not utf-8 text (byte 0)", why)
    clean(spec, emulated(comm, k))


def test_a_file_that_does_not_decode_fails_on_every_rank(workdir):
    from mpi4py import MPI

    from stager import StagerError, stage
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        os.makedirs(os.path.join(workdir, "src"), exist_ok=True)
        with open(os.path.join(workdir, "src", "bad.txt"), "wb") as f:
            f.write(b"ok\xff\xfe")
    spec = _spec(workdir, comm, extra="src/bad.txt ")
    try:
        stage(spec, emulated(comm, min(2, comm.size)), progress=False)
        msg = ""
    except StagerError as e:
        msg = str(e)
    assert_all(comm, "bad.txt: not utf-8 text (byte 2)" in msg, msg)
