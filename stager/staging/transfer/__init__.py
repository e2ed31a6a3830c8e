"""Transfer methods: how the leaders move the planned files to every node.

* ``stripe`` (default) — leaders read disjoint stripes of each chunk and
  complete it on every leader with ``Iallgatherv``, pipelined
  (:mod:`~stager.staging.transfer.engine`): every source byte is read once in the job.
* ``readall`` — the paper's method: every leader ``MPI_File_read_at_all``-s the
  same chunk (:mod:`~stager.staging.transfer.readall`), the reference.
* ``bcast`` — leader 0 reads, ``Ibcast`` to the rest (same pipeline).
* ``naive`` — every leader reads every file itself with POSIX reads
  (:mod:`~stager.staging.transfer.naive`): the baseline the others are measured against.

The table of methods is :data:`stager.options.METHODS` (one row each: its name and
its function here), so options are checked before any collective; a method is a
function of :class:`Move` (the leader communicator, the files, reader, sink and
options) returning the leader's failure.

Small files (below ``small_file_threshold``) travel in batches for the
collective methods (:mod:`~stager.staging.transfer.tasks`), each opened by one rank.
With emulated nodes (every leader on one host), ``stripe`` and ``bcast`` exchange
through a shared-memory window instead of messages
(:mod:`~stager.staging.transfer.shmem`; ``shared_exchange=False`` turns it off):
a test-machine path that real nodes, on separate hosts, never take.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence

from stager.mpi.agree import any_true
from stager.options import METHODS
from stager.staging.transfer.engine import run_pieces
from stager.staging.transfer.naive import run_naive
from stager.staging.transfer.readall import run_readall
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import FileJob, SourceReader
from stager.staging.transfer.tasks import make_tasks

__all__ = ["METHODS", "Move", "FileJob", "Sink", "SourceReader", "run_method"]


@dataclass
class Move:
    """What a transfer method is given (on one leader)."""

    comm: Any
    jobs: Sequence[FileJob]
    reader: SourceReader
    sink: Sink
    chunk_size: int
    small_file_threshold: int
    #: emulated nodes: exchange through a shared-memory window (transfer.shmem)
    shared_exchange: bool = False
    #: ``info["exchange"]``: how chunks travelled between leaders
    info: Dict[str, Any] = field(default_factory=dict)


def run_method(method: str, comm: Any, jobs: Sequence[FileJob], reader: SourceReader,
               sink: Sink, chunk_size: int, small_file_threshold: int,
               shared_exchange: bool = False,
               info: Optional[Dict[str, Any]] = None) -> Optional[BaseException]:
    """Collective over `comm` (the leader communicator), except ``naive``. Move ``jobs``.

    Returns this leader's own failure or ``None``; every leader returns after
    the same step, so the caller can agree on the outcome. ``info["exchange"]``
    says how chunks travelled between leaders. ``shared_exchange``: the leaders
    are emulated nodes of one host (see :mod:`~stager.staging.transfer.shmem`).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    module, _, name = METHODS[method].partition(":")
    run = getattr(importlib.import_module(module), name)
    return run(Move(comm, jobs, reader, sink, chunk_size, small_file_threshold,
                    shared_exchange, {} if info is None else info))


def naive(m: Move) -> Optional[BaseException]:
    """Every leader reads the files it needs itself (no collective)."""
    m.info["exchange"] = "none (every leader reads every file)"
    mine = [i for i in range(len(m.jobs)) if m.sink.dests[i] is not None]
    return run_naive(mine, m.reader, m.sink, m.chunk_size)


def readall(m: Move) -> Optional[BaseException]:
    """Small-file batches as in ``stripe``, then each large file by ``Read_at_all``."""
    sizes = [j.size for j in m.jobs]
    small = {i for i, s in enumerate(sizes) if s < m.small_file_threshold and s <= m.chunk_size}
    tasks = [t for t in make_tasks(sizes, m.comm.size, m.chunk_size, m.small_file_threshold)
             if t.pieces[0].file in small]
    m.info["exchange"] = "Read_at_all (+ Iallgatherv for small files)"
    err = run_pieces(m.comm, tasks, m.reader, m.sink, m.chunk_size, broadcast=False)
    if any_true(m.comm, err is not None):
        return err
    large = [i for i in range(len(m.jobs)) if i not in small]
    return run_readall(m.comm, large, m.reader, m.sink, m.chunk_size)


def stripe(m: Move) -> Optional[BaseException]:
    """Leaders read disjoint stripes and complete each chunk with ``Iallgatherv``."""
    return _pieces(m, single_reader=False)


def bcast(m: Move) -> Optional[BaseException]:
    """Leader 0 reads, ``Ibcast`` to the rest."""
    return _pieces(m, single_reader=True)


def _pieces(m: Move, single_reader: bool) -> Optional[BaseException]:
    tasks = make_tasks([j.size for j in m.jobs], m.comm.size, m.chunk_size,
                       m.small_file_threshold, single_reader=single_reader)
    if m.shared_exchange and m.comm.size > 1:
        from stager.staging.transfer.shmem import co_located, run_pieces_shared

        if not co_located(m.comm):  # emulated nodes spread over hosts: messages
            return _messages(m, tasks, single_reader)
        m.info["exchange"] = "shared memory window (emulated nodes on one host)"
        return run_pieces_shared(m.comm, tasks, m.reader, m.sink)
    return _messages(m, tasks, single_reader)


def _messages(m: Move, tasks: Any, single_reader: bool) -> Optional[BaseException]:
    m.info["exchange"] = "Ibcast" if single_reader else "Iallgatherv"
    return run_pieces(m.comm, tasks, m.reader, m.sink, m.chunk_size, broadcast=single_reader)
