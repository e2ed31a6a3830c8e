"""Rank 0's loop (:class:`CoordinatorLoop`): a receiver (:mod:`streams.job.receiver_loop`)
that keeps the :class:`~streams.job.coordinator.Coordinator`, merges the live deltas and
publishes them, answers viewers' frame requests, decides when a scan is finalized and
when the job stops, and tells every rank (:mod:`streams.job.ranks`)."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Set

import numpy as np

from streams.accounting import ScanReport
from analyses.contract import Analysis
from streams.job.coordinator import Coordinator
from streams.job.messages import (
    CloseAll, Closed, Enough, Finalize, FrameGet, Heartbeat, Live, Stop)
from streams.job.frames import OUTCOMES, FrameRequests, parse_request
from streams.job.ranks import TAG_FIN, TAG_FRAME
from streams.job.receiver_loop import ReceiverLoop
from streams.job.roles import Roles

__all__ = ["CoordinatorLoop"]


class CoordinatorLoop(ReceiverLoop):
    """Rank 0: a receiver that decides for the job and publishes live results (arguments
    as :class:`~streams.job.ranks.RankLoop`'s; ``routing`` and ``publisher``, the live
    socket, as :func:`streams.job.session.rank_loop`'s)."""

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
