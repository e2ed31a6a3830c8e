"""Transfer methods: how the leaders move the planned files to every node.

* ``stripe`` (default) — leaders read disjoint stripes of each chunk and
  complete it on every leader with ``Iallgatherv``, pipelined
  (:mod:`~stager.staging.transfer.engine`): every source byte is read once in the job.
* ``readall`` — the paper's method: every leader ``MPI_File_read_at_all``-s the
  same chunk (:mod:`~stager.staging.transfer.readall`), the reference.
* ``bcast`` — leader 0 reads, ``Ibcast`` to the rest (same pipeline).
* ``naive`` — every leader reads every file itself with POSIX reads
  (:mod:`~stager.staging.transfer.naive`): the baseline the others are measured against.

The table of methods is :data:`METHODS` (a :class:`core.table.Table`, one row each:
its name and its function here, all with :func:`run_method`'s arguments), so a name is
checked with the options, before any collective.

Small files (below ``small_file_threshold``) travel in batches for the
collective methods (:mod:`~stager.staging.transfer.tasks`), each opened by one rank.
With emulated nodes (every leader on one host), ``stripe`` and ``bcast`` exchange
through a shared-memory window instead of messages
(:mod:`~stager.staging.transfer.shmem`; ``shared_exchange=False`` turns it off):
a test-machine path that real nodes, on separate hosts, never take.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from core.mpi.agree import any_true
from core.table import Table
from stager.planning.plan import FileEntry
from stager.staging.transfer.engine import run_pieces
from stager.staging.transfer.naive import run_naive
from stager.staging.transfer.readall import run_readall
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import make_tasks

__all__ = ["METHODS", "Sink", "SourceReader", "run_method"]

Err = Optional[BaseException]  # a leader's own failure, or None

#: The transfer methods, one row each: name -> its function (below), imported when
#: used; the first is the default
METHODS: Table[Any] = Table("transfer method", {
    "stripe": "stager.staging.transfer:stripe",
    "readall": "stager.staging.transfer:readall",
    "bcast": "stager.staging.transfer:bcast",
    "naive": "stager.staging.transfer:naive",
})


def run_method(method: str, comm: Any, jobs: Sequence[FileEntry], reader: SourceReader,
               sink: Sink, chunk_size: int, small_file_threshold: int,
               shared_exchange: bool = False,
               info: Optional[Dict[str, Any]] = None) -> Err:
    """Collective over `comm` (the leader communicator), except ``naive``. Move ``jobs``.

    Returns this leader's own failure or ``None``; every leader returns after
    the same step, so the caller can agree on the outcome. ``info["exchange"]``
    says how chunks travelled between leaders. ``shared_exchange``: the leaders
    are emulated nodes of one host (see :mod:`~stager.staging.transfer.shmem`).
    """
    return METHODS.load(method)(
        comm, jobs, reader, sink, chunk_size, small_file_threshold, shared_exchange,
        {} if info is None else info)


def naive(comm: Any, jobs: Sequence[FileEntry], reader: SourceReader, sink: Sink,
          chunk_size: int, small: int, shared: bool, info: Dict[str, Any]) -> Err:
    """Every leader reads the files it needs itself (no collective)."""
    info["exchange"] = "none (every leader reads every file)"
    return run_naive([i for i in range(len(jobs)) if sink.dests[i] is not None], reader, sink,
                     chunk_size)


def readall(comm: Any, jobs: Sequence[FileEntry], reader: SourceReader, sink: Sink,
            chunk_size: int, small: int, shared: bool, info: Dict[str, Any]) -> Err:
    """Small-file batches as in ``stripe``, then each large file by ``Read_at_all``."""
    sizes = [j.size for j in jobs]
    batched = {i for i, s in enumerate(sizes) if s < small and s <= chunk_size}
    tasks = [t for t in make_tasks(sizes, comm.size, chunk_size, small)
             if t.pieces[0].file in batched]
    info["exchange"] = "Read_at_all (+ Iallgatherv for small files)"
    err = run_pieces(comm, tasks, reader, sink, chunk_size, broadcast=False)
    if any_true(comm, err is not None):
        return err
    return run_readall(comm, [i for i in range(len(jobs)) if i not in batched], reader, sink,
                       chunk_size)


def stripe(comm: Any, jobs: Sequence[FileEntry], reader: SourceReader, sink: Sink,
           chunk_size: int, small: int, shared: bool, info: Dict[str, Any],
           bcast: bool = False) -> Err:
    """Leaders read disjoint stripes, each chunk completed with ``Iallgatherv``
    (``bcast``: leader 0 reads, ``Ibcast`` to the rest)."""
    tasks = make_tasks([j.size for j in jobs], comm.size, chunk_size, small,
                       single_reader=bcast)
    if shared and comm.size > 1:
        from stager.staging.transfer.shmem import co_located, run_pieces_shared

        if co_located(comm):  # else: emulated nodes spread over hosts
            info["exchange"] = "shared memory window (emulated nodes on one host)"
            return run_pieces_shared(comm, tasks, reader, sink)
    info["exchange"] = "Ibcast" if bcast else "Iallgatherv"
    return run_pieces(comm, tasks, reader, sink, chunk_size, broadcast=bcast)


def bcast(comm: Any, jobs: Sequence[FileEntry], reader: SourceReader, sink: Sink,
          chunk_size: int, small: int, shared: bool, info: Dict[str, Any]) -> Err:
    """Leader 0 reads, ``Ibcast`` to the rest (the pipeline of ``stripe``)."""
    return stripe(comm, jobs, reader, sink, chunk_size, small, shared, info, bcast=True)
