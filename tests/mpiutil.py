"""Helpers for tests that run under ``mpirun`` (``@pytest.mark.mpi``).

A failed assertion on one rank must fail the test on every rank, or the other
ranks walk into the next test's collectives and hang. ``assert_all`` gathers
every rank's verdict first.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from typing import Any


def sleep_until_all(comm: Any) -> None:
    """Collective over `comm`: a barrier at which a rank that arrives early sleeps.

    Open MPI's oversubscribed ranks poll while they wait in a blocking collective
    (``sched_yield``: most of ``make test-mpi``'s CPU is such waiting), taking CPU from the
    serial suite beside them; the ranks that finished a test wait here for the one still
    checking its files (``assert_all``) at 2 ms a look instead.
    """
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.002)


def assert_all(comm: Any, ok: bool, message: str = "") -> None:
    """Collective over `comm`: every rank must call. Fail on all ranks if any failed.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    ok : bool
        This rank's verdict.
    message : str
        What went wrong here (used only when ``ok`` is false).

    Raises
    ------
    AssertionError
        On every rank, listing each failing rank's host and message.
    """
    sleep_until_all(comm)
    verdicts = comm.allgather((bool(ok), message, socket.gethostname()))
    bad = [f"rank {r} on {h}: {m}" for r, (good, m, h) in enumerate(verdicts) if not good]
    if bad:
        raise AssertionError("; ".join(bad))


def shared_tmpdir(comm: Any, prefix: str = "mpistage-test-") -> str:
    """Collective over `comm`: one temporary directory, made on rank 0 and broadcast."""
    path = tempfile.mkdtemp(prefix=prefix) if comm.rank == 0 else None
    path = comm.bcast(path, root=0)
    assert os.path.isdir(path)
    return path


def emulated(comm: Any, k: int) -> Any:
    """Collective over `comm`: a :class:`core.job.Job` of ``k`` emulated nodes (``emulate:k``).

    Not freed: a test makes a few, and the job outlives the calls it is passed to.
    """
    from core.job import Job

    return Job.from_comm(comm, f"emulate:{k}")
