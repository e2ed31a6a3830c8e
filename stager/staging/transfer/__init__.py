"""Transfer methods: how the leaders move the planned files to every node.

* ``stripe`` (default) — leaders read disjoint stripes of each chunk and
  complete it on every leader with ``Iallgatherv``, pipelined
  (:mod:`~stager.staging.transfer.engine`): every source byte is read once in the job.
* ``readall`` — the paper's method: every leader ``MPI_File_read_at_all``-s the
  same chunk (:mod:`~stager.staging.transfer.readall`), the reference.
* ``bcast`` — leader 0 reads, ``Ibcast`` to the rest (same pipeline).
* ``naive`` — every leader reads every file itself with POSIX reads
  (:mod:`~stager.staging.transfer.naive`): the baseline the others are measured against.

Small files (below ``small_file_threshold``) travel in batches for the
collective methods (:mod:`~stager.staging.transfer.tasks`), each opened by one rank.
When every leader is on one host (emulated nodes), ``stripe`` and ``bcast`` exchange
through a shared-memory window instead of messages
(:mod:`~stager.staging.transfer.shmem`; ``shared_exchange=False`` turns it off).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from stager.staging.transfer.engine import run_pieces
from stager.staging.transfer.naive import run_naive
from stager.mpi.agree import any_true
from stager.staging.transfer.readall import run_readall
from stager.staging.transfer.shmem import co_located, run_pieces_shared
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import FileJob, SourceReader
from stager.staging.transfer.tasks import make_tasks

__all__ = ["METHODS", "FileJob", "Sink", "SourceReader", "run_method"]

METHODS = ("stripe", "readall", "bcast", "naive")


def run_method(method: str, comm: Any, jobs: Sequence[FileJob], reader: SourceReader,
               sink: Sink, chunk_size: int, small_file_threshold: int,
               shared_exchange: bool = True,
               info: Optional[Dict[str, Any]] = None) -> Optional[BaseException]:
    """Collective over `comm` (the leader communicator), except ``naive``. Move ``jobs``.

    Returns this leader's own failure or ``None``; every leader returns after
    the same step, so the caller can agree on the outcome. ``info["exchange"]``
    says how chunks travelled between leaders.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    info = {} if info is None else info
    sizes = [j.size for j in jobs]
    if method == "naive":
        info["exchange"] = "none (every leader reads every file)"
        mine = [i for i in range(len(jobs)) if sink.dests[i] is not None]
        return run_naive(mine, reader, sink, chunk_size)
    n = comm.size
    if method == "readall":
        # small-file batches as in stripe, then each large file by Read_at_all
        small = {i for i, s in enumerate(sizes) if s < small_file_threshold and s <= chunk_size}
        tasks = [t for t in make_tasks(sizes, n, chunk_size, small_file_threshold)
                 if t.pieces[0].file in small]
        info["exchange"] = "Read_at_all (+ Iallgatherv for small files)"
        err = run_pieces(comm, tasks, reader, sink, chunk_size, broadcast=False)
        if any_true(comm, err is not None):
            return err
        large = [i for i in range(len(jobs)) if i not in small]
        return run_readall(comm, large, reader, sink, chunk_size)
    tasks = make_tasks(sizes, n, chunk_size, small_file_threshold,
                       single_reader=(method == "bcast"))
    if shared_exchange and n > 1 and co_located(comm):
        info["exchange"] = "shared memory window (leaders on one host)"
        return run_pieces_shared(comm, tasks, reader, sink)
    info["exchange"] = "Ibcast" if method == "bcast" else "Iallgatherv"
    return run_pieces(comm, tasks, reader, sink, chunk_size, broadcast=(method == "bcast"))
