"""The loops the ranks of a receiving job run: receive, hand out, process, report.

One message loop (:class:`core.mpi.loop.Loop`), a class per role
(:mod:`streams.job.roles`), no threads; :func:`rank_loop` gives this rank's:

:class:`ReceiverLoop`
    steps its protocol's socket, gets finished partitions from the assembler and
    either processes them itself (no workers on its node) or takes them (no copy) into a
    bounded *outbox* and hands them to its workers, each holding at most ``credit``
    unacknowledged partitions. While the outbox is full it stops reading its
    socket: ZeroMQ's queues fill, producers block, nothing is dropped. Its
    heartbeats carry a snapshot of every open scan's report; it sends rank 0 each
    scan's final report when it closes, and the other receivers a scan's start or
    end that only it got (Stream V2: :meth:`ReceiverLoop.share`).
:class:`WorkerLoop`
    processes the partitions its receiver (same node) sends; acknowledges each.
:class:`CoordinatorLoop` (rank 0, also a receiver)
    the :class:`~streams.job.coordinator.Coordinator`: merges live deltas and
    publishes them, answers viewers' frame requests, decides when a scan is
    finalized and tells every rank.

Their base, :class:`RankLoop`, is what every rank does: it sends rank 0 a heartbeat;
a processing rank runs ``analysis.process_partition``, merges the result into its
partial of the scan and sends rank 0 a live delta at most every ``live_interval / 2``
seconds. When rank 0 says "finalize X", a rank becomes ready once nothing of X is
left with it (receiver: X closed, its outbox and unacknowledged partitions free of
X; worker: the "finish X" marker, which its receiver queues behind X's last
partition); it then joins a non-blocking barrier and keeps looping, so a slow rank
never blocks another's socket; when the barrier completes, every rank runs the
collective finalize (:mod:`streams.job.session`).

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
from collections import Counter, deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

import numpy as np

from core.mpi.link import TAGS as ALL_TAGS
from core.mpi.link import Backoff, Credits, Link
from core.mpi.loop import Loop
from streams.accounting import ScanReport
from analyses.contract import Analysis
from analyses.sparse import frames_for
from streams.assemble import Partition
from streams.job.coordinator import Coordinator
from streams.job.messages import (
    Abort, Ack, CloseAll, Closed, Detector, Enough, Finalize, Finish, FrameGet, FrameGot,
    Heartbeat, Live, Part, Shared, Stop)
from streams.job.frames import OUTCOMES, FrameRequests, FrameStore, lookup, parse_request
from streams.errors import StreamError
from streams.protocol import ScanGeometry
from streams.job.roles import Roles

__all__ = ["RankLoop", "ReceiverLoop", "WorkerLoop", "CoordinatorLoop", "rank_loop", "TAGS"]

#: This loop's tags (numbers from :data:`core.mpi.link.TAGS`): WORK receiver -> worker
#: (a partition, or "finish" a scan), ACK worker -> receiver, LIVE deltas and CTRL
#: heartbeats/closed reports to rank 0, SHARE a scan's start or end between
#: receivers, ABORT to every rank, FIN rank 0's finalize/close/stop to every rank,
#: FRAME a viewer's frame request rank 0 -> receivers and their replies
#: (:mod:`streams.job.frames`).
TAGS = ALL_TAGS["stream"]
TAG_WORK, TAG_ACK, TAG_LIVE, TAG_CTRL, TAG_SHARE, TAG_ABORT, TAG_FIN, TAG_FRAME = (
    TAGS[n] for n in ("WORK", "ACK", "LIVE", "CTRL", "SHARE", "ABORT", "FIN", "FRAME"))


def rank_loop(comm: Any, roles: Roles, analysis: Analysis, options: Any,
              routing: str = "modulo", publisher: Any = None) -> RankLoop:
    """This rank's loop over ``comm`` (the loop's own communicator): rank 0 coordinates,
    the other receivers receive, the rest work. ``options``: the ``SessionOptions``;
    ``routing`` and ``publisher`` (the live socket): rank 0's. Local."""
    if comm.rank == 0:
        return CoordinatorLoop(comm, roles, analysis, options, routing, publisher)
    if roles.index(comm.rank) is None:
        return WorkerLoop(comm, roles, analysis, options)
    return ReceiverLoop(comm, roles, analysis, options)


class RankLoop(Loop):
    """What every rank of a receiving job does, the base of each role's loop (see the
    module docstring); arguments as :func:`rank_loop`'s."""

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

    def drain_requests(self, timeout: float = 5.0) -> None:
        """Wait (bounded) for this rank's outstanding sends."""
        self.link.flush(timeout, between=self._poll_quiet)

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


class ReceiverLoop(RankLoop):
    """A receiver: its socket, its outbox to its workers, its kept frames (see the
    module docstring). :meth:`deliver`, :meth:`on_close` and :meth:`share` are the
    socket's callbacks; its protocol builds the socket and sets :attr:`socket`."""

    is_receiver = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.workers: Tuple[int, ...] = self.roles.workers_of(self.rank)
        self.kept = FrameStore()             # frames kept for viewers
        self.outbox: Deque[Any] = deque()    # Part, Finish, Detector
        self.outbox_bytes = 0
        self.credits = Credits(self.workers, self.o.credit)
        self.unacked: Counter = Counter()
        self.closed_reports: Dict[str, ScanReport] = {}
        self.marked: Set[str] = set()            # scans whose "finish" is queued
        self.marked_detector: Set[str] = set()   # scans whose pixel mask is in use

    def closed_report(self, scan: str) -> Optional[ScanReport]:
        return self.closed_reports.pop(scan, None)

    def forget(self, scan: str) -> None:
        if self.socket is not None:
            self.socket.forget(scan)

    # ---- callbacks of the receiving socket ----
    def deliver(self, part: Partition) -> None:
        """The assembler finished a partition (its memory is reused after this, but
        for the data the workers get, which it gives up)."""
        scan = part.scan
        if self.spill is not None:
            path = self.spill.write(part)
            self.kept.spill(scan, part.frames.copy(), part.complete.copy(), path)
        if self.analysis.needs_detector and scan not in self.marked_detector:
            self.marked_detector.add(scan)        # the scan's pixel mask, before its frames
            mask = _pixel_mask(self.socket, scan)
            if mask is None:                      # the start carried none: the control's
                mask = self.o.detector_pixel_mask
            self.analysis.use_detector(scan, mask)
            if self.workers:
                self.outbox.append(Detector(scan, mask))
        if not self.workers:
            self._process(part.geometry, part.data, part.frames, part.complete)
            if part.data.nbytes <= self.kept.keep_bytes:
                self.kept.keep(scan, part.frames.copy(), part.complete.copy(), part.data.copy())
            return
        item = Part(part.geometry, part.index, part.frames.copy(), part.complete.copy(),
                    part.take())
        # the workers', never written again
        self.kept.keep(scan, item.frames, item.complete, item.data)
        self.outbox.append(item)
        self.outbox_bytes += item.nbytes
        self.unacked[scan] += 1

    def on_close(self, report: ScanReport) -> None:
        scan = report.scan
        self.closed_reports[scan] = report
        self._mark_finished(scan)
        if self.spill is not None:
            self.spill.finish(scan)
        self.link.send(0, TAG_CTRL, Closed(self.index, report))

    def _mark_finished(self, scan: str) -> None:
        if scan not in self.marked:
            self.marked.add(scan)
            if self.workers:
                self.outbox.append(Finish(scan))

    def share(self, kind: str, msg: Any) -> None:
        """A scan's start or end (``kind``) reached this receiver only (the protocol
        calls this); tell the other receivers, whose sockets apply it."""
        for rank in self.roles.servers:
            if rank != self.rank:
                self.link.send(rank, TAG_SHARE, Shared(kind, msg))

    # ---- the outbox ----
    def _dispatch(self) -> None:
        while self.outbox:
            item = self.outbox[0]
            if not isinstance(item, Part):      # Finish, Detector: to every worker
                self.outbox.popleft()
                for w in self.workers:
                    self.link.send(w, TAG_WORK, item)
                continue
            worker = self.credits.take()
            if worker is None:
                return
            self.outbox.popleft()
            self.outbox_bytes -= item.nbytes
            self.link.send(worker, TAG_WORK, item)

    def outbox_full(self) -> bool:
        return bool(self.outbox) and self.outbox_bytes >= self.o.outbox_bytes

    # ---- incoming MPI messages ----
    def recv_ack(self, src: int, msg: Ack) -> None:
        self.credits.grant(src)
        self.unacked[msg.scan] -= 1

    def recv_share(self, src: int, msg: Shared) -> None:
        self.socket.apply_shared(msg.kind, msg.msg)     # a start or end another receiver got

    def recv_fin(self, src: int, msg: Any) -> None:
        if isinstance(msg, CloseAll):       # rank 0's deadline: close whatever is open
            self.socket.assembler.refuse_new = "the job's --timeout has passed"
            self.socket.assembler.close_all("stopped")
        elif isinstance(msg, Enough):    # rank 0 announced its last finalize: no new scan
            self.socket.assembler.refuse_new = msg.reason
        else:
            super().recv_fin(src, msg)

    def recv_frame(self, src: int, msg: Any) -> None:
        """A viewer's frame request from rank 0: what this receiver keeps of it."""
        self._send(src, TAG_FRAME, FrameGot(msg.n, self.rank, lookup(
            self.kept, msg.scan, msg.frame, msg.max_bytes)))

    # ---- the loop ----
    def _news(self) -> Tuple[List[Any], Any]:
        asm = self.socket.assembler
        prog = asm.progress()
        snaps = [(st.report, prog[scan]["idle_s"]) for scan, st in asm.scans.items()]
        return snaps, (dict(asm.rejected), list(asm.examples), self.socket.held())

    def step(self) -> bool:
        busy = False
        if not self.outbox_full():
            busy = self.socket.step(timeout=0 if self.outbox else self.backoff.pause,
                                    max_messages=self.o.batch) > 0
        self._dispatch()
        return super().step() or busy

    def ready_for(self, scan: str) -> bool:
        asm = self.socket.assembler
        if scan in asm.scans:
            asm.close(scan, "timeout")     # finalized elsewhere: stop waiting here
        self._mark_finished(scan)
        return not (any(m.scan == scan for m in self.outbox) or self.unacked[scan] > 0)

    def idle(self) -> None:
        self.backoff.grow()   # the socket's poll waited


class CoordinatorLoop(ReceiverLoop):
    """Rank 0: a receiver that decides for the job and publishes live results
    (arguments as :func:`rank_loop`'s)."""

    def __init__(self, comm: Any, roles: Roles, analysis: Analysis, options: Any,
                 routing: str, publisher: Any) -> None:
        super().__init__(comm, roles, analysis, options)
        self.coord = Coordinator(roles, routing, close_wait=options.close_wait,
                                 heartbeat=options.heartbeat)
        self.publisher = publisher
        self.names: Any = None      # the scans' output names (streams.job.names), set by the job
        self.frame_requests = FrameRequests()    # viewers' requests
        self.next_publish = time.monotonic() + options.live_interval
        self._closing = False
        self._announced = 0                 # finalizations announced
        self._last_announced = 0.0
        self._job_published: Any = None
        self.refused: Optional[str] = None      # a series refused at arming: the job ends
        self._rejected_said = (0, time.monotonic())     # rejections told, when
        self._quiet_since = time.monotonic()    # no scan open since
        self._wait_note = 30.0
        self._told_closing: Set[str] = set()    # scans whose wait for a receiver was told

    # ---- incoming MPI messages ----
    def recv_live(self, src: int, msg: Live) -> None:
        self.coord.heard_from(src, time.monotonic())
        self.coord.live(msg.geometry, msg.live, self.analysis.merge)

    def recv_ctrl(self, src: int, msg: Any) -> None:
        now = time.monotonic()
        self.coord.heard_from(src, now)
        if isinstance(msg, Heartbeat):
            for rep, idle in msg.snapshots:
                self.coord.snapshot(msg.index, rep, idle, now)
            if msg.rejections is not None:
                self.coord.rejections(msg.index, *msg.rejections)
        elif isinstance(msg, Closed):
            self.coord.closed(msg.index, msg.report, now)

    def recv_frame(self, src: int, msg: Any) -> None:
        """A receiver's reply to a frame request (a request is for this receiver)."""
        if isinstance(msg, FrameGet):
            super().recv_frame(src, msg)
            return
        done = self.frame_requests.answer(msg.n, msg.rank, msg.found)
        if done is None:
            return
        p, found = done
        head = {"id": p.rid, "scan": p.scan, "frame": p.frame}
        if found is None or found.get("frame") is None:
            self._refuse(p.ident, self.frame_requests.refuse(
                "not_held" if found is None else found["refused"]), **head)
            return
        a = found["frame"]
        self.frame_requests.counts["served"] += 1
        self.publisher.answer(p.ident, dict(head, ok=True, shape=list(a.shape),
                                            dtype=a.dtype.str, complete=found["complete"],
                                            where=found["where"]), a.data)

    # ---- viewers' frame requests ----
    def _refuse(self, peer: bytes, outcome: str, detail: str = "", **head: Any) -> None:
        self.publisher.answer(peer, dict(head, ok=False, refused=outcome,
                                         why=OUTCOMES[outcome] + detail))

    def _frame_requests(self, now: float) -> bool:
        """Viewers' frame requests to the receivers; the unanswered ones expire."""
        fr = self.frame_requests
        asked = self.publisher.requests()
        for peer, raw in asked:
            try:
                scan, frame, rid = parse_request(raw)
            except ValueError as e:
                self._refuse(peer, fr.refuse("bad_request"), f": {e}")
                continue
            n, refused = fr.admit(peer, scan, frame, rid, list(self.roles.servers), now)
            if refused is not None:
                self._refuse(peer, refused, id=rid, scan=scan, frame=frame)
                continue
            for r in self.roles.servers:
                self._send(r, TAG_FRAME, FrameGet(n, scan, frame, fr.max_bytes))
        for p in fr.expired(now):
            self._refuse(p.ident, "timeout", id=p.rid, scan=p.scan, frame=p.frame)
        return bool(asked)

    # ---- decisions and live publishing ----
    def step(self) -> bool:
        busy = super().step()
        now = time.monotonic()
        self._coordinate(now)
        return self._frame_requests(now) or busy

    def _coordinate(self, now: float) -> None:
        if now >= self.next_publish:
            self.next_publish = now + self.o.live_interval
            for scan in self.coord.open_scans():
                self.publish(scan, now)
            self._publish_job()
        self._tell(now)
        if self.refused is None and not self._closing:
            self.refused = self.coord.arming_refused()
        if (self.refused is not None or self.deadline is not None and now >= self.deadline) \
                and not self._closing:
            self._closing = True
            self._fin_all(CloseAll())
        for scan in self.coord.ready(now):
            self._fin_all(Finalize(scan))
            self._announced += 1
            self._last_announced = now
            if self._announced == self.o.scans:
                self._fin_all(Enough(f"the job has finalized its --scans {self.o.scans} "
                               "(a scan still open goes on; no new one)"))
        # Stop once nothing is open, and no heartbeat could still bring news of a scan a
        # receiver opened before it heard "enough": then every rank has heard every
        # finalize it must run before it hears this.
        if (self._closing or self._announced >= self.o.scans) and self.stop_reason is None \
                and not self.coord.open_scans() \
                and now - self._last_announced >= 2 * self.o.heartbeat:
            self._fin_all(Stop("deadline" if self._closing else "scans"))

    def _tell(self, now: float) -> None:
        """No silent wait: say what the receivers rejected (at most every 5 s), that a
        scan waits for a receiver to close it (after 5 s), and, while no scan is open,
        that the job waits for one (after 30 s, then 60, ...)."""
        job = self.coord.job_rejections()
        told, at = self._rejected_said
        if job["total"] > told and now - at >= 5.0:
            self._rejected_said = (job["total"], now)
            self.say(f"stager stream: {job['total']} message(s) rejected so far ("
                     + ", ".join(f"{k} {v}" for k, v in job["by_reason"].items()) + ")"
                     + (f"; e.g. {job['examples'][0]}" if job["examples"] else ""))
        for scan in self.coord.open_scans():
            st = self.coord.scans[scan]
            if st.first_closed is not None and now - st.first_closed >= 5.0 and \
                    scan not in self._told_closing:
                self._told_closing.add(scan)
                left = [r for r in range(len(self.roles.servers)) if r not in st.closed]
                self.say(f"stager stream: scan {self.out_name(scan)}: receiver(s) "
                         f"{', '.join(map(str, left))} have not closed it; waiting up to "
                         f"{self.o.close_wait:g} s after the first closed (--close-wait)")
        if self.coord.open_scans():
            self._quiet_since, self._wait_note = now, 30.0
        elif now - self._quiet_since >= self._wait_note and self.stop_reason is None:
            self.say(f"stager stream: waiting for a scan ({self._announced} of "
                     f"{self.o.scans} finalized; none open for {now - self._quiet_since:.0f} s"
                     "; --timeout bounds the wait)")
            self._wait_note *= 2

    def _fin_all(self, msg: Any) -> None:
        """A decision ``msg`` to every rank, this one included."""
        for dest in range(self.comm.size):
            self._send(dest, TAG_FIN, msg)

    def _publish_job(self) -> None:
        """The job's rejections and held messages, when they changed: seen by viewers
        also while no scan is open (garbage, a series that never starts)."""
        job = self.coord.job_rejections()
        state = (job["total"], sorted(job["held_before_start"].items()))
        if state != self._job_published and (job["total"] or job["held_before_start"]):
            self._job_published = state
            self.publisher.publish_job({"job_rejected": job})

    # ---- what the job's finalize asks rank 0 ----
    def use_names(self, names: Any) -> None:
        """Name each scan's files by ``names`` (:class:`streams.job.names.OutputNames`)
        when first heard of."""
        self.names = names
        self.coord.on_new = names.name

    def release_name(self, name: str) -> None:
        """``name``'s "receiving" record goes: the drain's files replace it."""
        if self.names is not None:
            self.names.release(name)

    def final_report(self, scan: str, reports: List[Optional[ScanReport]]) -> ScanReport:
        """``scan``'s merged report, with each receiver's report at its close (by index)."""
        for r, rep in enumerate(reports):
            if rep is not None:
                self.coord.closed(r, rep, time.monotonic())
        return self.coord.merged(scan, final=True)

    def first_live(self, name: str) -> Optional[float]:
        """When scan ``name``'s first live message went out (None: none yet)."""
        return None if self.publisher is None else self.publisher.first_published.get(name)

    def out_name(self, scan: str) -> str:
        """The name of ``scan``'s files and live messages (:mod:`streams.job.names`)."""
        return scan if self.names is None else self.names.name(scan)

    def publish(self, scan: str, now: float, final: bool = False, partial: Any = None,
                ended: Optional[Dict[str, Any]] = None) -> None:
        """``scan``'s live message: what rank 0 merged so far, or ``partial``; ``ended``:
        how the scan ended (its final message: served, and why not)."""
        st = self.coord.scans[scan]
        p = partial if partial is not None else st.live
        if p is None:
            p = self.analysis.empty()
        g = st.geometry
        images, meta = self.analysis.live_images(p, g)
        valid = p.seen(g.frames).reshape(g.scan_shape) if hasattr(p, "seen") else \
            np.zeros(g.scan_shape, bool)
        prog = self.coord.progress(scan, now)
        if self.frame_requests.counts:
            prog = dict(prog, frame_requests=dict(self.frame_requests.counts))
        if ended is not None:
            prog = dict(prog, **ended)
        self.publisher.publish(self.out_name(scan), images, valid, prog, final=final, udf=meta)


def _pixel_mask(socket: Any, scan: str) -> Any:
    """The pixel mask ``scan``'s start carried (Stream V2, the legacy stream: the kept
    channel's, with ``header_detail all``), or None."""
    info = socket.detector(scan) if hasattr(socket, "detector") else None
    if not isinstance(info, dict) or info.get("start") is None:
        return None
    start = info["start"]
    masks = start.arrays(info.get("channel")).get("pixel_mask")
    if isinstance(masks, dict):
        return next(iter(masks.values()), None) if len(masks) == 1 else None
    return masks
