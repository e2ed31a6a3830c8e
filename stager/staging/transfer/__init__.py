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
its name and its function here); :func:`register` adds one from outside (the toy
method of ``tests/toymethod.py``). A method is a function of one argument, the
:class:`Moving` context (the leaders' communicator, the files, reader, sink, sizes and
the job), returning this leader's own failure or ``None``. A name is checked with the
options, before any collective.

Small files (below ``small_file_threshold``) travel in batches for the
collective methods (:mod:`~stager.staging.transfer.tasks`), each opened by one rank.
With emulated nodes (every leader on one host), ``stripe`` and ``bcast`` exchange
through a shared-memory window instead of messages
(:mod:`~stager.staging.transfer.shmem`; the ``files`` kind's option
``shared_exchange=False`` turns it off): a test-machine path that real nodes, on
separate hosts, never take.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence

from core.mpi.agree import any_true
from core.table import Table
from stager.planning.plan import FileEntry
from stager.staging.transfer.engine import run_pieces
from stager.staging.transfer.naive import run_naive
from stager.staging.transfer.readall import run_readall
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import make_tasks

__all__ = ["METHODS", "Moving", "Sink", "SourceReader", "register", "run_method"]

Err = Optional[BaseException]  # a leader's own failure, or None


@dataclass
class Moving:
    """What a transfer method is given, on one leader.

    Attributes
    ----------
    comm : mpi4py.MPI.Comm
        The leaders moving ``jobs`` (every leader, or the holders of scatter files);
        the method is collective over it (except ``naive``).
    jobs : sequence of FileEntry
        The files, identical on every leader of ``comm``.
    reader : SourceReader
    sink : Sink
        Where this node's copies go (``sink.dests[i]`` is ``None``: not needed here).
    chunk_size, small : int
        Bytes per chunk, and the size below which files travel in batches.
    job : core.job.Job
        The job (how ranks form nodes).
    shared_exchange : bool
        Leaders on one host may exchange through a shared-memory window.
    info : dict
        Filled by the method: ``info["exchange"]`` says how chunks travelled.
    """

    comm: Any
    jobs: Sequence[FileEntry]
    reader: SourceReader
    sink: Sink
    chunk_size: int
    small: int
    job: Any
    shared_exchange: bool = False
    info: Dict[str, Any] = field(default_factory=dict)

    @property
    def one_host(self) -> bool:
        """The leaders may share a host: the job emulates nodes (checked by
        :func:`~stager.staging.transfer.shmem.co_located` before use)."""
        return self.shared_exchange and self.job.node_id.startswith("emulate:")


Method = Callable[[Moving], Err]

#: The transfer methods, one row each: name -> its function (below), imported when
#: used; the first is the default
METHODS: Table[Any] = Table("transfer method", {
    "stripe": "stager.staging.transfer:stripe",
    "readall": "stager.staging.transfer:readall",
    "bcast": "stager.staging.transfer:bcast",
    "naive": "stager.staging.transfer:naive",
})


def register(name: str, method: Method) -> None:
    """Add (or replace) the transfer method ``name`` (a function of a :class:`Moving`)."""
    METHODS.register(name, method)


def run_method(method: str, m: Moving) -> Err:
    """Collective over ``m.comm`` (the leaders), except ``naive``. Move ``m.jobs``.

    Returns this leader's own failure or ``None``; every leader returns after
    the same step, so the caller can agree on the outcome.
    """
    return METHODS.load(method)(m)


def naive(m: Moving) -> Err:
    """Every leader reads the files it needs itself (no collective)."""
    m.info["exchange"] = "none (every leader reads every file)"
    return run_naive([i for i in range(len(m.jobs)) if m.sink.dests[i] is not None],
                     m.reader, m.sink, m.chunk_size)


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
    if m.one_host and comm.size > 1:
        from stager.staging.transfer.shmem import co_located, run_pieces_shared

        if co_located(comm):  # else: emulated nodes spread over hosts
            m.info["exchange"] = "shared memory window (emulated nodes on one host)"
            return run_pieces_shared(comm, tasks, m.reader, m.sink)
    m.info["exchange"] = "Ibcast" if bcast else "Iallgatherv"
    return run_pieces(comm, tasks, m.reader, m.sink, m.chunk_size, broadcast=bcast)


def bcast(m: Moving) -> Err:
    """Leader 0 reads, ``Ibcast`` to the rest (the pipeline of ``stripe``)."""
    return stripe(m, bcast=True)
