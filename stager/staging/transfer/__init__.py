"""Transfer methods: how the leaders move the planned files to every node.

``stripe`` (default: disjoint stripes of each chunk completed with ``Iallgatherv``,
pipelined in :mod:`~stager.staging.transfer.engine`; every source byte read once),
``readall`` (the paper's ``MPI_File_read_at_all`` of every chunk by every leader,
:mod:`~stager.staging.transfer.readall`), ``bcast`` (leader 0 reads, ``Ibcast``),
``naive`` (every leader reads every file itself: the baseline); docs/guide/staging.md,
"Methods". The table is :data:`METHODS` (name -> a function of one :class:`Moving`,
returning this leader's own failure or ``None``); :func:`register` adds one.

Small files travel in batches (:mod:`~stager.staging.transfer.tasks`). Leaders on one
host exchange through a shared-memory window (:mod:`~stager.staging.transfer.shmem`;
``shared_exchange=False`` turns it off): a test-machine path that real nodes, on
separate hosts, never take.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence

from core import interrupt
from core.mpi.agree import any_true
from core.table import Table
from stager.planning.plan import FileEntry
from stager.staging.transfer.engine import run_pieces
from stager.staging.transfer.readall import run_readall
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import chunk_ranges, make_tasks

__all__ = ["METHODS", "Moving", "Sink", "SourceReader", "register", "run_method"]

Err = Optional[BaseException]  # a leader's own failure, or None


@dataclass
class Moving:
    """What a transfer method is given, on one leader: the leaders moving ``jobs`` (every
    leader, or the holders of scatter files: the method is collective over ``comm``, except
    ``naive``), the files (identical on every leader), their reader, this node's sink
    (``sink.dests[i] is None``: not needed here), the chunk size, the size below which files
    travel in batches, the job, whether leaders on one host may exchange through a
    shared-memory window, and ``info`` for the report (``info["exchange"]``: how)."""

    comm: Any
    jobs: Sequence[FileEntry]
    reader: SourceReader
    sink: Sink
    chunk_size: int
    small: int
    job: Any
    shared_exchange: bool = False
    info: Dict[str, Any] = field(default_factory=dict)


#: The transfer methods, one row each: name -> its function (below), imported when
#: used; the first is the default
METHODS: Table[Any] = Table("transfer method", {
    "stripe": "stager.staging.transfer:stripe",
    "readall": "stager.staging.transfer:readall",
    "bcast": "stager.staging.transfer:bcast",
    "naive": "stager.staging.transfer:naive",
})


def register(name: str, method: Callable[[Moving], Err]) -> None:
    """Add (or replace) the transfer method ``name`` (a function of a :class:`Moving`)."""
    METHODS.register(name, method)


def run_method(method: str, m: Moving) -> Err:
    """Collective over ``m.comm`` (the leaders), except ``naive``. Move ``m.jobs``.

    Returns this leader's own failure or ``None``; every leader returns after
    the same step, so the caller can agree on the outcome.
    """
    return METHODS.load(method)(m)


def naive(m: Moving) -> Err:
    """Every leader reads the files it needs itself, POSIX reads, no collective: what
    the original HEDM tasks did, the baseline (N nodes read each source N times)."""
    m.info["exchange"] = "none (every leader reads every file)"
    files = [i for i in range(len(m.jobs)) if m.sink.dests[i] is not None]
    view = memoryview(bytearray(max(1, min(m.chunk_size, max(
        (m.jobs[i].size for i in files), default=1)))))
    try:
        for i in files:
            m.reader.open_check(i)
            for off, length in chunk_ranges(m.jobs[i].size, m.chunk_size):
                interrupt.check()  # SIGINT/SIGTERM: stop; the caller agrees on it
                if length:
                    with m.reader.metered():
                        m.reader.read_into(i, off, view[:length])
                m.sink.write(i, off, view[:length])
            m.reader.close(i)
    except Exception as e:
        m.reader.close_all(check=False)
        return e
    return None


def readall(m: Moving) -> Err:
    """Small-file batches as in ``stripe``, then each large file by ``Read_at_all``."""
    sizes = [j.size for j in m.jobs]
    batched = {i for i, s in enumerate(sizes) if s < m.small and s <= m.chunk_size}
    tasks = [t for t in make_tasks(sizes, m.comm.size, m.chunk_size, m.small)
             if t.pieces[0].file in batched]
    m.info["exchange"] = "Read_at_all (+ Iallgatherv for small files)"
    err = run_pieces(m.comm, tasks, m.reader, m.sink, m.chunk_size, broadcast=False)
    if any_true(m.comm, err is not None):
        return err
    return run_readall(m.comm, [i for i in range(len(m.jobs)) if i not in batched], m.reader,
                       m.sink, m.chunk_size)


def stripe(m: Moving, bcast: bool = False) -> Err:
    """Leaders read disjoint stripes, each chunk completed with ``Iallgatherv``
    (``bcast``: leader 0 reads, ``Ibcast`` to the rest)."""
    comm = m.comm
    tasks = make_tasks([j.size for j in m.jobs], comm.size, m.chunk_size, m.small,
                       single_reader=bcast)
    # leaders on one host: through a shared-memory window
    if m.shared_exchange and m.job.leaders_share_host and comm.size > 1:
        from stager.staging.transfer.shmem import run_pieces_shared

        m.info["exchange"] = "shared memory window (leaders on one host)"
        return run_pieces_shared(comm, tasks, m.reader, m.sink)
    m.info["exchange"] = "Ibcast" if bcast else "Iallgatherv"
    return run_pieces(comm, tasks, m.reader, m.sink, m.chunk_size, broadcast=bcast)


def bcast(m: Moving) -> Err:
    """Leader 0 reads, ``Ibcast`` to the rest (the pipeline of ``stripe``)."""
    return stripe(m, bcast=True)
