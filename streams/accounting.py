"""Loss accounting of one scan: what should have arrived, what did, what was rejected.

A :class:`ScanReport` is plain, picklable data; each receiver reports the frames
routed to it and ``functools.reduce(ScanReport.merge, reports)`` gives the whole
scan in any order. Its memory is ``frames x (sectors + 1)`` bytes. Over the frames
it expects, a frame is *complete* (every sector accepted), *incomplete* (some) or
*missing* (none).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from analyses.geometry import ScanGeometry

if TYPE_CHECKING:
    from analyses.output import Coverage

__all__ = ["ScanReport", "ranges", "runs"]

#: How many rejection examples (with their detail text) a report keeps.
MAX_EXAMPLES = 20
#: The counts two reports merge by adding them.
_SUMMED = ("receivers", "ends_expected", "ends_received", "sent", "ends_uncounted",
           "received_data", "accepted_bytes", "rejected_unattributed", "evicted_partitions",
           "refused")


def runs(indices: np.ndarray, most: Optional[int] = 8) -> str:
    """Sorted indices as text, ``"0-3, 7, 9-10"`` (the first ``most`` runs, then ``...``)."""
    rs = ranges(indices)
    text = ", ".join(str(a) if b == a + 1 else f"{a}-{b - 1}" for a, b in rs[:most])
    return text + (", ..." if most is not None and len(rs) > most else "")


def ranges(indices: np.ndarray) -> List[Tuple[int, int]]:
    """Sorted integer indices as half-open runs ``[(start, stop), ...]``."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1)
    starts = np.concatenate(([idx[0]], idx[breaks + 1]))
    stops = np.concatenate((idx[breaks], [idx[-1]])) + 1
    return [(int(a), int(b)) for a, b in zip(starts, stops)]


@dataclass
class ScanReport:
    """Accounting of one scan at one receiver (or merged over several).

    ``expected`` (frames,) the frames it answers for (native: ``f mod R == r``) and
    ``got`` (frames, sectors) the sectors accepted; ``receivers`` covered;
    ``ends_expected``/``ends_received`` and the sum of their ``sent``
    (``ends_uncounted``: Stream V2 ends carry none, ``lost_in_transport`` is then
    None); ``received_data`` data messages naming the scan; ``rejected``,
    ``rejected_unattributed`` (naming no open scan) and ``refused`` connections
    (``docs/stream-protocol.md`` section 5) by reason while it was open;
    ``duplicates_across`` frames accepted by two receivers (found at merge);
    ``invalid`` why the result cannot be trusted, and ``conflicting`` frame -> sectors
    that came twice with different content (either: not served); ``buffer_bytes``
    the assembler's high-water mark; ``ended_by`` ``end``, ``timeout`` or ``stopped``
    (merged: the worst).
    """

    geometry: ScanGeometry
    expected: np.ndarray
    got: np.ndarray
    receivers: int = 1
    ends_expected: int = 0
    ends_received: int = 0
    sent: int = 0
    ends_uncounted: int = 0
    received_data: int = 0
    accepted_bytes: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejected_unattributed: Counter = field(default_factory=Counter)
    examples: List[str] = field(default_factory=list)
    evicted_partitions: int = 0
    refused: Counter = field(default_factory=Counter)
    duplicates_across: int = 0
    invalid: str = ""
    conflicting: Dict[int, List[int]] = field(default_factory=dict)
    buffer_bytes: int = 0
    ended_by: str = "end"
    first_message: float = 0.0
    last_message: float = 0.0
    closed_at: float = 0.0

    @classmethod
    def empty(cls, geometry: ScanGeometry, expected: Optional[np.ndarray] = None,
              ends_expected: int = 0) -> ScanReport:
        F, S = geometry.frames, geometry.sectors
        exp = np.ones(F, bool) if expected is None else np.asarray(expected, bool)
        return cls(geometry, exp, np.zeros((F, S), bool), ends_expected=ends_expected)

    # ---- derived ----
    @property
    def scan(self) -> str:
        return self.geometry.scan

    def _nsect(self) -> np.ndarray:
        return self.got.sum(axis=1)

    @property
    def complete_frames(self) -> np.ndarray:
        return np.flatnonzero(self.expected & (self._nsect() == self.geometry.sectors))

    @property
    def missing_frames(self) -> np.ndarray:
        return np.flatnonzero(self.expected & (self._nsect() == 0))

    @property
    def incomplete(self) -> Dict[int, List[int]]:
        """Incomplete frame -> its missing sectors."""
        n = self._nsect()
        frames = np.flatnonzero(self.expected & (n > 0) & (n < self.geometry.sectors))
        return {int(f): np.flatnonzero(~self.got[f]).tolist() for f in frames}

    @property
    def frames_complete(self) -> np.ndarray:
        """Bool map of complete frames over the scan grid (ny, nx)."""
        ok = self.expected & self.got.all(axis=1)
        return ok.reshape(self.geometry.scan_shape)

    def coverage(self) -> Coverage:
        """What ``<scan>.h5`` says of every scan position (:mod:`analyses.output`)."""
        from analyses.output import Coverage

        received = (self.got.any(axis=1) & self.expected).reshape(self.geometry.scan_shape)
        return Coverage(self.frames_complete, received, self.ok, self.ended_by,
                        self.loss_fraction())

    @property
    def accepted(self) -> int:
        return int(self.got.sum())

    @property
    def lost_in_transport(self) -> Optional[int]:
        """Data messages sent but never received; None until every ``end`` arrived."""
        if self.ends_received < self.ends_expected or self.ends_uncounted:
            return None
        return self.sent - self.received_data

    @property
    def ok(self) -> bool:
        """True when every expected frame is complete (rejected duplicates do not count)
        and no frame is :attr:`conflicting`."""
        n = self._nsect()
        return bool((n[self.expected] == self.geometry.sectors).all()) and not self.conflicting

    @property
    def result_invalid(self) -> str:
        """Why the result cannot be trusted ("" if it can): :attr:`invalid` and the
        :attr:`conflicting` frames."""
        why = [self.invalid] if self.invalid else []
        if self.conflicting:
            frames = np.array(sorted(self.conflicting), np.int64)
            why.append(f"{frames.size} frame(s) ({runs(frames)}) arrived twice with "
                       "different content: which copy the detector sent cannot be told "
                       "(another producer with this job's key and token sent frames?)")
        return "; ".join(why)

    def loss_fraction(self) -> float:
        """Fraction of expected frames that are not complete."""
        n_exp = int(self.expected.sum())
        return 0.0 if n_exp == 0 else 1.0 - self.complete_frames.size / n_exp

    # ---- combine ----
    def merge(self, other: ScanReport) -> ScanReport:
        """The report of both receivers together (same scan, same geometry)."""
        if other.geometry != self.geometry:
            raise ValueError(f"cannot merge reports of {self.geometry} and {other.geometry}")
        order = ("end", "timeout", "stopped")
        rejected = self.rejected + other.rejected
        examples = self.examples + other.examples
        # The same sector accepted by two receivers: a source that sent it twice (Stream
        # V2 deals each image to one client). Counted and named; both copies decoded.
        both = np.flatnonzero((self.got & other.got).any(axis=1)
                              & self.expected & other.expected)
        if both.size:
            rejected["duplicate"] += int(both.size)
            examples.append(f"duplicate: scan {self.scan} frame(s) "
                            f"{runs(both)} accepted by two receivers (the source sent "
                            "them twice; counted once)")
        return ScanReport(
            geometry=self.geometry, expected=self.expected | other.expected,
            got=self.got | other.got, rejected=rejected, examples=examples[:MAX_EXAMPLES],
            **{f: getattr(self, f) + getattr(other, f) for f in _SUMMED},
            duplicates_across=self.duplicates_across + other.duplicates_across
            + int(both.size),
            invalid="; ".join(x for x in (self.invalid, other.invalid) if x),
            conflicting=_union(self.conflicting, other.conflicting),
            buffer_bytes=max(self.buffer_bytes, other.buffer_bytes),
            ended_by=max(self.ended_by, other.ended_by, key=order.index),
            first_message=min(self.first_message, other.first_message),
            last_message=max(self.last_message, other.last_message),
            closed_at=max(self.closed_at, other.closed_at))

    # ---- output ----
    def to_dict(self) -> Dict[str, Any]:
        g = self.geometry
        return {
            "scan": g.scan, "ok": self.ok, "ended_by": self.ended_by,
            "result_invalid": self.result_invalid or None,
            "frames_conflicting": len(self.conflicting),
            "conflicting": {str(f): s for f, s in sorted(self.conflicting.items())},
            "geometry": {"producers": g.producers, "frames": g.frames, "sectors": g.sectors,
                         "shape": list(g.shape), "dtype": g.dtype,
                         "scan_shape": list(g.scan_shape)},
            "receivers": self.receivers,
            "frames_expected": int(self.expected.sum()),
            "frames_complete": int(self.complete_frames.size),
            "frames_incomplete": len(self.incomplete),
            "frames_missing": int(self.missing_frames.size),
            "missing": [list(r) for r in ranges(self.missing_frames)],
            "incomplete": {str(f): s for f, s in self.incomplete.items()},
            "messages": {"accepted": self.accepted, "received_data": self.received_data,
                         "sent": self.sent, "lost_in_transport": self.lost_in_transport,
                         "ends": [self.ends_received, self.ends_expected],
                         "rejected": dict(sorted((str(k), v) for k, v in self.rejected.items())),
                         "duplicates_across_receivers": self.duplicates_across,
                         "rejected_unattributed": dict(sorted(
                             (str(k), v) for k, v in self.rejected_unattributed.items()))},
            "connections_refused": dict(sorted((str(k), v) for k, v in self.refused.items())),
            "rejection_examples": list(self.examples),
            "evicted_partitions": self.evicted_partitions,
            "buffer_bytes": self.buffer_bytes,
            "bytes": self.accepted_bytes,
            "seconds": round(max(self.last_message - self.first_message, 0.0), 6),
        }

    def summary(self) -> str:
        """One line for a log: counts and what went wrong."""
        d = self.to_dict()
        rej = sum(self.rejected.values())
        out = sum(self.rejected_unattributed.values())
        s = (f"scan {self.scan}: {d['frames_complete']}/{d['frames_expected']} frames complete, "
             f"{d['frames_incomplete']} incomplete, {d['frames_missing']} missing, "
             f"{rej + out} messages rejected")
        if rej + out:
            why = self.rejected + self.rejected_unattributed
            s += " (" + ", ".join(f"{k} {v}" for k, v in sorted(why.items()))
            if out:
                s += f"; {out} naming no open scan, while this one was open"
            s += ")"
        s += f", ended by {self.ended_by}"
        lost = self.lost_in_transport
        if lost:
            s += f", {lost} messages lost in transport"
        if self.refused:
            s += f", {sum(self.refused.values())} connection attempts refused"
        if self.result_invalid:
            s += f"; RESULT INVALID: {self.result_invalid}"
        return s


def _union(a: Dict[int, List[int]], b: Dict[int, List[int]]) -> Dict[int, List[int]]:
    out = {f: list(s) for f, s in a.items()}
    for f, s in b.items():
        out[f] = sorted(set(out.get(f, ())) | set(s))
    return out
