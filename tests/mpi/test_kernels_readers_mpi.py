"""Readers under MPI: every rank opens the same corpus files (default serial driver, with
Debian's MPI build of h5py as mpirun selects it) and reads its own frames; the frames
gathered in order hash to what the corpus builder wrote.  Works at any rank count."""
import os

import numpy as np
import pytest

from tests.mpiutil import assert_all

pytestmark = pytest.mark.mpi

CASES = ["eiger_u32", "nxmx_vds", "velox_like_frames_last", "single_frame_u32", "ge_blank_header",
         "tiff_series", "mib"]


@pytest.fixture(scope="module")
def built(request):
    from mpi4py import MPI

    from tests.mpiutil import shared_tmpdir

    comm = MPI.COMM_WORLD
    root = shared_tmpdir(comm, "kernels-corpus-")
    manifest, error = None, ""
    if comm.rank == 0:
        try:
            from tests.data.corpus import build

            manifest = build(root)
        except Exception as exc:  # agreed below: every rank fails the same way
            error = f"rank 0 could not build the corpus: {exc!r}"
    manifest, error = comm.bcast((manifest, error), root=0)
    assert_all(comm, not error, error)
    yield comm, manifest
    comm.Barrier()
    if comm.rank == 0:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("name", CASES)
def test_ranks_read_disjoint_frames_of_the_corpus(built, name):
    from kernels import ReaderError, open_frames
    from tests.data.h5util import frames_digest

    comm, manifest = built
    entries = {e["name"]: e for e in manifest["entries"]}
    if name not in entries:       # same manifest on every rank: all skip alike
        pytest.skip(f"{name} not built here: {manifest['skipped']}")
    e = entries[name]
    case = next(c for c in e["reads"] if c["expect"] == "frames")
    mine, error = {}, ""
    try:
        with open_frames(os.path.join(manifest["root"], e["path"]), **case["options"]) as r:
            for i in range(comm.rank, r.n_frames, comm.size):
                mine[i] = r.read(i)
    except (ReaderError, OSError) as exc:
        error = f"rank {comm.rank}: {exc}"
    assert_all(comm, not error, error)
    parts = comm.gather(mine, root=0)
    ok, msg = True, ""
    if comm.rank == 0:
        frames = {i: f for p in parts for i, f in p.items()}
        stack = np.stack([frames[i] for i in range(len(frames))])
        ok = len(frames) == case["n_frames"] and frames_digest(stack) == case["sha256"]
        msg = f"{name}: frames read by {comm.size} ranks differ from the corpus"
    assert_all(comm, comm.bcast(ok, root=0), msg)
