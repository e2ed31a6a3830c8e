"""A receiver rank's loop (:class:`ReceiverLoop`; the base: :mod:`streams.job.ranks`).

It steps its protocol's socket, gets finished partitions from the assembler and either
processes them itself (no workers on its node) or takes them (no copy) into a bounded
*outbox* and hands them to its workers, each holding at most ``credit`` unacknowledged
partitions. While the outbox is full it stops reading its socket: ZeroMQ's queues fill,
producers block, nothing is dropped. Its heartbeats carry a snapshot of every open
scan's report; it sends rank 0 each scan's final report when it closes, and the other
receivers a scan's start or end that only it got (Stream V2: :meth:`ReceiverLoop.share`).
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from core.mpi.link import Credits
from streams.accounting import ScanReport
from streams.assemble import Partition
from streams.job.messages import (
    Ack, CloseAll, Closed, Detector, Enough, Finish, FrameGot, Part, Shared)
from streams.job.frames import FrameStore, lookup
from streams.job.ranks import TAG_CTRL, TAG_FRAME, TAG_SHARE, TAG_WORK, RankLoop

__all__ = ["ReceiverLoop"]


class ReceiverLoop(RankLoop):
    """A receiver: its socket, its outbox to its workers, its kept frames (see the module
    docstring; arguments as :class:`~streams.job.ranks.RankLoop`'s). :meth:`deliver`,
    :meth:`on_close` and :meth:`share` are the socket's callbacks; its protocol builds the
    socket and sets :attr:`socket`."""

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
        self._waited = False                     # this turn's socket poll waited

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
        busy, self._waited = False, False
        if not self.outbox_full():
            timeout = 0 if self.outbox else self.backoff.pause
            busy = self.socket.step(timeout=timeout, max_messages=self.o.batch) > 0
            self._waited = timeout > 0
        self._dispatch()
        return super().step() or busy

    def ready_for(self, scan: str) -> bool:
        asm = self.socket.assembler
        if scan in asm.scans:
            asm.close(scan, "timeout")     # finalized elsewhere: stop waiting here
        self._mark_finished(scan)
        return not (any(m.scan == scan for m in self.outbox) or self.unacked[scan] > 0)

    def idle(self) -> None:
        # the socket's poll waited; else (the outbox waits for the workers) sleep: a loop
        # spinning here took a core from the workers it waits for (issue 42)
        self.backoff.grow() if self._waited else self.backoff.sleep()


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
