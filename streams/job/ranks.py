"""The loops the ranks of a receiving job run: receive, hand out, process, report.

One message loop (:class:`core.mpi.loop.Loop`), a class per role
(:mod:`streams.job.roles`), no threads; :func:`streams.job.session.rank_loop` gives
this rank's: a receiver's (:mod:`streams.job.receiver_loop`), rank 0's, a receiver
that decides for the job (:mod:`streams.job.coordinator_loop`), or a worker's
(:class:`WorkerLoop`: processes the partitions its receiver, same node, sends and
acknowledges each).

Their base, :class:`RankLoop`, is what every rank does: it sends rank 0 a heartbeat;
a processing rank runs ``analysis.process_partition``, merges the result into its
partial of the scan and sends rank 0 a live delta at most every ``live_interval / 2``
seconds. When rank 0 says "finalize X", a rank becomes ready once nothing of X is
left with it (receiver: X closed, its outbox and unacknowledged partitions free of
X; worker: the "finish X" marker, which its receiver queues behind X's last
partition); it then joins a non-blocking barrier and keeps looping, so a slow rank
never blocks another's socket; when the barrier completes, every rank runs the
collective finalize (:mod:`streams.job.finalize`).

Every rank leaves the loop on one decision, rank 0's: it announces each
finalize, and after the ``scans``-th (or the overall timeout) it tells the
receivers to open no new scan (``enough``), lets what is open finish, and then
announces ``stop``. MPI keeps one sender's messages in order, so a rank hears
``stop`` after every finalize announced before it and runs each of them first:
every rank enters the same collectives, none leaves while another waits in one.
Scans refused at ``begin`` (``busy``, ``too_large``, ...) never open, never count.

An exception on any rank is sent to every rank (``TAG_ABORT``) and raised
there: the loop never waits for a rank that failed. A rank that *died* cannot
say so; Open MPI then terminates the job, and rank 0 writes a report from the
last heartbeats on its way out (:func:`streams.job.session.receive_scans`).
"""
from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

import numpy as np

from core.mpi.link import TAGS as ALL_TAGS
from core.mpi.link import Backoff, Link
from core.mpi.loop import Loop
from streams.accounting import ScanReport
from analyses.contract import Analysis
from analyses.sparse import frames_for
from streams.job.messages import Abort, Ack, Detector, Finalize, Finish, Heartbeat, Live, Stop
from streams.errors import StreamError
from streams.protocol import ScanGeometry
from streams.job.roles import Roles

__all__ = ["RankLoop", "WorkerLoop", "TAGS"]

#: This loop's tags (numbers from :data:`core.mpi.link.TAGS`): WORK receiver -> worker
#: (a partition, or "finish" a scan), ACK worker -> receiver, LIVE deltas and CTRL
#: heartbeats/closed reports to rank 0, SHARE a scan's start or end between
#: receivers, ABORT to every rank, FIN rank 0's finalize/close/stop to every rank,
#: FRAME a viewer's frame request rank 0 -> receivers and their replies
#: (:mod:`streams.job.frames`).
TAGS = ALL_TAGS["stream"]
TAG_WORK, TAG_ACK, TAG_LIVE, TAG_CTRL, TAG_SHARE, TAG_ABORT, TAG_FIN, TAG_FRAME = (
    TAGS[n] for n in ("WORK", "ACK", "LIVE", "CTRL", "SHARE", "ABORT", "FIN", "FRAME"))


class RankLoop(Loop):
    """What every rank of a receiving job does, the base of each role's loop (see the
    module docstring). ``comm``: the loop's own communicator; ``options``: the
    ``SessionOptions``."""

    is_receiver = False
    socket: Any = None    # a receiver's socket, set by its protocol
    spill: Any = None     # a receiver's Spill (``--spill``)

    def __init__(self, comm: Any, roles: Roles, analysis: Analysis, options: Any) -> None:
        # sends kept until complete; idle: the socket's poll waits (0.1 to 5 ms)
        super().__init__(Link(comm, "stream", error=StreamError), Backoff(0.005, 1e-4))
        self.comm, self.roles, self.analysis, self.o = comm, roles, analysis, options
        self.rank = comm.rank
        self.index = roles.index(self.rank)
        # what this rank processed: partials by scan, live deltas not yet sent
        self.partials: Dict[str, Any] = {}
        self.live_pending: Dict[str, Tuple[ScanGeometry, Any]] = {}
        # rank 0's decisions
        self.to_finalize: Deque[str] = deque()
        self.barrier: Any = None
        self.stop_reason: Optional[str] = None
        self.next_heartbeat = time.monotonic()
        self.next_live = self.next_heartbeat + options.live_interval / 2

    def abort_all(self, message: str) -> None:
        """Tell every other rank to stop with ``message`` (best effort, non-blocking)."""
        for r in range(self.comm.size):
            if r != self.rank:
                with contextlib.suppress(Exception):   # already failing; the launcher ends us
                    self.link.send(r, TAG_ABORT, Abort(message))

    def _send(self, dest: int, tag: int, msg: Any) -> None:
        """``msg`` to ``dest``; to this rank itself: handled at once, not sent."""
        if dest == self.rank:
            self.handle(dest, tag, msg)
        else:
            self.link.send(dest, tag, msg)

    # ---- processing ----
    def _process(self, g: ScanGeometry, data: np.ndarray, frames: np.ndarray,
                 complete: np.ndarray) -> None:
        scan = g.scan
        if scan not in self.partials:
            self.analysis.prepare(g)
            self.partials[scan] = self.analysis.empty()
        p = self.analysis.process_partition(frames_for(self.analysis, data), frames, complete)
        self.partials[scan] = self.analysis.merge(self.partials[scan], p)
        lv = self.analysis.live(p)
        prev = self.live_pending.get(scan)
        self.live_pending[scan] = (g, lv if prev is None else self.analysis.merge(prev[1], lv))

    def _send_live(self, now: float, force: bool = False) -> None:
        if not self.live_pending or (now < self.next_live and not force):
            return
        self.next_live = now + self.o.live_interval / 2
        for g, lv in self.live_pending.values():
            self._send(0, TAG_LIVE, Live(g, lv))
        self.live_pending = {}

    def partial_of(self, scan: str) -> Any:
        """This rank's partial of ``scan`` (None: it processed none of it), forgotten here."""
        return self.partials.pop(scan, None)

    def closed_report(self, scan: str) -> Optional[ScanReport]:
        """This receiver's report of ``scan`` when it closed (None: none), forgotten here."""
        return None

    def forget(self, scan: str) -> None:
        """``scan`` is written: what this rank's socket kept of it goes."""

    def job_rejections(self) -> Any:
        """At the job's end, this receiver's rejections, summed by
        :func:`streams.job.ending.job_rejections`: ``(index, counts, examples, series never
        started, connections refused, refused while no scan was open)``; None: no socket."""
        if self.socket is None:
            return None
        never = self.socket.never_started()   # first: what is still held is rejected
        asm = self.socket.assembler
        self.socket.refusals()
        return (self.index, dict(asm.rejected), list(asm.examples), never,
                dict(self.socket.refused_from), self.socket.refused_outside_scans)

    # ---- heartbeats ----
    def _heartbeat(self, now: float) -> None:
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + self.o.heartbeat
            self._send(0, TAG_CTRL, Heartbeat(self.index, *self._news()))

    def _news(self) -> Tuple[List[Any], Any]:
        """A heartbeat's news: snapshots of the open scans, rejections (here: none)."""
        return [], None

    # ---- incoming MPI messages ----
    def recv_abort(self, src: int, msg: Abort) -> None:
        raise StreamError(msg.message)

    def recv_fin(self, src: int, msg: Any) -> None:
        """Rank 0's decisions: finalize a scan, stop (and the receivers' own)."""
        if isinstance(msg, Finalize):
            self.to_finalize.append(msg.scan)
        elif isinstance(msg, Stop):
            self.stop_reason = msg.reason

    # ---- the loop ----
    def run(self, finalize: Callable[[str], None],  # type: ignore[override]
            deadline: Optional[float] = None) -> None:
        """Loop until rank 0 says stop (after ``options.scans`` scans were finalized and
        nothing is open, or after the ``deadline``), calling the collective
        ``finalize(scan)`` for each scan rank 0 announces."""
        self._finalize, self.deadline = finalize, deadline
        super().run()
        self._send_live(time.monotonic(), force=True)

    def until(self) -> bool:
        # rank 0's "stop" alone ends the loop, and a rank told to stop still finishes the
        # finalizations announced before it: every other rank is about to enter them
        return self.stop_reason is not None and not self.to_finalize and self.barrier is None

    def step(self) -> bool:
        now = time.monotonic()
        busy = self.poll()
        self._heartbeat(now)
        self._send_live(now)
        if self.barrier is None and self.to_finalize and self.ready_for(self.to_finalize[0]):
            self._send_live(now, force=True)
            self.barrier = self.comm.Ibarrier()
        if self.barrier is not None and self.barrier.Test():
            self.barrier = None
            self._finalize(self.to_finalize.popleft())
            busy = True
        return busy

    def ready_for(self, scan: str) -> bool:
        """True once nothing of ``scan`` is left with this rank (see the module docstring)."""
        raise NotImplementedError

    def drain_requests(self, timeout: float = 5.0, together: bool = False) -> None:
        """Wait (bounded) for this rank's outstanding sends; ``together`` (every rank
        calls it): then for every rank's, still taking messages. A large message to a rank
        that had left the loop was never taken: its sender's flush waited out the timeout
        while that rank spun in the next collective (5 s at some jobs' end, issue 42)."""
        end = time.monotonic() + timeout
        self.link.flush(timeout, between=self._poll_quiet)
        barrier = self.comm.Ibarrier() if together else None
        while barrier is not None and not barrier.Test() and time.monotonic() < end:
            self._poll_quiet()
            self.backoff.sleep()

    def _poll_quiet(self) -> None:
        with contextlib.suppress(StreamError):
            self.poll()


class WorkerLoop(RankLoop):
    """A worker: processes the partitions its receiver sends, acknowledging each."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.finished: Set[str] = set()     # scans whose "finish" marker came

    def recv_work(self, src: int, msg: Any) -> None:
        if isinstance(msg, Finish):
            self.finished.add(msg.scan)
        elif isinstance(msg, Detector):
            self.analysis.use_detector(msg.scan, msg.mask)
        else:
            self._process(msg.geometry, msg.data, msg.frames, msg.complete)
            self.link.send(src, TAG_ACK, Ack(msg.scan))

    def ready_for(self, scan: str) -> bool:
        return scan in self.finished


