"""A worker rank of the mpi executor: run batches from its server, send results back.

The loop runs in the rank's main thread (so time limits interrupt tasks with
``SIGALRM``, see :mod:`workflows.limits`). A worker holds at most
:data:`CREDITS` batches: one running, one waiting, so it never waits for its
server between batches. Results go back when a batch is finished (returning
its credit), and also in the middle of a long batch once
:data:`FLUSH_SECONDS` passed since the last send, so a dependent task does
not wait for the rest of a batch.

``faulthandler`` is enabled: a task that segfaults its worker prints the
Python stack (naming the task's function) before ``mpirun`` ends the job.
"""

from __future__ import annotations

import collections
import faulthandler
import os
import pickle
import socket
import sys
import time
from typing import Deque, List, Optional, Tuple

from ...errors import RemoteError
from ...tasks import Outcome, execute, where_cached
from .arrays import ArrayCall, run_array
from .queues import MAX_BATCH_BYTES, Entry
from core.mpi.link import Link, dumps
from core.mpi.loop import Loop

from .wire import DONE

__all__ = ["serve_worker", "Worker", "CREDITS", "FLUSH_SECONDS"]

#: Batches a worker may hold (one running, the rest waiting).
CREDITS = 2
#: Longest a finished task's result waits in a worker before it is sent.
FLUSH_SECONDS = 0.002


def serve_worker(link: Link, server: int) -> None:
    """Run tasks from ``server`` until it says STOP (the rank's main thread)."""
    if not faulthandler.is_enabled():
        faulthandler.enable(file=sys.stderr, all_threads=False)
    link.send(server, DONE, ([], CREDITS, (where_cached(), socket.gethostname(), os.getpid())))
    Worker(link, server).run()
    link.flush()


class Worker(Loop):
    """Take in whatever arrived, then run one batch; wait (sleeping) only when none is here."""

    def __init__(self, link: Link, server: int):
        super().__init__(link)
        self.server = server
        self.batches: Deque[List[Entry]] = collections.deque()

    def recv_tasks(self, src: int, batch: List[Entry]) -> None:
        self.batches.append(batch)

    def recv_stop(self, src: int, payload: None) -> None:
        self.over = True

    def step(self) -> bool:
        got = self.poll()
        if self.over or not self.batches:
            return got
        _run_batch(self.link, self.server, self.batches.popleft())
        return True


def _run_batch(link: Link, server: int, batch: List[Entry]) -> None:
    results: List[Tuple[int, bytes]] = []
    size = 0
    last = time.monotonic()
    for i, entry in enumerate(batch):
        blob = run_entry(entry)
        results.append((entry.tid, blob))
        size += len(blob)
        now = time.monotonic()
        if i + 1 < len(batch) and (now - last >= FLUSH_SECONDS or size >= MAX_BATCH_BYTES):
            link.send(server, DONE, (results, 0, None))
            results, size, last = [], 0, now
    link.send(server, DONE, (results, 1, None))


def run_entry(entry: Entry) -> bytes:
    """Run one entry (a task, or a task array: :mod:`.arrays`); its result blob."""
    try:
        call = pickle.loads(entry.blob)
    except BaseException as exc:
        return _pack(_unpicklable(exc))
    if isinstance(call, ArrayCall):
        return run_array(call)
    return _pack(execute(call))


def _unpicklable(exc: BaseException) -> Outcome:
    err = RemoteError.capture(exc)
    err = RemoteError(err.type_name, f"the task could not be unpickled on the worker "
                      f"(is its module importable there?): {err.message}",
                      err.traceback, err.where)
    now = time.time()
    return Outcome(None, err, err.where, now, now)


def _pack(outcome: Outcome) -> bytes:
    """``(value, error, start, end)`` pickled; a value that does not pickle becomes an error."""
    try:
        return dumps((outcome.value, outcome.error, outcome.start, outcome.end))
    except Exception as exc:
        bad = outcome.unpicklable(exc)
        return dumps((None, bad.error, bad.start, bad.end))


def unpack(blob: bytes, where: str, node: Optional[int]) -> Outcome:
    """The Outcome a result blob describes (on the root)."""
    try:
        value, error, start, end = pickle.loads(blob)
    except Exception as exc:
        err = RemoteError(type(exc).__name__, f"the task's result could not be unpickled on the "
                          f"root: {exc}", "", where)
        return Outcome(None, err, where, 0.0, 0.0, node)
    return Outcome(value, error, where, start, end, node)
