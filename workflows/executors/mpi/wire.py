"""The mpi executor's messages: tags, payloads, and a link that counts them.

Every message is one pickled Python object sent with ``Isend`` of its bytes
on the executor's own communicator (a ``Dup`` of the user's, so its
messages never match anyone else's). ``docs/DISPATCH.md`` is the protocol's
reference; in short (``E`` = a list of :data:`~.queues.Entry`):

==========  =====================  ==============================================
tag         direction              payload
==========  =====================  ==============================================
``TASKS``   server -> worker       ``E``: one batch (the worker runs it in order)
``DONE``    worker -> server       ``(results, credit, hello)``: ``results`` a list of
                                   ``(tid, blob)``, ``blob`` the pickled
                                   ``(value, error, start, end)`` (a task array: a
                                   list of those, :mod:`.arrays`); ``credit`` 1 when a
                                   batch is finished; ``hello`` the worker's
                                   ``(where(), host, pid)`` in its first message,
                                   else None
``FEED``    root -> server         ``(E, dry)``: tasks pulled (free) or pushed (placed
                                   on the server's node); ``dry``: the root had fewer
                                   free tasks than asked
``UP``      server -> root         ``(results, ask, notes)``: ``results`` a list of
                                   ``(tid, rank, blob)``; ``ask`` more free tasks
                                   wanted (added to what is pending); ``notes`` a
                                   list of ``("hello", rank, where)``,
                                   ``("lost", rank, message)`` (given up: stuck),
                                   ``("died", rank, message)`` (its process is gone)
``STEAL``   server -> server       ``want``: an idle server asks a random other one
``STOLEN``  server -> server       ``E``: the answer (may be empty)
``STOP``    root -> server,        ``cancel``: no more tasks; a server stops its
            server -> worker       workers, then answers ``BYE``
``BYE``     server -> root         ``dropped``: tids of queued tasks dropped (cancel)
``FINAL``   root -> server         ``None``: every server said BYE; exit
==========  =====================  ==============================================

A worker's results go through its server as opaque bytes: servers never
unpickle task arguments or results, so they import no user code and copy
no large result twice.
"""

from __future__ import annotations

import pickle
import time
from typing import Any, List, Optional, Tuple

__all__ = ["Link", "TASKS", "DONE", "FEED", "UP", "STEAL", "STOLEN", "STOP", "BYE", "FINAL",
           "Backoff", "dumps"]

TASKS, DONE, FEED, UP, STEAL, STOLEN, STOP, BYE, FINAL = range(1, 10)
TAG_NAMES = {TASKS: "TASKS", DONE: "DONE", FEED: "FEED", UP: "UP", STEAL: "STEAL",
             STOLEN: "STOLEN", STOP: "STOP", BYE: "BYE", FINAL: "FINAL"}

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, _PROTOCOL)


class Link:
    """Point-to-point messages of one rank, with counters (messages and bytes each way)."""

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self._status = MPI.Status()
        self._pending: List[Tuple[Any, bytes]] = []
        self.sent = 0
        self.received = 0
        self.bytes_sent = 0
        self.bytes_received = 0

    def send(self, dest: int, tag: int, obj: Any) -> None:
        """Send ``obj`` without waiting (the buffer is kept until the send completes)."""
        data = dumps(obj)
        self.send_bytes(dest, tag, data)

    def send_bytes(self, dest: int, tag: int, data: bytes) -> None:
        req = self.comm.Isend([data, self._MPI.BYTE], dest, tag)
        self._pending.append((req, data))
        self.sent += 1
        self.bytes_sent += len(data)
        if len(self._pending) >= 64:
            self.reap()

    def poll(self) -> Optional[Tuple[int, int, Any]]:
        """One arrived message as ``(source, tag, object)``, or None."""
        status = self._status
        msg = self.comm.improbe(self._MPI.ANY_SOURCE, self._MPI.ANY_TAG, status)
        if msg is None:
            return None
        n = status.Get_count(self._MPI.BYTE)
        buf = bytearray(n)
        msg.Recv([buf, self._MPI.BYTE])
        self.received += 1
        self.bytes_received += n
        return status.Get_source(), status.Get_tag(), pickle.loads(buf)

    def reap(self) -> None:
        """Forget sends that completed."""
        if not self._pending:
            return
        reqs = [r for r, _ in self._pending]
        done = self._MPI.Request.Testsome(reqs)
        if done:
            gone = set(done)
            self._pending = [p for i, p in enumerate(self._pending) if i not in gone]

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait (sleeping) until every send completed; False after ``timeout`` s."""
        end = time.monotonic() + timeout
        pause = Backoff()
        while self._pending:
            self.reap()
            if not self._pending:
                break
            if time.monotonic() > end:
                return False
            pause.sleep()
        return True

    @property
    def unsent(self) -> int:
        return len(self._pending)


class Backoff:
    """Sleep a little longer each time nothing happened (not spinning on shared cores).

    Starts at 10 us, doubles up to ``max_sleep`` (1 ms, as mpi4py.futures);
    :meth:`reset` after any progress.
    """

    __slots__ = ("pause", "max_sleep")

    def __init__(self, max_sleep: float = 1e-3):
        self.max_sleep = max_sleep
        self.pause = 0.0

    def reset(self) -> None:
        self.pause = 0.0

    def sleep(self) -> None:
        time.sleep(self.pause)
        self.pause = min(self.max_sleep, max(1e-5, self.pause * 2))
