"""One scan position's frame for a viewer, from the receiver that still holds it.

A viewer (``LiveJob.frame``, a click in ``stager stream view``) asks rank 0 on the
live channel's request socket (``docs/stream-protocol.md`` section 9.1); rank 0
admits the request (:class:`FrameRequests`: a byte cap and a requests-per-second
cap, every outcome counted), asks the receivers over the job's own message loop
(``FRAME``, :mod:`streams.job.ranks`) and answers with the first receiver that
holds the frame. A receiver holds:

- the partitions it delivered most recently, in memory, up to
  :data:`KEEP_BYTES` (:class:`FrameStore`: with workers on its node, the copy
  it already made for them, kept by reference; without, one copy);
- every partition it spilled (``--spill``), read back from its file.

Nothing here writes anything a producer sent, or anything at all: a viewer's key
reaches rank 0's request socket, never a data socket.
"""
from __future__ import annotations

import os
import stat
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["FrameStore", "FrameRequests", "KEEP_BYTES", "MAX_FRAME_BYTES", "RATE",
           "OUTCOMES", "parse_request"]

#: Bytes of delivered partitions each receiver keeps in memory for viewers.
KEEP_BYTES = 64 << 20
#: The largest frame sent to a viewer (a larger one is refused ``too_large``).
MAX_FRAME_BYTES = 16 << 20
#: Frame requests admitted per second, over every viewer (more: ``rate``).
RATE = 10.0
#: Requests answered by none within this many seconds: ``timeout``.
WAIT_S = 10.0
#: Requests waiting for receivers at once (more: ``busy``).
MAX_PENDING = 8

#: Every outcome of a frame request, as counted and answered.
OUTCOMES = {
    "served": "the frame was sent",
    "not_held": "no receiver holds that frame any more (not kept in memory, not spilled)",
    "too_large": f"the frame is larger than the cap ({MAX_FRAME_BYTES} bytes)",
    "rate": f"more than {RATE:g} requests per second: try again",
    "busy": f"{MAX_PENDING} requests already wait for the receivers",
    "bad_request": "not a frame request (a msgpack map with scan and frame)",
    "timeout": f"the receivers did not answer within {WAIT_S:g} s",
}


def parse_request(raw: bytes) -> Tuple[str, int, Any]:
    """``(scan, frame, id)`` of a request's bytes (a msgpack map). Pure.

    Raises
    ------
    ValueError
        Not a msgpack map with a ``scan`` (str) and a ``frame`` (int >= 0).
    """
    import msgpack

    try:
        req = msgpack.unpackb(raw)
    except Exception as e:
        raise ValueError(f"not msgpack: {e}") from None
    if not isinstance(req, dict):
        raise ValueError("not a map")
    scan, frame, rid = req.get("scan"), req.get("frame"), req.get("id")
    if not isinstance(scan, str) or not scan or len(scan) > 256:
        raise ValueError("scan: give the scan's name")
    if isinstance(frame, bool) or not isinstance(frame, int) or frame < 0:
        raise ValueError("frame: give a scan position's index (int >= 0)")
    if rid is not None and not isinstance(rid, (int, str)):
        raise ValueError("id: an int or a string")
    return scan, frame, rid


@dataclass
class _Held:
    frames: np.ndarray          # frame indices of the partition
    complete: np.ndarray        # per frame
    data: Optional[np.ndarray]  # (k, rows, cols) in memory, or None: in ``path``
    path: Optional[str] = None


class FrameStore:
    """A receiver's frames for viewers: the latest partitions in memory, the spilled ones."""

    def __init__(self, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self.memory: Deque[Tuple[str, _Held]] = deque()
        self.memory_bytes = 0
        self.spilled: Dict[str, List[_Held]] = {}

    def keep(self, scan: str, frames: np.ndarray, complete: np.ndarray,
             data: np.ndarray) -> None:
        """Keep ``data`` (not copied: the caller gives up writing it) while it fits."""
        if data.nbytes > self.keep_bytes:
            return
        self.memory.append((scan, _Held(frames, complete, data)))
        self.memory_bytes += data.nbytes
        while self.memory_bytes > self.keep_bytes:
            _, old = self.memory.popleft()
            self.memory_bytes -= old.data.nbytes    # type: ignore[union-attr]

    def spill(self, scan: str, frames: np.ndarray, complete: np.ndarray, path: str) -> None:
        """A partition spilled to ``path``."""
        self.spilled.setdefault(scan, []).append(_Held(frames, complete, None, path))

    def get(self, scan: str, frame: int) -> Optional[Tuple[np.ndarray, bool, str]]:
        """``(frame, complete, "memory" | "spill")``, or None when not held here."""
        for s, h in reversed(self.memory):
            if s == scan:
                hit = np.flatnonzero(h.frames == frame)
                if hit.size:
                    assert h.data is not None
                    return h.data[hit[0]], bool(h.complete[hit[0]]), "memory"
        for h in self.spilled.get(scan, ()):
            hit = np.flatnonzero(h.frames == frame)
            if hit.size and h.path is not None:
                return _read_spilled(h.path, int(hit[0])), bool(h.complete[hit[0]]), "spill"
        return None


def _read_spilled(path: str, i: int) -> np.ndarray:
    """Frame ``i`` of a spilled partition file, which must still be this user's, private."""
    import h5py

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError(f"{path}: no longer a private file of this user")
        with os.fdopen(os.dup(fd), "rb") as f, h5py.File(f, "r") as h:
            return np.asarray(h["frames"][i])
    finally:
        os.close(fd)


@dataclass
class _Pending:
    ident: bytes
    scan: str
    frame: int
    rid: Any
    waiting: set
    t: float


@dataclass
class FrameRequests:
    """Rank 0's bookkeeping of viewers' frame requests: admission, waiting, counts. Pure.

    ``admit`` decides (rate, busy), ``answer`` gathers the receivers' replies;
    :attr:`counts` holds every outcome (:data:`OUTCOMES`), published with the job's
    progress as ``frame_requests``.
    """

    rate: float = RATE
    max_bytes: int = MAX_FRAME_BYTES
    counts: Counter = field(default_factory=Counter)
    pending: OrderedDict[int, _Pending] = field(default_factory=OrderedDict)
    _tokens: float = -1.0
    _t: float = 0.0
    _next: int = 0

    def admit(self, ident: bytes, scan: str, frame: int, rid: Any, receivers: List[int],
              now: float) -> Tuple[Optional[int], Optional[str]]:
        """``(request number, None)`` to ask ``receivers``, or ``(None, outcome)`` refused."""
        if self._tokens < 0:
            self._tokens, self._t = self.rate, now
        self._tokens = min(self.rate, self._tokens + (now - self._t) * self.rate)
        self._t = now
        if self._tokens < 1.0:
            return None, self.refuse("rate")
        if len(self.pending) >= MAX_PENDING:
            return None, self.refuse("busy")
        self._tokens -= 1.0
        self._next += 1
        self.pending[self._next] = _Pending(ident, scan, frame, rid, set(receivers), now)
        return self._next, None

    def refuse(self, outcome: str) -> str:
        self.counts[outcome] += 1
        return outcome

    def answer(self, n: int, receiver: int, found: Any) -> Optional[Tuple[_Pending, Any]]:
        """A receiver's reply to request ``n`` (``found``: None, or what it sends);
        ``(request, found or None)`` once the request is decided, else None."""
        p = self.pending.get(n)
        if p is None:
            return None         # decided already (another receiver had it, or timed out)
        p.waiting.discard(receiver)
        if found is None and p.waiting:
            return None
        del self.pending[n]
        return p, found

    def expired(self, now: float) -> List[_Pending]:
        """Requests nobody answered within :data:`WAIT_S` (counted ``timeout``)."""
        old = [n for n, p in self.pending.items() if now - p.t > WAIT_S]
        out = [self.pending.pop(n) for n in old]
        self.counts["timeout"] += len(out)
        return out


def lookup(store: Optional[FrameStore], scan: str, frame: int, max_bytes: int
           ) -> Optional[Dict[str, Any]]:
    """A receiver's reply: None (not here), or ``{"frame": array or None, "complete",
    "where", "refused"}`` (``too_large``: the array is not sent)."""
    if store is None:
        return None
    try:
        got = store.get(scan, frame)
    except (OSError, KeyError, ValueError) as e:
        return {"frame": None, "refused": "not_held", "error": str(e)}
    if got is None:
        return None
    a, complete, where = got
    if a.nbytes > max_bytes:
        return {"frame": None, "refused": "too_large", "bytes": int(a.nbytes)}
    return {"frame": np.ascontiguousarray(a), "complete": complete, "where": where,
            "t": time.time()}
