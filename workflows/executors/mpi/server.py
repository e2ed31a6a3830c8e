"""A task server: gives its workers batches, steals when idle, gives up on stuck workers.

The root is one (:mod:`.root`); in ``nodes`` mode every other node's lowest rank is one
too (:class:`NodeServer`), fed by the root in batches. What all servers share
(:class:`Server`; roles, messages and failures: docs/DISPATCH.md):

* **Workers pull.** A worker holds up to two batches of ``guided_chunk(available,
  workers)`` tasks; each finished batch returns a credit.
* **Idle servers steal** (as Swift/T's ADLB servers): a server with hungry workers and
  nothing for them asks a random other server, which gives at most half of its free
  backlog and of the soft-placed tasks past their locality wait; empty answers back off
  from 1 ms to 50 ms.
* **The give-up backstop.** A worker still silent :func:`~workflows.limits.grace_seconds`
  after its task's timeout (or the run's deadline) is stuck where no interrupt reaches:
  its task fails as timed out and the worker is *lost* (never served again, its queued
  batches go to others); the root ends the job with ``MPI_Abort`` after the summary.

One module (~470 lines) for the one loop of a node server: its messages, feeding,
stealing and the backstop share the server's state.
"""

from __future__ import annotations

import collections
import os
import random
import socket
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from core.mpi.link import Credits, Link, dumps
from core.mpi.loop import Loop

from ...errors import RemoteError
from ...limits import Limits, grace_seconds
from ...tasks import where_cached
from .queues import MAX_BATCH_BYTES, Entry, TaskQueue, guided_chunk
from .roles import Roles
from .wire import BYE, DONE, STEAL, STOLEN, STOP, TASKS, UP

__all__ = ["Server", "NodeServer", "Options", "Batch", "Slot"]

Result = Tuple[int, int, bytes]  # (tid, worker rank, blob)

#: Mean task time (s) above which tasks go one at a time without prefetch.
LONG_TASK = 0.01


class Options:
    """Dispatch tuning (same on every rank; resolved by the executor)."""

    __slots__ = ("max_chunk", "window", "up_batch", "flush_seconds", "locality_wait")

    def __init__(self, max_chunk: int = 64, window: int = 0, up_batch: int = 256,
                 flush_seconds: float = 0.0, locality_wait: float = 0.0):
        self.max_chunk = max_chunk
        # Delay scheduling: seconds a soft-placed task waits for its node (queues.TaskQueue).
        self.locality_wait = locality_wait
        self.window = window  # tasks a node server keeps (0: 8 per worker, at least 64)
        self.up_batch = up_batch
        # Longest a result waits in a node server (0: ROOT_BUDGET's share, >= 2 ms).
        self.flush_seconds = flush_seconds


#: Result messages per second that all node servers together may send the root:
#: each server flushes at most every ``servers / ROOT_BUDGET`` s (2 ms up to 100
#: servers, 0.4 s at 8,192), so the root's message load stays bounded however
#: many nodes there are, at the price of result latency (``bench/dispatch_model.md``).
ROOT_BUDGET = 20000.0


class Batch:
    """One batch in a worker's hands: its entries, how many came back, when it started."""

    __slots__ = ("entries", "done", "start")

    def __init__(self, entries: List[Entry], start: Optional[float]):
        self.entries = entries
        self.done = 0
        self.start = start

    def expires(self, grace: float) -> Optional[float]:
        """``time.time()`` after which the worker is given up (None: never)."""
        if self.start is None or self.done >= len(self.entries):
            return None
        head = self.entries[self.done]
        left = Limits(head.timeout, head.deadline).seconds_left(self.start)
        return None if left is None else self.start + left + grace


class Slot:
    """A worker as its server sees it (``pid`` set when it runs on the server's host)."""

    __slots__ = ("rank", "node", "batches", "lost", "where", "pid")

    def __init__(self, rank: int, node: int):
        self.rank = rank
        self.node = node
        self.batches: Deque[Batch] = collections.deque()
        self.lost = False
        self.where = f"rank {rank}"
        self.pid: Optional[int] = None


def process_gone(pid: int) -> bool:
    """True if process ``pid`` (on this host) exited: absent, or a zombie not yet reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    # The state follows the command name, which is in parentheses and may hold spaces.
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    return state in (b"Z", b"X")


class Server(Loop):
    """What every task server does (see the module docstring)."""

    def __init__(self, link: Link, roles: Roles, rank: int, options: Options):
        super().__init__(link)
        self.roles = roles
        self.rank = rank
        self.options = options
        self.queue = TaskQueue(wait=options.locality_wait)
        self.slots: Dict[int, Slot] = {r: Slot(r, roles.node_of[r]) for r in roles.workers_of(rank)}
        self._served_changed()
        self.hungry = Credits()  # the workers' free credits (batches they may take)
        self.task_seconds = 0.0  # running mean of a task's time (from finished batches)
        self.peers = [s for s in roles.servers if s != rank]
        self.grace = grace_seconds()
        self.lost: Dict[int, str] = {}
        self.steal_out = False
        self.steal_pause = 0.001
        self.next_steal = 0.0
        self.stolen_tasks = 0  # tasks this server took from others
        self.next_check = 0.0
        self.next_death_check = 0.0
        self._rng = random.Random(rank)

    # -- hooks ---------------------------------------------------------------
    def deliver(self, results: List[Result]) -> None:
        """Results of tasks (the root resolves them; a node server sends them up)."""
        raise NotImplementedError

    def note(self, note: Tuple[Any, ...]) -> None:
        """A ``hello``/``lost`` note for the root."""
        raise NotImplementedError

    def may_steal(self) -> bool:
        """Whether stealing makes sense now (a node server: only once the root ran dry)."""
        return True

    # -- messages from workers and peers ----------------------------------------
    def recv_done(self, src: int, payload: Any) -> None:
        results, credit, hello = payload
        slot = self.slots.get(src)
        if slot is None:
            return self.unexpected(src, DONE)
        if slot.lost:  # given up: what it sends now was failed or handed to others already
            return
        if hello is not None:
            slot.where, host, pid = hello
            if host == socket.gethostname():
                slot.pid = pid  # on this host: its death can be seen at once
            self.note(("hello", src, slot.where))
        if results:
            slot.batches[0].done += len(results)
            self.deliver([(tid, src, blob) for tid, blob in results])
        if credit:
            if slot.batches:
                now = time.time()
                done = slot.batches.popleft()
                if done.start is not None:
                    each = (now - done.start) / max(1, sum(e.tasks for e in done.entries))
                    self.task_seconds = (each if not self.task_seconds
                                         else 0.8 * self.task_seconds + 0.2 * each)
                if slot.batches:
                    slot.batches[0].start = now
            if not slot.lost:
                self.hungry.grant(src, credit)

    def recv_steal(self, src: int, want: int) -> None:
        entries = self.queue.steal(want) if not self.stopping_now() else []
        self.link.send(src, STOLEN, entries)

    def recv_stolen(self, src: int, entries: List[Entry]) -> None:
        self.steal_out = False
        now = time.monotonic()
        if entries:
            self.stolen_tasks += len(entries)
            # Soft tasks among them waited their locality wait at the victim already.
            self.queue.extend(entries, ripe=True)
            self.steal_pause = 0.001
            self.next_steal = now
        else:
            self.next_steal = now + self.steal_pause
            self.steal_pause = min(0.05, self.steal_pause * 2)

    def stopping_now(self) -> bool:
        return False

    def _served_changed(self) -> None:
        """Tell the queue which nodes have a live worker here (others' soft tasks need not wait)."""
        self.queue.served = {s.node for s in self.slots.values() if not s.lost}

    # -- giving work ------------------------------------------------------------
    def serve_workers(self) -> bool:
        """Send batches to workers with free credits; True if anything was sent."""
        if not self.hungry or not self.queue:
            return False
        sent = False
        starved: List[int] = []
        n = len(self.slots)
        # Long tasks: one at a time and no prefetch, so none waits behind another
        # while a worker is idle (batching only pays for short tasks).
        long_tasks = self.task_seconds >= LONG_TASK
        max_chunk = 1 if long_tasks else self.options.max_chunk
        queue = self.queue
        while queue and (rank := self.hungry.take()) is not None:
            slot = self.slots[rank]
            if slot.lost:
                continue
            if long_tasks and slot.batches:
                starved.append(rank)
                continue
            chunk = guided_chunk(queue.available(slot.node), n, max_chunk)
            batch = queue.take(slot.node, chunk) if chunk else []
            if not batch:
                starved.append(rank)
                continue
            slot.batches.append(Batch(batch, None if slot.batches else time.time()))
            self.link.send(rank, TASKS, batch)
            sent = True
        self.hungry.give_back(starved)
        return sent

    def maybe_steal(self) -> None:
        """Ask a random other server for tasks when a worker is idle and nothing is here for it.

        Idle means empty-handed: a credit kept for prefetching (a worker still
        running a batch) is no reason to take tasks from another node.
        """
        if self.steal_out or not self.peers or not self.hungry:
            return
        idle = {r for r in self.hungry if not self.slots[r].batches}
        if not idle or any(self.queue.available(self.slots[r].node) for r in idle):
            return
        now = time.monotonic()
        if now < self.next_steal or not self.may_steal():
            return
        victim = self._rng.choice(self.peers)
        want = max(1, len(idle) * (1 if self.task_seconds >= LONG_TASK else self.options.max_chunk))
        self.link.send(victim, STEAL, want)
        self.steal_out = True

    # -- the backstop -----------------------------------------------------------
    def check_stuck(self) -> None:
        """Give up on workers silent past their task's limit + grace (every 0.1 s at most)."""
        now = time.time()
        if now < self.next_check:
            return
        self.next_check = now + 0.1
        for slot in self.slots.values():
            if slot.lost or not slot.batches:
                continue
            expires = slot.batches[0].expires(self.grace)
            if expires is not None and now > expires:
                self.lose(slot)

    def _give_up(self, slot: Slot, lost: str, note: Tuple[Any, ...], err: RemoteError) -> None:
        """Never serve ``slot`` again: say so (``lost``, ``note``), fail the task it was
        running with ``err``, give the entries it had not started to the other workers."""
        slot.lost = True
        self._served_changed()
        self.hungry.drop(slot.rank)
        head = slot.batches[0]
        rest = [e for i, b in enumerate(slot.batches)
                for e in b.entries[(b.done + 1) if i == 0 else 0:]]
        slot.batches.clear()
        self.lost[slot.rank] = lost
        self.note(note)
        if head.done < len(head.entries):
            self.fail(head.entries[head.done].tid, slot.rank, err, head.start)
        self.queue.extend(rest)

    def lose(self, slot: Slot) -> None:
        head = slot.batches[0]
        message = (
            f"ran past its time limit and did not stop within the {self.grace:g} s grace "
            f"(stuck in code an interrupt cannot reach; use @app(isolate=True)); its worker, "
            f"{slot.where}, was given up"
        )
        err = RemoteError("TaskTimeout", message, "", slot.where, kind="timeout")
        lost = f"{slot.where}: stuck in task {head.entries[head.done].name}"
        self._give_up(slot, lost, ("lost", slot.rank, lost), err)

    def check_dead(self) -> None:
        """Notice at once a worker on this host whose process is gone (every 50 ms at most).

        ``mpirun`` ends the job about a second after a rank dies; said now, the
        report reaches the terminal before that teardown (a report made in the
        SIGTERM handler may be dropped by it). The running task fails as
        :class:`~workflows.errors.TaskCrashed`; the worker's other tasks go to
        the other workers (if the job survives: a task that ``os._exit(0)``s).
        """
        now = time.monotonic()
        if now < self.next_death_check:
            return
        self.next_death_check = now + 0.05
        for slot in self.slots.values():
            if slot.lost or slot.pid is None or not slot.batches:
                continue
            if process_gone(slot.pid):
                self.died(slot)

    def died(self, slot: Slot) -> None:
        lines = [f"{name} ({state})" for name, state, _ in self.in_flight() if _ == slot.where]
        text = (f"{self.who}: worker {slot.where} died (its process is gone: a signal or "
                f"os._exit; mpirun's message names which) while it held: "
                f"{', '.join(lines) or 'nothing'}")
        self.say(text)
        err = RemoteError("TaskCrashed", f"its worker, {slot.where}, died while running it "
                          "(killed by a signal or os._exit; use @app(isolate=True) to "
                          "keep the worker and learn the signal)", "", slot.where, kind="crash")
        self._give_up(slot, f"{slot.where}: died", ("died", slot.rank, text), err)

    def fail(self, tid: int, rank: int, err: RemoteError, start: Optional[float] = None) -> None:
        """Deliver ``err`` as the result of task ``tid`` (held by ``rank`` since ``start``)."""
        now = time.time()
        self.deliver([(tid, rank, dumps((None, err, start or now, now)))])

    @property
    def who(self) -> str:
        return f"task server rank {self.rank}"

    def unservable(self) -> List[Entry]:
        """Hard-placed entries whose node has no live worker here (they would wait forever)."""
        live = self.queue.served or set()   # kept by _served_changed
        out: List[Entry] = []
        for node in list(self.queue.hard):
            if node not in live:
                out.extend(self.queue.hard.pop(node))
        if out:
            self.queue._hard_total -= len(out)
        return out

    def in_flight_lines(self) -> List[str]:
        """One line per task in the hands of this server's workers (for reports)."""
        return [f"{name} ({state}) on {where}" for name, state, where in self.in_flight()]

    def in_flight(self) -> List[Tuple[str, str, str]]:
        """(task name, ``running``/``queued``, worker where) of every task in workers' hands."""
        out = []
        for slot in list(self.slots.values()):
            for i, batch in enumerate(list(slot.batches)):
                for j, entry in enumerate(batch.entries[batch.done:]):
                    state = "running" if i == 0 and j == 0 and batch.start else "queued"
                    out.append((entry.name, state, slot.where))
        return out

    def busy(self) -> bool:
        """Tasks queued here or in live workers' hands."""
        if self.queue:
            return True
        return any(s.batches for s in self.slots.values() if not s.lost)


class NodeServer(Server):
    """A node's task server (``nodes`` mode): pulls batches from the root, sends results up."""

    def __init__(self, link: Link, roles: Roles, rank: int, options: Options):
        super().__init__(link, roles, rank, options)
        assert roles.root is not None   # plan_roles names one
        self.root = roles.root
        n = max(1, len(self.slots))
        self.window = options.window or max(64, 8 * n)
        self.requested = 0
        self.dry = False
        self.results: List[Result] = []
        self.results_bytes = 0
        self.notes: List[Tuple[Any, ...]] = []
        self.first_result = 0.0
        self.flush_seconds = options.flush_seconds or max(0.002, len(roles.servers) / ROOT_BUDGET)
        self.stopping = False
        self.cancel = False
        self.dropped: List[int] = []
        self.notes.append(("hello", rank, where_cached()))

    def deliver(self, results: List[Result]) -> None:
        if not self.results:
            self.first_result = time.monotonic()
        self.results.extend(results)
        self.results_bytes += sum(len(r[2]) for r in results)

    def note(self, note: Tuple[Any, ...]) -> None:
        self.notes.append(note)

    def may_steal(self) -> bool:
        return self.dry and not self.stopping

    def stopping_now(self) -> bool:
        return self.stopping

    def send_up(self, force: bool = False) -> bool:
        """Send results, notes and asks to the root when due; True if sent."""
        ask = 0
        if not self.stopping:
            backlog = len(self.queue)
            if backlog + self.requested < self.window // 2:
                ask = self.window - backlog - self.requested
        due = force or ask or self.notes
        if self.results and not due:
            due = (len(self.results) >= self.options.up_batch
                   or self.results_bytes >= MAX_BATCH_BYTES
                   or time.monotonic() - self.first_result >= self.flush_seconds
                   or not self.busy())
        if not due:
            return False
        self.requested += ask
        self.link.send(self.root, UP, (self.results, ask, self.notes))
        self.results, self.notes, self.results_bytes = [], [], 0
        return True

    def recv_feed(self, src: int, payload: Any) -> None:
        entries, pulled, dry = payload
        self.requested -= pulled
        self.dry = dry
        if self.stopping and self.cancel:
            self.dropped.extend(e.tid for e in entries)
            return
        self.queue.extend(entries)

    def recv_stop(self, src: int, cancel: bool) -> None:
        self.stopping, self.cancel = True, bool(cancel)
        if self.cancel:
            self.dropped.extend(e.tid for e in self.queue.drain())

    def recv_final(self, src: int, payload: None) -> None:
        self.over = True

    def run(self) -> None:
        """Serve until the root's FINAL (the rank's main thread)."""
        super().run()
        self.link.flush()

    def step(self) -> bool:
        progress = self.poll()
        for e in self.unservable():
            err = RemoteError("ExecutorError", f"placed on node {e.node} (hard), which has no "
                              "live worker left", "", self.who)
            self.fail(e.tid, self.rank, err)
        progress |= self.serve_workers()
        self.maybe_steal()
        self.check_stuck()
        self.check_dead()
        progress |= self.send_up(force=any(n[0] == "died" for n in self.notes))
        if self.stopping and not self.busy() and not self.steal_out and not self._closed:
            for slot in self.slots.values():
                if not slot.lost:
                    self.link.send(slot.rank, STOP, None)
            self.send_up(force=bool(self.results or self.notes))
            self.link.send(self.root, BYE, self.dropped)
            self._closed = True
        return progress

    _closed = False   # BYE sent
