"""The exchange of leaders that share one host: a shared-memory window instead of messages.

When every leader is on one host (``Job.leaders_share_host``), their chunk buffers are
one MPI-3 shared-memory window: each leader reads its pieces of a chunk into its own
segment, the leaders agree the round is read (the small status ``Iallreduce`` of the
message exchange: digests and the error flag), and each writes the whole chunk straight
from the owners' segments. It exists because the message exchange progresses only while
both leaders are inside MPI at once, which two leaders sharing a few cores rarely are;
here the only synchronisation is the status reduction, waited for without spinning (a
spinning waiter takes the core its peer needs). Figures: ``bench/results/large_file.md``.

Round ``k`` uses slot ``k % 2`` of every segment::

    for k: read(k) into my segment; Win.Sync; status(k); Win.Sync; write(k) from all segments

A leader never overwrites a slot a peer still reads: that slot last held round
``k - 1``, which every peer finished writing before it took part in status ``k``.
Memory per leader: two chunks, in the window (``/dev/shm``-backed).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from core.mpi.agree import wait_quietly
from core.checksum import DIGEST_SIZE
from core import interrupt
from stager.staging.transfer.engine import _last_pieces, _read_pieces, close_and_share_checksums
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import Task

__all__ = ["run_pieces_shared"]

_SLOTS = 2


def run_pieces_shared(comm: Any, tasks: Sequence[Task], reader: SourceReader,
                      sink: Sink) -> Optional[BaseException]:
    """Collective over `comm` (leaders on one host): every leader must call.

    Same contract as :func:`stager.staging.transfer.engine.run_pieces`: returns this
    rank's own failure or ``None``; when any rank failed (or was interrupted), every
    rank stopped after the same round.
    """
    from mpi4py import MPI

    n = len(tasks)
    if n == 0:
        return None
    size = max(max(t.nbytes for t in tasks), 1)
    slots = min(_SLOTS, n)
    win = MPI.Win.Allocate_shared(slots * size, 1, comm=comm)
    try:
        segs = [memoryview(win.Shared_query(r)[0]).cast("B")  # type: ignore[arg-type]
                for r in range(comm.size)]
        win.Lock_all(MPI.MODE_NOCHECK)
        try:
            return _rounds(comm, win, segs, tasks, reader, sink, size, slots)
        finally:
            win.Unlock_all()
            segs.clear()
    finally:
        win.Free()


def _rounds(comm: Any, win: Any, segs: List[memoryview], tasks: Sequence[Task],
            reader: SourceReader, sink: Sink, size: int, slots: int) -> Optional[BaseException]:
    from mpi4py import MPI

    me = comm.rank
    last = _last_pieces(tasks, me)
    sink.share_checksums(me, comm.size)
    error: Optional[BaseException] = None
    stopped = False
    for k, t in enumerate(tasks):
        base = (k % slots) * size
        st = bytearray(1 + DIGEST_SIZE * len(t.pieces))
        if error is None and interrupt.pending() is not None:
            try:
                interrupt.check()
            except Exception as e:
                error = e
        if error is None:
            try:
                reader.close_before(t.pieces[0].file)
                with reader.metered():
                    _read_pieces(t, me, reader, segs[me][base:base + size], st, last)
            except Exception as e:
                error = e
        if error is not None:
            st[0] = 1
        win.Sync()  # my pieces are in my segment before the others learn the round is read
        got = bytearray(len(st))
        wait_quietly([comm.Iallreduce([st, MPI.UNSIGNED_CHAR], [got, MPI.UNSIGNED_CHAR],
                                      op=MPI.MAX)])
        win.Sync()
        if got[0]:
            stopped = True
            break
        if error is not None:
            continue
        try:
            for j, p in enumerate(t.pieces):
                d = bytes(got[1 + DIGEST_SIZE * j:1 + DIGEST_SIZE * (j + 1)])
                at = base + p.buf_offset
                sink.write(p.file, p.offset, segs[p.owner][at:at + p.length], source_digest=d,
                           own=p.owner == me)
        except Exception as e:
            error = e  # flagged in the next round's status; the last round's: by the caller
    return close_and_share_checksums(comm, reader, sink, error, stopped)
