"""Rank 0's bookkeeping in a receiving job: which scans are open, closed, lost. Pure.

Every receiver tells rank 0, by point-to-point messages, a heartbeat with a
snapshot of each open scan's report (every ``heartbeat`` seconds) and the final
report of each scan it closes; every rank sends heartbeats. From these the
:class:`Coordinator` decides

- when a scan can be finalized (every receiver closed it, or ``close_wait``
  seconds passed since the first one did: a receiver that never saw the scan's
  ``begin`` does not hold the job);
- the live progress of a scan (frames complete / incomplete / not yet arrived,
  bytes, seconds since the last message anywhere);
- after a rank died (the job is being terminated), the report of every open scan
  from the last snapshots, naming the ranks not heard from and the frames they
  held: what was lost.

No MPI and no sockets here, so all of it is tested serially.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from streams.accounting import ScanReport, ranges
from streams.protocol import ScanGeometry
from streams.job.roles import Roles

__all__ = ["Coordinator", "ScanState"]


@dataclass
class ScanState:
    """What rank 0 knows of one scan."""

    geometry: ScanGeometry
    snaps: Dict[int, ScanReport] = field(default_factory=dict)    # receiver -> latest
    snap_idle: Dict[int, Tuple[float, float]] = field(default_factory=dict)  # r -> (idle, at)
    closed: Dict[int, ScanReport] = field(default_factory=dict)   # receiver -> final
    first_closed: Optional[float] = None
    finalize_sent: bool = False
    live: Any = None
    live_updates: int = 0


class Coordinator:
    """Rank 0's view of the scans (see the module docstring).

    Parameters
    ----------
    roles : Roles
    routing : {"modulo", "any"}
        Native (frame mod R) or Stream V2 (every receiver may get any frame).
    close_wait : float
        Seconds after the first receiver closed a scan before it is finalized
        without the receivers that did not close it.
    heartbeat : float
        Seconds between heartbeats; a rank silent for ``3 * heartbeat`` is "lost"
        in a kill report.
    """

    def __init__(self, roles: Roles, routing: str = "modulo", close_wait: float = 30.0,
                 heartbeat: float = 0.25) -> None:
        self.roles, self.routing = roles, routing
        self.close_wait, self.heartbeat = close_wait, heartbeat
        self.scans: Dict[str, ScanState] = {}
        self.order: List[str] = []            # finalize order
        self.heard: Dict[int, float] = {}     # rank -> last time heard (rank 0's clock)
        # receiver -> (rejections by reason, examples) since the job started, any scan
        # or none: messages naming no open scan (garbage, a series that never started)
        # are counted here only
        self.job_rejects: Dict[int, Tuple[Dict[str, int], List[str]]] = {}
        self.held: Dict[int, Dict[str, int]] = {}   # receiver -> series -> messages held
        #: called with a scan's name when it is first heard of (its output name is settled)
        self.on_new: Optional[Callable[[str], Any]] = None

    # ---- input ----
    def _state(self, g: ScanGeometry) -> ScanState:
        st = self.scans.get(g.scan)
        if st is None:
            st = self.scans[g.scan] = ScanState(g)
            if self.on_new is not None:
                self.on_new(g.scan)
        return st

    def heard_from(self, rank: int, now: float) -> None:
        self.heard[rank] = now

    def snapshot(self, receiver: int, report: ScanReport, idle: float, now: float) -> None:
        """A heartbeat's snapshot of an open scan at ``receiver``."""
        st = self._state(report.geometry)
        if receiver not in st.closed:
            st.snaps[receiver] = report
            st.snap_idle[receiver] = (idle, now)

    def closed(self, receiver: int, report: ScanReport, now: float) -> None:
        """``receiver`` closed a scan with ``report``."""
        st = self._state(report.geometry)
        st.closed[receiver] = report
        st.snaps[receiver] = report
        st.snap_idle[receiver] = (max(0.0, report.closed_at - report.last_message), now)
        if st.first_closed is None:
            st.first_closed = now

    def rejections(self, receiver: int, counts: Dict[str, int], examples: List[str],
                   held: Optional[Dict[str, int]] = None) -> None:
        """Every rejection at ``receiver`` so far, and the Stream V2 messages it holds
        for series whose start it does not know (from its heartbeat)."""
        self.job_rejects[receiver] = (dict(counts), list(examples))
        self.held[receiver] = dict(held or {})

    def job_rejections(self) -> Dict[str, Any]:
        """Rejections of the whole job so far: total, by reason, examples."""
        total: Counter = Counter()
        examples: List[str] = []
        for r in sorted(self.job_rejects):
            counts, ex = self.job_rejects[r]
            total.update({k: int(v) for k, v in counts.items()})
            examples.extend(f"receiver {r}: {e}" for e in ex[:5])
        held: Counter = Counter()
        for h in self.held.values():
            held.update(h)
        return {"total": sum(total.values()), "by_reason": dict(sorted(total.items())),
                "examples": examples[:20], "held_before_start": dict(held)}

    def arming_refused(self) -> Optional[str]:
        """Why a detector's series was refused at its arming (its image count and the
        job's scan shape disagree: it can never be received), or None."""
        for r in sorted(self.job_rejects):
            counts, examples = self.job_rejects[r]
            if counts.get("scan_shape"):
                return next((f"receiver {r}: {e}" for e in examples
                             if e.startswith("scan_shape:")),
                            f"receiver {r}: a series its scan shape does not hold")
        return None

    def live(self, g: ScanGeometry, partial: Any, merge: Any) -> None:
        """A live delta of scan ``g`` (merged into what rank 0 holds)."""
        st = self._state(g)
        if not st.finalize_sent:
            st.live = partial if st.live is None else merge(st.live, partial)
            st.live_updates += 1

    # ---- decisions ----
    def ready(self, now: float, force: bool = False) -> List[str]:
        """Scans to finalize now (marks them sent), in the order they became ready."""
        out = []
        for scan, st in self.scans.items():
            if st.finalize_sent or st.first_closed is None and not force:
                continue
            every = len(st.closed) >= len(self.roles.servers)
            waited = st.first_closed is not None and now - st.first_closed >= self.close_wait
            if every or waited or force:
                st.finalize_sent = True
                out.append(scan)
                self.order.append(scan)
        return out

    def open_scans(self) -> List[str]:
        return [s for s, st in self.scans.items() if not st.finalize_sent]

    def expected_at(self, g: ScanGeometry, receiver: int) -> np.ndarray:
        if self.routing == "modulo":
            return (np.arange(g.frames) % len(self.roles.servers)) == receiver
        return np.ones(g.frames, bool)

    def merged(self, scan: str, final: bool = False) -> ScanReport:
        """The scan's report from what is known: final reports, else the last snapshots,
        else an empty report for each receiver never heard of for this scan."""
        st = self.scans[scan]
        g = st.geometry
        reps = []
        for r in range(len(self.roles.servers)):
            rep = (st.closed.get(r) if final else None) or st.snaps.get(r)
            if rep is None:
                ends = g.producers if self.routing == "modulo" else 1
                rep = ScanReport.empty(g, self.expected_at(g, r), ends_expected=ends)
                rep.ended_by = "timeout"
            reps.append(rep)
        # routing "any": each client's report expects every image, and the merge is right
        return functools.reduce(ScanReport.merge, reps)

    def progress(self, scan: str, now: float) -> Dict[str, Any]:
        """Live figures of ``scan`` (for the PUB message and ``stager stream watch``)."""
        st = self.scans[scan]
        rep = self.merged(scan)
        idle = min((i + (now - at) for i, at in st.snap_idle.values()), default=None)
        return {**_frames(rep.expected, rep.got.sum(axis=1), st.geometry.sectors),
                "bytes": int(rep.accepted_bytes or _bytes(rep)), "rejected": _rejected(rep),
                "rejected_by_reason": {str(k): int(v) for k, v in
                                       (rep.rejected + rep.rejected_unattributed).items()},
                "rejection_example": rep.examples[0] if rep.examples else None,
                "job_rejected": self.job_rejections(),
                "refused": int(sum(rep.refused.values())),
                "idle_s": None if idle is None else round(idle, 3),
                "receivers_closed": len(st.closed), "receivers": len(self.roles.servers),
                "live_updates": st.live_updates, "per_receiver": self._per_receiver(st)}

    def _per_receiver(self, st: ScanState) -> List[Dict[str, Any]]:
        """Each receiver's own figures of a scan (its node, from its last snapshot)."""
        out = []
        for r, rank in enumerate(self.roles.servers):
            rep = st.snaps.get(r)
            exp = self.expected_at(st.geometry, r)
            n = rep.got.sum(axis=1) if rep is not None else np.zeros(len(exp), int)
            out.append({"receiver": r, "node": int(self.roles.node_of[rank]),
                        **_frames(exp, n, st.geometry.sectors),
                        "rejected": 0 if rep is None else _rejected(rep),
                        "refused": 0 if rep is None else int(sum(rep.refused.values())),
                        "closed": r in st.closed, "heard": rep is not None})
        return out

    def lost_ranks(self, now: float, nodes: Optional[List[str]] = None) -> List[Dict[str, Any]]:
        """Ranks not heard from for ``3 * heartbeat`` seconds (with their role)."""
        out = []
        for rank in range(self.roles.size):
            last = self.heard.get(rank)
            if rank == 0 or (last is not None and now - last < 3 * self.heartbeat):
                continue
            node = self.roles.node_of[rank]
            out.append({"rank": rank, "role": self.roles.role(rank).replace("server", "receiver"),
                        "receiver": self.roles.index(self.roles.server_of[rank]),
                        "node": nodes[node] if nodes else node,
                        "last_heard_s": None if last is None else round(now - last, 3)})
        return out

    def kill_report(self, scan: str, now: float, nodes: Optional[List[str]] = None
                    ) -> Tuple[ScanReport, Dict[str, Any]]:
        """The report of an open scan when the job is terminated, and what was lost."""
        rep = self.merged(scan, final=True)
        rep.ended_by = "stopped"
        lost = self.lost_ranks(now, nodes)
        g = self.scans[scan].geometry
        lost_frames: List[int] = []
        for d in lost:
            exp = self.expected_at(g, d["receiver"])
            done = rep.got.all(axis=1)
            fr = np.flatnonzero(exp & ~done)
            d["frames_not_complete"] = [list(x) for x in ranges(fr)]
            lost_frames.extend(fr.tolist())
        extra = {"terminated": True, "lost_ranks": lost,
                 "frames_lost_with_ranks": len(set(lost_frames))}
        return rep, extra


def _frames(expected: np.ndarray, sectors: np.ndarray, S: int) -> Dict[str, int]:
    """Frames expected, and of them complete, incomplete and not arrived (``sectors``:
    how many of its ``S`` sectors arrived, per frame)."""
    return {"frames": int(expected.sum()), "complete": int((expected & (sectors == S)).sum()),
            "incomplete": int((expected & (sectors > 0) & (sectors < S)).sum()),
            "not_arrived": int((expected & (sectors == 0)).sum())}


def _rejected(rep: ScanReport) -> int:
    return int(sum(rep.rejected.values()) + sum(rep.rejected_unattributed.values()))


def _bytes(rep: ScanReport) -> int:
    g = rep.geometry
    per_sector = g.frame_bytes // g.sectors
    return int(rep.got.sum()) * per_sector
