"""A task server's backlog and its rules: what a worker gets, what a pull or a thief takes.

Pure data structures, no MPI (tested in ``tests/unit``). A queued task is an
:data:`Entry` tuple; the server never unpickles the task itself, so a server
rank imports no user code. Placement (issue 17's locality hook) is the
``node`` and ``hard`` fields of an entry:

* ``node < 0`` -- free: any worker;
* ``hard`` -- only workers of ``node``; never stolen, never pulled;
* otherwise *soft*: workers of ``node`` first; a worker of another node
  takes it only when nothing of its own node or free is left (on the same
  server: ``node``'s workers were all busy, or they would have taken it), and
  an idle server may steal it (the owner's workers are all busy). The
  runtime counts where placed tasks ran.

Order: a worker of node K takes ``hard[K]``, ``soft[K]``, free, then others'
soft tasks, each FIFO (oldest first). Thieves take from the other end
(newest first: the owner keeps the tasks it was about to run), free tasks
before soft ones, at most half of what is stealable (ADLB/work-stealing
practice). A task with a per-task timeout travels alone in its batch, so its
server knows when it started (for the give-up backstop).
"""

from __future__ import annotations

import collections
from typing import Deque, Dict, Iterator, List, NamedTuple, Optional, Tuple

__all__ = ["Entry", "TaskQueue", "guided_chunk", "MAX_BATCH_BYTES"]


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


#: Most bytes of pickled tasks in one message (a batch, a pull, a steal) -- far
#: below MPI's 2 GiB count limit, and small enough not to stall the receiver.
MAX_BATCH_BYTES = 4 << 20


def guided_chunk(available: int, workers: int, max_chunk: int) -> int:
    """Tasks per batch to one worker: ``available / (2 * workers)``, between 1 and ``max_chunk``.

    Guided self-scheduling: large batches while much work is queued (few
    messages per task), single tasks at the end (balance).
    """
    if available <= 0:
        return 0
    return max(1, min(max_chunk, available // (2 * max(1, workers))))


class TaskQueue:
    """One server's backlog (see the module docstring)."""

    def __init__(self) -> None:
        self.free: Deque[Entry] = collections.deque()
        self.soft: Dict[int, Deque[Entry]] = {}
        self.hard: Dict[int, Deque[Entry]] = {}
        self._soft_total = 0
        self._hard_total = 0

    def __len__(self) -> int:
        return len(self.free) + self._soft_total + self._hard_total

    def __bool__(self) -> bool:
        return len(self) > 0

    def push(self, entry: Entry) -> None:
        node = entry.node
        if node < 0:
            self.free.append(entry)
        elif entry.hard:
            self.hard.setdefault(node, collections.deque()).append(entry)
            self._hard_total += 1
        else:
            self.soft.setdefault(node, collections.deque()).append(entry)
            self._soft_total += 1

    def extend(self, entries: List[Entry]) -> None:
        for e in entries:
            self.push(e)

    @property
    def stealable(self) -> int:
        """Entries a thief or a pull may take (free and soft)."""
        return len(self.free) + self._soft_total

    def available(self, node: int) -> int:
        """How many entries a worker of ``node`` could be given."""
        hard = self.hard.get(node)
        return (len(hard) if hard else 0) + len(self.free) + self._soft_total

    def _sources(self, node: int, elsewhere: bool) -> Iterator[Tuple[Deque[Entry], str]]:
        hard = self.hard.get(node)
        if hard:
            yield hard, "hard"
        soft = self.soft.get(node)
        if soft:
            yield soft, "soft"
        yield self.free, "free"
        if elsewhere:
            for k, q in list(self.soft.items()):
                if k != node and q:
                    yield q, "soft"

    def take(self, node: int, count: int, elsewhere: bool = True,
             max_bytes: int = MAX_BATCH_BYTES) -> List[Entry]:
        """Up to ``count`` entries for a worker of ``node`` (oldest first).

        A task with a per-task timeout is only ever first in a batch, and
        ends it; a batch stops before ``max_bytes`` of pickled tasks (but
        holds at least one). ``elsewhere=False`` keeps other nodes' soft tasks out.
        """
        out: List[Entry] = []
        size = 0
        for q, kind in self._sources(node, elsewhere):
            while q and len(out) < count:
                head = q[0]
                if out and (head.timeout is not None or size + len(head.blob) > max_bytes):
                    count = 0  # the batch ends here
                    break
                out.append(q.popleft())
                size += len(head.blob)
                self._count_out(kind, 1)
                if head.timeout is not None:
                    count = 0
            if len(out) >= count:
                break
        self._prune()
        return out

    def take_free(self, count: int, max_bytes: int = MAX_BATCH_BYTES) -> List[Entry]:
        """Up to ``count`` free entries, oldest first (what a server's pull gets from the root)."""
        out: List[Entry] = []
        size = 0
        free = self.free
        while free and len(out) < count:
            if out and size + len(free[0].blob) > max_bytes:
                break
            size += len(free[0].blob)
            out.append(free.popleft())
        return out

    def steal(self, count: int, max_bytes: int = MAX_BATCH_BYTES) -> List[Entry]:
        """At most ``count`` and at most half (rounded up) of what is stealable; newest first."""
        n = min(count, (self.stealable + 1) // 2)
        out: List[Entry] = []
        size = 0
        for q, soft in [(self.free, False)] + [(q, True) for q in self.soft.values()]:
            while len(out) < n and q and not (out and size + len(q[-1].blob) > max_bytes):
                size += len(q[-1].blob)
                out.append(q.pop())
                if soft:
                    self._soft_total -= 1
        self._prune()
        return out

    def drain(self) -> List[Entry]:
        """Remove and return everything (cancellation)."""
        out = list(self.free)
        for q in list(self.soft.values()) + list(self.hard.values()):
            out.extend(q)
        self.free.clear()
        self.soft.clear()
        self.hard.clear()
        self._soft_total = self._hard_total = 0
        return out

    def _count_out(self, kind: str, n: int) -> None:
        if kind == "soft":
            self._soft_total -= n
        elif kind == "hard":
            self._hard_total -= n

    def _prune(self) -> None:
        for table in (self.soft, self.hard):
            for k in [k for k, q in table.items() if not q]:
                del table[k]

    def hard_nodes(self) -> List[int]:
        """Nodes with hard-placed entries waiting."""
        return [k for k, q in self.hard.items() if q]

