"""The pipelined piece exchange behind ``stripe`` and ``bcast`` (and small-file batches).

Collective over the leader communicator. For task ``k`` (a chunk or a batch,
:mod:`stager.staging.transfer.tasks`) every leader reads and hashes the pieces it owns
into its part of buffer ``k % 3``; the buffer is completed on every leader by a
nonblocking ``Iallgatherv`` in place (``stripe``) or ``Ibcast`` from leader 0
(``bcast``), while an ``Iallreduce(MAX)`` of a small status array carries each piece's
digest and an error flag::

    read(0)
    for k: post exchange(k); read(k+1); write(k-1); wait exchange(k)

A rank that fails sets its flag in its next status; every rank sees it after the same
``wait`` and all leave the loop together, so nobody is left in a collective (the error
itself is agreed by the caller). A pending SIGINT or SIGTERM stops every leader after
the same round the same way. Before any leader writes a chunk, every reader has checked
the files whose last piece it read (size, mtime, ctime, inode). The overlap is as good
as Open MPI's asynchronous progress allows; leaders sharing one host use
:mod:`~stager.staging.transfer.shmem` instead.
"""
from __future__ import annotations

import mmap
from typing import Any, List, Optional, Sequence

from core.checksum import DIGEST_SIZE, digest
from core import interrupt
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import Task

__all__ = ["run_pieces"]

_DEPTH = 3


def _read_pieces(t: Task, me: int, reader: SourceReader, view: memoryview,
                 st: bytearray, last: dict) -> None:
    """Read this rank's pieces of task ``t`` into ``view``; put their digests in ``st``.

    After this rank's last piece of a
    file (``last[file]`` is its offset) the file is closed and checked, so a source
    that changed while being read fails this very round -- before any leader
    commits a copy of it.
    """
    for j, p in enumerate(t.pieces):
        if p.owner != me:
            continue
        v = view[p.buf_offset:p.buf_offset + p.length]
        if p.length:
            reader.read_into(p.file, p.offset, v)
        else:
            reader.open_check(p.file)
        if last.get(p.file) == p.offset:
            reader.close(p.file)
        at = 1 + DIGEST_SIZE * j
        st[at:at + DIGEST_SIZE] = digest(v)


def _last_pieces(tasks: Sequence[Task], me: int) -> dict:
    """File -> offset of this rank's last piece of it. Pure."""
    last: dict = {}
    for t in tasks:
        for p in t.pieces:
            if p.owner == me:
                last[p.file] = p.offset
    return last


def close_and_share_checksums(comm: Any, reader: SourceReader, sink: Sink,
                              error: Optional[BaseException],
                              stopped: bool) -> Optional[BaseException]:
    """Collective over `comm` (the leaders): every rank must call. The last step of both
    exchanges: close the sources (checking their identity unless the run failed or
    stopped), then share the whole-file checksums of multi-piece files, which their
    reference leaders computed. Returns the first error (this rank's)."""
    try:
        reader.close_all(check=error is None and not stopped)
    except Exception as e:
        error = error or e
    shared: dict = {}
    for part in comm.allgather(sink.digests):
        shared.update(part)
    sink.take_checksums(shared)
    return error


def run_pieces(comm: Any, tasks: Sequence[Task], reader: SourceReader, sink: Sink,
               chunk_size: int, broadcast: bool) -> Optional[BaseException]:
    """Collective over `comm` (the leader communicator): every leader must call.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Leader communicator.
    tasks : sequence of Task
        Identical on every leader.
    reader, sink
        This leader's source reader and destination writer.
    chunk_size : int
        Buffer size (every task's ``nbytes`` fits).
    broadcast : bool
        Exchange by ``Ibcast`` from leader 0 (``bcast``) instead of ``Iallgatherv``.

    Returns
    -------
    BaseException or None
        This rank's own failure (``None`` if it had none); when any rank
        failed, every rank stopped after the same task.
    """
    from mpi4py import MPI

    n = len(tasks)
    if n == 0:
        return None
    me = comm.rank
    size = max(t.nbytes for t in tasks)
    # anonymous mmaps: page-aligned, zero pages mapped lazily (no memset of 3 x chunk)
    bufs = [mmap.mmap(-1, max(size, 1)) for _ in range(min(_DEPTH, n))]
    views = [memoryview(b) for b in bufs]
    # status: [error flag] + one digest per piece, as unsigned bytes reduced with MAX
    status_out: List[bytearray] = [bytearray()] * len(bufs)
    status_in: List[bytearray] = [bytearray()] * len(bufs)
    error: Optional[BaseException] = None
    last = _last_pieces(tasks, me)

    def read(k: int) -> None:
        nonlocal error
        t, slot = tasks[k], k % len(bufs)
        st = bytearray(1 + DIGEST_SIZE * len(t.pieces))
        status_out[slot] = st
        status_in[slot] = bytearray(len(st))
        if error is None and interrupt.pending() is not None:
            try:
                interrupt.check()  # SIGINT/SIGTERM: stop like a failure, all after this round
            except Exception as e:
                error = e
        if error is not None:
            st[0] = 1
            return
        try:
            first = t.pieces[0].file
            reader.close_before(first)
            with reader.metered():
                _read_pieces(t, me, reader, views[slot], st, last)
        except Exception as e:
            error = e
            st[0] = 1

    def post(k: int) -> List[Any]:
        t, slot = tasks[k], k % len(bufs)
        if error is not None:
            status_out[slot][0] = 1
        buf = views[slot][:t.nbytes]
        if broadcast:
            data = comm.Ibcast([buf, t.nbytes, MPI.BYTE], root=0)
        else:
            data = comm.Iallgatherv(MPI.IN_PLACE, [buf, list(t.counts), list(t.displs), MPI.BYTE])
        stat = comm.Iallreduce([status_out[slot], MPI.UNSIGNED_CHAR],
                               [status_in[slot], MPI.UNSIGNED_CHAR], op=MPI.MAX)
        return [data, stat]

    def write(k: int) -> None:
        nonlocal error
        if error is not None:
            return
        t, slot = tasks[k], k % len(bufs)
        st = memoryview(status_in[slot])
        try:
            for j, p in enumerate(t.pieces):
                d = bytes(st[1 + DIGEST_SIZE * j:1 + DIGEST_SIZE * (j + 1)])
                sink.write(p.file, p.offset, views[slot][p.buf_offset:p.buf_offset + p.length],
                           source_digest=d, own=p.owner == me)
        except Exception as e:
            error = e

    sink.share_checksums(me, comm.size)
    read(0)
    stopped = False
    for k in range(n):
        reqs = post(k)
        if k + 1 < n:
            read(k + 1)
        if k >= 1:
            write(k - 1)
        MPI.Request.Waitall(reqs)
        if status_in[k % len(bufs)][0]:
            stopped = True
            break
    if not stopped:
        write(n - 1)
    # the mmaps are unmapped when the last view of them is collected
    return close_and_share_checksums(comm, reader, sink, error, stopped)
