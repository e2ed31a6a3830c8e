"""The root's dispatcher: task records, the root's own workers, feeding node servers.

Runs in one thread of the root rank (the flow's ``main`` runs in the main
thread), which makes every MPI call of the root. ``launch`` -- called by the
runtime from any thread -- pickles the task there (so a task that does not
pickle fails at once, in the caller) and appends it to an inbox; the
dispatcher thread takes it from there:

* a task placed on a node served by another server is *pushed* to it in the
  next ``FEED`` message; every other task joins the root's backlog, from
  which the root serves its own workers (``central``: all workers) and
  answers node servers' asks (``UP`` carries ``ask``; pending asks are
  remembered and served as tasks arrive, so idle servers never poll);
* results (``DONE`` from its workers, ``UP`` from servers) are unpickled and
  handed to the runtime's callback (``done(outcome)``) in this thread.

Per task the root handles one ``TASKS`` and one ``DONE`` message per *batch*
of its own workers, and one ``FEED``/``UP`` per batch of up to
``window`` tasks for a node server. ``bench/dispatch_model.md`` has the
measured costs.
"""

from __future__ import annotations

import collections
import itertools
import signal
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from core.mpi.link import Link, dumps

from ...errors import ExecutorError, RemoteError
from ...runtime import capture_executor_error
from ...tasks import Outcome, TaskCall, where_cached
from .arrays import ArrayCall, ArrayDone, array_chunks, chunk_cap, same_array
from .queues import MAX_BATCH_BYTES, Entry, fit_bytes
from .roles import Roles
from .server import Options, Result, Server
from .wire import FEED, FINAL, STOP, UP
from .worker import run_entry, unpack

__all__ = ["RootServer"]

Done = Callable[[Outcome], None]


class RootServer(Server):
    """The root rank's dispatcher (see the module docstring)."""

    def __init__(self, link: Link, roles: Roles, options: Options):
        assert roles.root is not None   # plan_roles names one
        super().__init__(link, roles, roles.root, options)
        self._ids = itertools.count(1)
        self.records: Dict[int, Tuple[Done, str]] = {}
        self.inbox: Deque[Entry] = collections.deque()
        self.where: Dict[int, str] = {r: f"rank {r}" for r in range(roles.size)}
        self.node_server = roles.server_of_node()  # node -> serving rank
        self.asks: Dict[int, int] = {s: 0 for s in roles.servers if s != roles.root}
        self.asking: Set[int] = set()  # servers with asks pending
        self.dry_unsaid: Set[int] = set()  # asked since last told whether the root is dry
        self.pushes: Dict[int, List[Entry]] = collections.defaultdict(list)
        self.assigned: Dict[int, int] = {}  # tid -> node server it was fed to
        self.byes: Dict[int, List[int]] = {}
        self.stop_requested = False
        self.stopping = False  # STOP sent to the node servers
        self.cancel = False
        self.stopped: set = set()  # the root's workers told to STOP
        self.finished = threading.Event()
        self.error: Optional[BaseException] = None
        self._wake = threading.Event()
        self._sleeping = False
        self.lost_notes: Dict[int, str] = {}
        self.local_only = not roles.workers  # one rank: run tasks in this thread
        self.tasks_done = 0
        self.array_entries = 0  # task arrays queued, and the tasks they held
        self.array_tasks = 0
        self._said_dry: Dict[int, bool] = {}
        self.term_poll: Callable[[], None] = lambda: None  # SIGTERM seen by any thread
        self.summary: Callable[[], str] = lambda: ""  # the run's counts (set by the executor)

    # -- any thread ---------------------------------------------------------------
    def launch(self, call: TaskCall, done: Done) -> None:
        """Queue one task attempt; ``done(outcome)`` is called from the dispatcher thread."""
        self._check_open()
        blob = dumps(call)  # raises here, in the caller, for a task that does not pickle
        place = call.place
        limits = call.limits
        entry = Entry(next(self._ids), call.name, place[0] if place else -1,
                      bool(place and place[1]), limits.timeout, limits.deadline, blob)
        self._queue([(entry, (done, call.name))])

    def launch_array(self, calls: List[TaskCall], dones: List[Done]) -> None:
        """Queue ready tasks of one app as task arrays (:mod:`.arrays`); one ``done`` per call.

        Cut into :func:`~.arrays.array_chunks`; every chunk is pickled before
        any is queued (a call that does not pickle fails them all here, in the
        caller). Calls that cannot share an array go one by one (:meth:`launch`).
        """
        self._check_open()
        if not same_array(calls):
            for call, done in zip(calls, dones):
                self.launch(call, done)
            return
        cap = chunk_cap(self.options.max_chunk, calls[0].limits.timeout)
        sizes = array_chunks(len(calls), max(1, len(self.roles.workers)), cap)
        queued: List[Tuple[Entry, Tuple[Done, str]]] = []
        i = 0
        for size in sizes:
            self._array_entries(calls[i:i + size], dones[i:i + size], queued)
            i += size
        self._queue(queued)

    def _check_open(self) -> None:
        if self.stop_requested:
            raise ExecutorError("the mpi executor is shut down: no new tasks can start")

    def _queue(self, queued: List[Tuple[Entry, Tuple[Done, str]]]) -> None:
        """Record the entries' callbacks and hand the entries to the dispatcher thread."""
        for entry, record in queued:
            self.records[entry.tid] = record
            self.inbox.append(entry)
        if self._sleeping:
            self._wake.set()

    def _array_entries(self, calls: List[TaskCall], dones: List[Done],
                       out: List[Tuple[Entry, Tuple[Done, str]]]) -> None:
        call = calls[0]
        limits = call.limits
        if len(calls) == 1:
            entry = Entry(next(self._ids), call.name, -1, False, limits.timeout,
                          limits.deadline, dumps(call))
            out.append((entry, (dones[0], call.name)))
            return
        try:
            blob = dumps(ArrayCall.of(calls))
        except Exception:  # an item does not pickle: each alone, so only it fails
            for c, d in zip(calls, dones):
                try:
                    self._array_entries([c], [d], out)
                except Exception as exc:
                    d(Outcome(None, capture_executor_error(exc), "executor", 0.0, 0.0))
            return
        if len(blob) > MAX_BATCH_BYTES:  # large arguments: halves, down to single tasks
            half = len(calls) // 2
            self._array_entries(calls[:half], dones[:half], out)
            self._array_entries(calls[half:], dones[half:], out)
            return
        k = len(calls)
        name = f"{call.name}..{calls[-1].name} (array of {k})"
        # The give-up backstop needs a bound on the whole chunk: k times the per-item
        # timeout (each item's own timeout is enforced on the worker).
        timeout = limits.timeout * k if limits.timeout is not None else None
        entry = Entry(next(self._ids), name, -1, False, timeout, limits.deadline, blob, k)
        out.append((entry, (ArrayDone(dones), name)))
        self.array_entries += 1
        self.array_tasks += k

    def request_stop(self, cancel: bool) -> None:
        self.cancel = self.cancel or cancel
        self.stop_requested = True
        self._wake.set()

    # -- the dispatcher thread -------------------------------------------------
    def run(self) -> None:
        # SIGTERM goes to the main thread (whose handler reports); this thread also
        # polls the wakeup pipe, in case the main thread is blocked and never runs it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            super().run()
        except BaseException as exc:  # pragma: no cover - a bug: fail loudly, never hang
            self.error = exc
            import traceback

            traceback.print_exc()
            self.say(f"{self.who}: the mpi executor's dispatcher failed ({type(exc).__name__}: "
                     f"{exc}); its workers cannot be stopped cleanly: aborting the job")
            self.link.comm.Abort(1)
        finally:
            self.finished.set()

    def step(self) -> bool:
        self.term_poll()
        progress = self._take_inbox()
        progress |= self.poll()
        if self.local_only:
            progress |= self._run_here()
        else:
            for e in self.unservable():
                self._fail_tid(e.tid, "placed on a node (hard) that has no live worker left")
        progress |= self.serve_workers()
        progress |= self._feed_servers()
        self.maybe_steal()
        self.check_stuck()
        self.check_dead()
        if self.stop_requested and not self.stopping and not self.inbox:
            if self.cancel:
                for e in self.queue.drain():
                    self._fail_tid(e.tid, "cancelled: the executor was shut down")
            if not self.records or self.cancel:
                self.stopping = True
                for s in self.asks:
                    self.link.send(s, STOP, self.cancel)
        if self.stopping:
            # Stop each live worker of the root's once its hands are empty (with
            # cancel, what it runs still finishes: it is bounded by its limits).
            for slot in self.slots.values():
                if not slot.lost and not slot.batches and slot.rank not in self.stopped:
                    self.link.send(slot.rank, STOP, None)
                    self.stopped.add(slot.rank)
            live = sum(1 for slot in self.slots.values() if not slot.lost)
            # Not before the answer to our own STEAL came: an unreceived message
            # could be matched by the next executor on a reused communicator.
            if (len(self.byes) == len(self.asks) and len(self.stopped) >= live
                    and not self.steal_out):
                for s in self.asks:
                    self.link.send(s, FINAL, None)
                # A batch sent to a worker that was then given up is never received
                # (a large one never completes): do not wait for it (the job aborts).
                self.link.flush(timeout=2.0 if self.lost or self.lost_notes else 60.0)
                if self.cancel:
                    self._fail_all("cancelled: the executor was shut down")
                self.over = True
        return progress

    def idle(self) -> None:
        """Sleep until :meth:`launch` wakes this thread or the pause ends."""
        self._sleeping = True
        if not self.inbox and not self.stop_requested:
            self._wake.wait(self.backoff.pause)
            self._wake.clear()
        elif self.stop_requested:
            time.sleep(self.backoff.pause)
        self._sleeping = False
        self.backoff.grow()

    def _take_inbox(self) -> bool:
        inbox = self.inbox
        if not inbox:
            return False
        node_server = self.node_server
        root = self.rank
        while inbox:
            entry = inbox.popleft()
            node = entry.node
            if node >= 0:
                server = node_server.get(node, root)
                if server != root:
                    self.pushes[server].append(entry)
                    self.assigned[entry.tid] = server
                    continue
            self.queue.push(entry)
        return True

    def recv_up(self, src: int, payload: Any) -> None:
        if src not in self.asks:
            return self.unexpected(src, UP)
        results, ask, notes = payload
        for n in notes:
            self.note(n)
        if results:
            self.deliver(results)
        if ask:
            self.asks[src] += ask
            self.asking.add(src)
            self.dry_unsaid.add(src)

    def recv_bye(self, src: int, tids: List[int]) -> None:
        self.byes[src] = tids
        for tid in tids:
            self._fail_tid(tid, "cancelled: the executor was shut down")

    def _feed_servers(self) -> bool:
        """FEED the servers with pending asks or pushed tasks (only those: O(busy servers))."""
        if self.queue.free:
            targets = self.asking | set(self.pushes)
        else:  # nothing to pull: only pushes, and servers not yet told the root is dry
            targets = self.dry_unsaid | set(self.pushes)
            self.dry_unsaid = set()
        if not targets:
            return False
        sent = False
        for server in targets:
            want = self.asks[server]
            pushed = self._take_pushes(server)
            pulled: List[Entry] = []
            if want > 0 and self.queue.free:
                pulled = self.queue.take_free(want)
                want = self.asks[server] = want - len(pulled)
            if want <= 0:
                self.asking.discard(server)
            if not pushed and not pulled and not (want > 0 and not self._said_dry.get(server)):
                continue
            for e in pulled:
                self.assigned[e.tid] = server
            dry = want > 0
            self._said_dry[server] = dry
            self.link.send(server, FEED, (pulled + pushed, len(pulled), dry))
            sent = True
        return sent

    def _take_pushes(self, server: int) -> List[Entry]:
        """The tasks placed on ``server``'s node waiting to go, at most MAX_BATCH_BYTES of them."""
        waiting = self.pushes.pop(server, None)
        if not waiting:
            return []
        n = fit_bytes(waiting)
        if n < len(waiting):
            self.pushes[server] = waiting[n:]
        return waiting[:n]

    def stopping_now(self) -> bool:
        return self.stop_requested

    def may_steal(self) -> bool:
        return not self.stop_requested

    @property
    def who(self) -> str:
        return "workflow run (root)"

    # -- results --------------------------------------------------------------------
    def deliver(self, results: List[Result]) -> None:
        where, node_of = self.where, self.roles.node_of
        for tid, rank, blob in results:
            self._resolve(tid, blob, where.get(rank, f"rank {rank}"), node_of[rank])

    def _resolve(self, tid: int, blob: bytes, where: str, node: Optional[int]) -> None:
        """Hand task ``tid``'s result blob to its callback(s) (a late or unknown one: dropped)."""
        rec = self.records.pop(tid, None)
        self.assigned.pop(tid, None)
        if rec is None:
            return
        done = rec[0]
        if type(done) is ArrayDone:
            self.tasks_done += done.count
            done.resolve(blob, where, node)
        else:
            self.tasks_done += 1
            done(unpack(blob, where, node))

    def note(self, note: Tuple[Any, ...]) -> None:
        if note[0] == "hello":
            self.where[note[1]] = note[2]
        elif note[0] == "lost":
            self.lost_notes[note[1]] = note[2]
        elif note[0] == "died":
            self.lost_notes[note[1]] = f"rank {note[1]} died"
            try:
                counts = self.summary()
            except Exception:  # pragma: no cover - a report must not break the dispatcher
                counts = ""
            # Its server said what it held; the root adds the run's counts.
            self.say(f"workflow run (root): worker rank {note[1]} died"
                     + (f"; so far: {counts}" if counts else ""))

    def _fail_tid(self, tid: int, message: str) -> None:
        rec = self.records.pop(tid, None)
        self.assigned.pop(tid, None)
        if rec is None:
            return
        err = RemoteError("ExecutorError", message, "", "mpi executor (root)")
        now = time.time()
        rec[0](Outcome(None, err, "mpi executor (root)", now, now))

    def _fail_all(self, message: str) -> None:
        for tid in list(self.records):
            try:
                self._fail_tid(tid, message)
            except Exception:  # pragma: no cover - callbacks of a broken run
                pass

    # -- one rank: no workers ---------------------------------------------------
    def _run_here(self) -> bool:
        """Run one queued entry in this thread, as a worker would (its result pickled too)."""
        if not self.queue:
            return False
        entry = self.queue.take(0, 1)[0]
        self._resolve(entry.tid, run_entry(entry), where_cached(), None)
        return True

    # -- reports ------------------------------------------------------------------
    def in_flight_report(self) -> List[str]:
        """One line per task in the hands of the root's workers or fed to a node server."""
        lines = self.in_flight_lines()
        by_server: Dict[int, int] = collections.Counter(self.assigned.values())
        for server, n in sorted(by_server.items()):
            lines.append(f"{n} task(s) with the task server on {self.where.get(server, server)}"
                         " (it reports its own)")
        return lines

