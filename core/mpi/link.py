"""The messages of the project's MPI loops: every tag, the link that sends them, credits.

Both loops -- the mpi executor's (root, task servers, workers) and a receiving
job's (receivers, workers, rank 0) -- send pickled objects point to point, by
tag, on a communicator of their own (a ``Dup``: no message matches anyone
else's), without waiting. Nothing here imports mpi4py at module level.
"""
from __future__ import annotations

import collections
import pickle
import time
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, Type

__all__ = ["TAGS", "Link", "Backoff", "Credits", "dumps"]

#: Every point-to-point tag of the project: loop -> {name -> number}, unique
#: across loops. Their messages: ``docs/DISPATCH.md`` (``executor``, the mpi
#: executor) and ``streams.job.ranks`` (``stream``, a receiving job).
TAGS: Dict[str, Dict[str, int]] = {
    "executor": {"TASKS": 1, "DONE": 2, "FEED": 3, "UP": 4, "STEAL": 5, "STOLEN": 6,
                 "STOP": 7, "BYE": 8, "FINAL": 9},
    "stream": {"WORK": 7101, "ACK": 7102, "LIVE": 7103, "CTRL": 7104, "SHARE": 7105,
               "ABORT": 7106, "FIN": 7107, "FRAME": 7108},
}


#: Arrays (any PickleBuffer) of at least this many bytes travel out of band: pickle
#: protocol 5 leaves them out of the message, each goes as a message of its own
#: straight from its memory, received straight into the new array's -- no copy
#: into or out of a pickle (``bench/results/link.md``). Smaller ones ride inside.
OUT_OF_BAND = 1 << 16

#: Out-of-band buffers a link keeps to receive into again (the newest; see :meth:`Link._apart`).
REUSE = 2


def dumps(obj: Any) -> bytes:
    """``obj`` pickled as a :class:`Link` sends it (highest protocol: one copy of an array)."""
    return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)


class Link:
    """One rank's messages in ``loop`` (a key of :data:`TAGS`) on ``comm``, counted.

    A send keeps its buffers until it completed (:meth:`reap`); a message whose
    tag is not the loop's is an ``error`` naming rank, source and tag. Large arrays
    follow their message out of band, with the same tag (``out_of_band`` bytes
    and more), so MPI's order between two ranks keeps them together; None: never,
    and no cost for it (every rank of a loop must say the same). They are received
    into the last ``reuse`` buffers again once nothing holds them (:meth:`_apart`).
    """

    def __init__(self, comm: Any, loop: str, out_of_band: Optional[int] = OUT_OF_BAND,
                 error: Type[Exception] = RuntimeError, reuse: int = REUSE):
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.loop, self.error = loop, error
        self.names = {n: name for name, n in TAGS[loop].items()}
        self._status = MPI.Status()
        self.out_of_band = out_of_band
        self._pending: List[Tuple[Any, Any]] = []
        self._reuse: Deque[bytearray] = collections.deque(maxlen=reuse)
        self.sent = self.received = self.bytes_sent = self.bytes_received = 0

    def send(self, dest: int, tag: int, obj: Any) -> None:
        """Send ``obj`` without waiting."""
        apart: List[Any] = []
        data = dumps(obj) if self.out_of_band is None else pickle.dumps(
            obj, pickle.HIGHEST_PROTOCOL, buffer_callback=lambda b: self._aside(b, apart))
        for part in [data, *apart]:
            self._pending.append((self.comm.Isend([part, self._MPI.BYTE], dest, tag), part))
            self.bytes_sent += len(part) if isinstance(part, bytes) else part.nbytes
        self.sent += 1
        if len(self._pending) >= 64:
            self.reap()

    def poll(self) -> Optional[Tuple[int, int, Any]]:
        """One arrived message as ``(source, tag, object)``, or None.

        Raises
        ------
        RuntimeError (or the link's ``error``)
            The message's tag is not one of this loop's.
        """
        status = self._status
        msg = self.comm.improbe(self._MPI.ANY_SOURCE, self._MPI.ANY_TAG, status)
        if msg is None:
            return None
        n = status.Get_count(self._MPI.BYTE)
        buf = bytearray(n)
        msg.Recv([buf, self._MPI.BYTE])
        src, tag = status.Get_source(), status.Get_tag()
        if tag not in self.names:
            raise self.error(f"rank {self.comm.Get_rank()}: unexpected message tag {tag} "
                             f"from rank {src} on the {self.loop} loop's communicator")
        self.received += 1
        self.bytes_received += n
        if self.out_of_band is None:
            return src, tag, pickle.loads(buf)
        return src, tag, pickle.loads(buf, buffers=self._apart(src, tag))

    def _aside(self, buf: pickle.PickleBuffer, apart: List[Any]) -> bool:
        """False (out of band) for a large buffer, kept in ``apart`` to send."""
        raw = buf.raw()
        if raw.nbytes < (self.out_of_band or 0):
            return True
        apart.append(raw)
        return False

    def _apart(self, src: int, tag: int) -> Iterator[memoryview]:
        """The out-of-band buffers that follow a message, as its unpickling asks for them.

        Each is a memoryview of a bytearray, which is reused for a later buffer of the
        same size only once nothing holds a view of it any more: a bytearray that
        exports a buffer (this memoryview, an array unpickled from it and every view
        of that array) cannot be resized, and :func:`_held` asks exactly that. So
        reuse is safe whatever the receiver keeps: a worker's analysis merges a
        partition's result into its partial (a new array), and when it keeps a view
        of the data instead, that buffer is simply not reused. A new zeroed 16 MiB
        bytearray per partition was 27-44 % of a worker's time in the DECTRIS
        legacy bench's profile (issue 42; before/after in ``bench/README.md``).
        """
        status = self._MPI.Status()
        while True:
            msg = self.comm.mprobe(src, tag, status)
            n = status.Get_count(self._MPI.BYTE)
            buf = next((b for b in self._reuse if len(b) == n and not _held(b)), None)
            if buf is None:
                buf = bytearray(n)
                self._reuse.append(buf)    # the oldest is forgotten (freed once unheld)
            view = memoryview(buf)         # held from here: never handed out twice
            msg.Recv([view, self._MPI.BYTE])
            self.bytes_received += n
            yield view

    def reap(self) -> None:
        """Forget sends that completed."""
        if self._pending:
            done = set(self._MPI.Request.Testsome([r for r, _ in self._pending]) or ())
            self._pending = [p for i, p in enumerate(self._pending) if i not in done]

    def flush(self, timeout: float = 60.0, between: Optional[Callable[[], Any]] = None) -> bool:
        """Wait (sleeping, calling ``between``) until every send completed; False after
        ``timeout`` s."""
        end = time.monotonic() + timeout
        pause = Backoff()
        while self._pending:
            self.reap()
            if not self._pending:
                break
            if time.monotonic() > end:
                return False
            if between is not None:
                between()
            pause.sleep()
        return True

    @property
    def unsent(self) -> int:
        return len(self._pending)


def _held(buf: bytearray) -> bool:
    """True while something holds a view of ``buf`` (it cannot be resized then)."""
    if not buf:
        return False        # nothing in it to overwrite
    try:
        last = buf.pop()
    except BufferError:
        return True
    buf.append(last)        # shrinking by one byte and back: no reallocation
    return False


class Backoff:
    """Sleep a little longer each time nothing happened (no spinning on shared cores):
    from ``min_sleep`` doubling up to ``max_sleep`` (1 ms, as mpi4py.futures);
    :meth:`reset` after any progress."""

    __slots__ = ("pause", "min_sleep", "max_sleep")

    def __init__(self, max_sleep: float = 1e-3, min_sleep: float = 1e-5):
        self.min_sleep, self.max_sleep, self.pause = min_sleep, max_sleep, 0.0

    def reset(self) -> None:
        self.pause = 0.0

    def sleep(self) -> None:
        time.sleep(self.pause)
        self.grow()

    def grow(self) -> None:
        """The next pause, not sleeping (a loop that waited elsewhere, e.g. in a socket)."""
        self.pause = min(self.max_sleep, max(self.min_sleep, self.pause * 2))


class Credits:
    """Workers' windows: a worker granted n credits holds at most n items not returned.

    The executor's worker grants its own (two batches at its first message, one
    per finished batch); a receiver grants ``credit`` partitions per worker at
    the start and one per acknowledgement. Kept in the order granted: the worker
    that freed a place first gets the next item.
    """

    def __init__(self, workers: Iterable[int] = (), window: int = 0) -> None:
        """``window`` credits to each of ``workers``, dealt round them."""
        self._queue: Deque[int] = collections.deque(list(workers) * window)

    def grant(self, worker: int, n: int = 1) -> None:
        self._queue.extend([worker] * n)

    def take(self) -> Optional[int]:
        """The worker holding the oldest credit (now used), or None."""
        return self._queue.popleft() if self._queue else None

    def give_back(self, workers: Iterable[int]) -> None:
        """Credits taken but not used: first again, in their order."""
        self._queue.extendleft(reversed(list(workers)))

    def drop(self, worker: int) -> None:
        """Forget ``worker``'s credits (given up)."""
        self._queue = collections.deque(w for w in self._queue if w != worker)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[int]:
        return iter(self._queue)
