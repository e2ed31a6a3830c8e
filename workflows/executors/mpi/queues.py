"""A task server's backlog and its rules: what a worker gets, what a pull or a thief takes.

Pure data structures, no MPI (tested in ``tests/unit``). A queued task is an
:data:`Entry` tuple; the server never unpickles the task itself, so a server rank
imports no user code. Placement is the ``node`` and ``hard`` fields of an entry:
``node < 0`` is free (any worker), ``hard`` only workers of ``node`` (never stolen nor
pulled), otherwise *soft*: workers of ``node`` first, others only after the locality
wait (:attr:`TaskQueue.wait`, delay scheduling). The rules, their order and why the
wait restarts at each local launch: docs/DISPATCH.md, "Placement".

A task with a per-task timeout travels alone in its batch, so its server knows when it
started (for the give-up backstop).
"""

from __future__ import annotations

import collections
import itertools
import math
import time
from typing import Callable, Deque, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

__all__ = ["Entry", "TaskQueue", "fit_bytes", "guided_chunk", "MAX_BATCH_BYTES"]


class Entry(NamedTuple):
    """One queued task (a tuple on the wire)."""

    tid: int  #: task id (the root's)
    name: str  #: task name, for reports
    node: int  #: node index it is placed on, -1: free
    hard: bool  #: placement is hard
    timeout: Optional[float]  #: per-task timeout (s): the task travels alone
    deadline: Optional[float]  #: the run's deadline (``time.time()``)
    blob: bytes  #: the pickled TaskCall (or ArrayCall: ``tasks`` tasks)
    tasks: int = 1  #: tasks it holds (> 1: a task array, see :mod:`.arrays`)


#: The queue time of a soft task that already waited elsewhere (stolen): before any
#: ``_ripe_before`` but ``-inf`` (a node busy with its own queue keeps even those).
_LONG_AGO = -1e300

#: Most bytes of pickled tasks in one message (a batch, a pull, a steal) -- far
#: below MPI's 2 GiB count limit, and small enough not to stall the receiver.
MAX_BATCH_BYTES = 4 << 20


def fit_bytes(entries: Iterable[Entry], max_bytes: int = MAX_BATCH_BYTES) -> int:
    """How many of ``entries``, in order, fit in one message of ``max_bytes`` (at least one)."""
    size = n = 0
    for e in entries:
        if n and size + len(e.blob) > max_bytes:
            break
        size += len(e.blob)
        n += 1
    return n


def guided_chunk(available: int, workers: int, max_chunk: int) -> int:
    """Tasks per batch to one worker: ``available / (2 * workers)``, between 1 and ``max_chunk``.

    Guided self-scheduling: large batches while much work is queued (few
    messages per task), single tasks at the end (balance).
    """
    if available <= 0:
        return 0
    return max(1, min(max_chunk, available // (2 * max(1, workers))))


class TaskQueue:
    """One server's backlog (see the module docstring).

    Parameters
    ----------
    wait : float
        The locality wait (s): how long a soft-placed task must have been in
        this queue before a worker of another node may take it or a thief may
        steal it (delay scheduling). 0: at once (no delay).
    clock : callable
        Seconds, monotonic (default :func:`time.monotonic`); tests pass their own.
    """

    def __init__(self, wait: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.free: Deque[Entry] = collections.deque()
        #: node -> (time it was queued here, entry), oldest first
        self.soft: Dict[int, Deque[Tuple[float, Entry]]] = {}
        self.hard: Dict[int, Deque[Entry]] = {}
        self.wait = wait
        self.clock = clock
        #: Nodes with a live worker served here (None: every node). A soft task
        #: placed on any other node has nobody to wait for: it may go at once.
        self.served: Optional[Set[int]] = None
        self._last_local: Dict[int, float] = {}  # node -> when its worker last took its soft task
        self._soft_total = 0
        self._hard_total = 0

    def __len__(self) -> int:
        return len(self.free) + self._soft_total + self._hard_total

    def __bool__(self) -> bool:
        return len(self) > 0

    def push(self, entry: Entry, ripe: bool = False) -> None:
        """Queue ``entry``; ``ripe``: a soft task that waited its locality wait elsewhere already.

        A ripe soft task goes to the head of its node's deque (it is older than
        anything queued here), so the oldest-first order still holds.
        """
        node = entry.node
        if node < 0:
            self.free.append(entry)
        elif entry.hard:
            self.hard.setdefault(node, collections.deque()).append(entry)
            self._hard_total += 1
        else:
            q = self.soft.setdefault(node, collections.deque())
            if ripe:
                q.appendleft((_LONG_AGO, entry))
            else:
                q.append((self.clock(), entry))
            self._soft_total += 1

    def extend(self, entries: List[Entry], ripe: bool = False) -> None:
        for e in reversed(entries) if ripe else entries:
            self.push(e, ripe)

    def _ripe_before(self, node: int) -> float:
        """Soft tasks of ``node`` queued before this time may go elsewhere.

        ``inf``: all of them (no wait, or no live worker of ``node`` here);
        ``-inf``: none, because a worker of ``node`` took one of its soft tasks
        less than ``wait`` ago -- the node is working through its queue
        (Spark's delay scheduling resets its wait on each local launch too).
        """
        if self.wait <= 0 or (self.served is not None and node not in self.served):
            return math.inf
        before = self.clock() - self.wait
        if self._last_local.get(node, -math.inf) > before:
            return -math.inf
        return before

    def _ripe(self, node: int, q: Deque[Tuple[float, Entry]]) -> int:
        """How many of ``node``'s soft tasks (the head of ``q``) waited their locality wait."""
        before = self._ripe_before(node)
        if before == math.inf:
            return len(q)
        n = 0
        for since, _ in q:
            if since > before:
                break
            n += 1
        return n

    def ripe_soft(self, but: Optional[int] = None) -> int:
        """Soft tasks (of nodes other than ``but``) that other nodes' workers may take."""
        return sum(self._ripe(k, q) for k, q in self.soft.items() if k != but)

    @property
    def stealable(self) -> int:
        """Entries a thief may take now (free, and soft ones past their locality wait)."""
        return len(self.free) + self.ripe_soft()

    def available(self, node: int) -> int:
        """How many entries a worker of ``node`` could be given now."""
        hard = self.hard.get(node)
        own = self.soft.get(node)
        return ((len(hard) if hard else 0) + (len(own) if own else 0) + len(self.free)
                + self.ripe_soft(but=node))

    def take(self, node: int, count: int, elsewhere: bool = True,
             max_bytes: int = MAX_BATCH_BYTES) -> List[Entry]:
        """Up to ``count`` entries for a worker of ``node`` (oldest first).

        Order: ``node``'s hard tasks, its soft tasks, free tasks, then (unless
        ``elsewhere=False``) other nodes' soft tasks that waited their
        locality wait. A task with a per-task timeout is only ever first in a
        batch, and ends it; a batch stops before ``max_bytes`` of pickled
        tasks (but holds at least one).
        """
        out: List[Entry] = []
        size = 0

        def fits(head: Entry) -> bool:
            nonlocal count
            if out and (head.timeout is not None or size + len(head.blob) > max_bytes):
                count = 0  # the batch ends here
                return False
            return True

        def took(head: Entry) -> None:
            nonlocal count, size
            out.append(head)
            size += len(head.blob)
            if head.timeout is not None:
                count = 0

        hard = self.hard.get(node)
        while hard and len(out) < count and fits(hard[0]):
            took(hard.popleft())
            self._hard_total -= 1
        own = self.soft.get(node)
        if own and len(out) < count and self.wait > 0:
            self._last_local[node] = self.clock()
        while own and len(out) < count and fits(own[0][1]):
            took(own.popleft()[1])
            self._soft_total -= 1
        free = self.free
        while free and len(out) < count and fits(free[0]):
            took(free.popleft())
        if elsewhere:
            for k, q in list(self.soft.items()):
                if k == node or len(out) >= count:
                    continue
                before = self._ripe_before(k)
                while q and len(out) < count and q[0][0] <= before and fits(q[0][1]):
                    took(q.popleft()[1])
                    self._soft_total -= 1
        self._prune()
        return out

    def take_free(self, count: int, max_bytes: int = MAX_BATCH_BYTES) -> List[Entry]:
        """Up to ``count`` free entries, oldest first (what a server's pull gets from the root)."""
        n = fit_bytes(itertools.islice(self.free, count), max_bytes)
        return [self.free.popleft() for _ in range(n)]

    def steal(self, count: int, max_bytes: int = MAX_BATCH_BYTES) -> List[Entry]:
        """At most ``count`` and at most half (rounded up) of what is stealable; newest first.

        Free tasks first, then soft ones past their locality wait: of those,
        the newest of the ripe ones (the owner keeps its oldest).
        """
        n = min(count, (self.stealable + 1) // 2)
        out: List[Entry] = []
        size = 0
        free = self.free
        while len(out) < n and free and not (out and size + len(free[-1].blob) > max_bytes):
            size += len(free[-1].blob)
            out.append(free.pop())
        for k, q in list(self.soft.items()):
            if len(out) >= n:
                break
            ripe = self._ripe(k, q)
            if not ripe:
                continue
            head = [q.popleft() for _ in range(ripe)]  # the ripe prefix, oldest first
            while len(out) < n and head and not (out and size + len(head[-1][1].blob) > max_bytes):
                size += len(head[-1][1].blob)
                out.append(head.pop()[1])
                self._soft_total -= 1
            q.extendleft(reversed(head))
        self._prune()
        return out

    def drain(self) -> List[Entry]:
        """Remove and return everything (cancellation)."""
        out = list(self.free)
        for sq in self.soft.values():
            out.extend(e for _, e in sq)
        for q in self.hard.values():
            out.extend(q)
        self.free.clear()
        self.soft.clear()
        self.hard.clear()
        self._soft_total = self._hard_total = 0
        return out

    def _prune(self) -> None:
        for k in [k for k, q in self.soft.items() if not q]:
            del self.soft[k]
        for k in [k for k, q in self.hard.items() if not q]:
            del self.hard[k]

