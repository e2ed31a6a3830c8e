"""Frames assembled from sectors into preallocated memory, with exact loss accounting.

The :class:`Assembler` is the receiver's brain without the socket: it takes typed
headers (:mod:`streams.protocol`'s ``Begin``/``Data``/``End``, which every
protocol's socket makes from its messages) and payloads, writes each sector straight into
its place in a *partition buffer*, hands every finished partition to a callback,
and keeps a :class:`~streams.accounting.ScanReport` per scan. It is pure
(numpy only): tests drive it without ZeroMQ, and the MPI layer can run one per
receiving rank. It stays one module (about 650 lines) because a frame's arrival reads
all of it at once: the scan's state, the placement strategy and the accounting; the
batch door (:meth:`Assembler.data_range`) is the same bookkeeping for many frames.

Partitions
    A partition is K consecutive frames *of this receiver* (K =
    ``partition_frames``). With the native routing (``frame mod R``) receiver r holds
    frames r, r+R, r+2R, ...; its j-th frame goes to partition j // K. With routing
    ``"any"`` (Stream V2: images reach clients round-robin) frames fill partitions in
    arrival order. A partition is delivered when all its frames are complete, or when
    the scan closes (then with its incomplete frames marked and their missing rows
    zeroed).

Memory bound
    A ``begin`` is accepted only when the scan's whole cost
    (:func:`streams.bounds.scan_cost`: two partitions, the accounting, and what the
    rest of the job holds for it, ``job_bytes``) fits ``memory_bytes``. Per open scan,
    at most ``slots`` partition buffers, ``slots = max(2, (memory_bytes - accounting -
    analysis) // (K * frame_bytes))`` (never more than the partitions the scan
    has here), each allocated when first needed and then reused; plus the
    accounting, ``frames x (9 sectors + 3)`` bytes. At most
    ``max_scans`` scans are open at once (a further ``begin`` is rejected ``busy``;
    the open scans go on), so the assembler holds at most
    ``max_scans x (memory_bytes + accounting)``.
    The ZeroMQ queues in front of it add ``RCVHWM`` messages (see the receiver).
    When every slot holds an unfinished partition and a sector of a new one
    arrives, the oldest unfinished partition is delivered as it is (counted in
    ``evicted_partitions``); sectors of it that arrive later are rejected ``late``.
    So memory never grows with the scan, and nothing is lost silently.

Duplicates
    Every accepted sector's decoded rows are digested (``xxh3_64``, keyed with a
    random seed per assembler: 30+ GB/s, so ingest does not notice it; a producer
    cannot aim a forged copy at a digest it cannot compute). A second copy of a
    sector is decoded aside and its digest compared with the first's: equal, it is
    rejected ``duplicate``; different, ``conflicting_duplicate``, and the frame is
    marked conflicting in the report (:attr:`~streams.accounting.ScanReport.conflicting`):
    the scan's result is invalid, never served. The first copy stays in the data.
"""
from __future__ import annotations

import secrets
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

import numpy as np

from streams.accounting import MAX_EXAMPLES, ScanReport
from streams.bounds import ScanCost, scan_cost
from streams.codecs import decode_into
from streams.errors import CodecError
from streams.protocol import Begin, Data, End, Reason, ScanGeometry

__all__ = ["Assembler", "Partition", "DEFAULT_MEMORY_BYTES"]

DEFAULT_MEMORY_BYTES = 256 << 20


@dataclass
class Partition:
    """K frames of one scan, delivered to the consumer.

    ``data`` is a view of the assembler's memory, valid only until the callback
    returns: copy what must outlive it, or :meth:`take` it.

    Attributes
    ----------
    scan : str
    index : int
        Partition number at this receiver (in delivery order for routing ``any``).
    frames : ndarray of int64, shape (k,)
        Global frame index of each row of ``data``.
    data : ndarray, shape (k, rows, cols), or analyses.sparse.CSRFrames
        The frames; rows of missing sectors are zero (a sparse protocol's partitions
        are CSR, :mod:`streams.protocols.asi_tpx3.partitions`).
    complete : ndarray of bool, shape (k,)
    sectors : ndarray of bool, shape (k, sectors)
        Which sectors arrived.
    geometry : ScanGeometry
    evicted : bool
        Delivered early because the memory budget was full.
    """

    scan: str
    index: int
    frames: np.ndarray
    data: np.ndarray
    complete: np.ndarray
    sectors: np.ndarray
    geometry: ScanGeometry
    evicted: bool = False
    taken: bool = False

    def take(self) -> Any:
        """``data``, the caller's to keep: the assembler gives up its buffer (and
        allocates another for the next partition) instead of the caller copying it,
        17-23 % of a receiver in issue 42's profile. A short partition (fewer frames
        than its buffer's) is copied, so that its size is what it holds."""
        d = self.data
        if isinstance(d, np.ndarray) and d.base is not None and d.base.nbytes != d.nbytes:
            return d.copy()
        self.taken = True
        return d


class _Open:
    """A partition being filled."""

    __slots__ = ("key", "slot", "frames", "remaining", "filled")

    def __init__(self, key: int, slot: int, frames: np.ndarray, remaining: int) -> None:
        self.key, self.slot, self.frames, self.remaining = key, slot, frames, remaining
        self.filled = 0  # routing "any": rows of `frames` assigned so far


class _Scan:
    """State of one open scan."""

    def __init__(self, g: ScanGeometry, a: Assembler, now: float) -> None:
        self.g = g
        F, S = g.frames, g.sectors
        K = self.K = a.frames_per_partition(g)
        expected, ends = a.placement.expected(g)
        self.local = int(expected.sum())
        self.report = ScanReport.empty(g, expected, ends_expected=ends)
        self.report.first_message = self.report.last_message = now
        self.nsect = np.zeros(F, np.int16 if S < 32768 else np.int32)
        self.digests = np.zeros((F, S), np.uint64)     # of each accepted sector
        self.partitions = max(1, -(-self.local // K))
        c = a.cost(g)     # the partitions get what the rest of the scan leaves
        slots = max(2, (a.memory_bytes - c.accounting - c.analysis) // max(1, K * g.frame_bytes))
        self.slots = min(slots, self.partitions)
        # Partition buffers are allocated when first needed and reused most-recent
        # first: a stream whose producers keep pace touches 2-3 of them (warm in
        # cache, no page faults), a skewed one grows to at most `slots`.
        self.pool: List[np.ndarray] = []
        self.dtype = np.dtype(g.dtype)
        self.free: List[int] = []
        self.open: Dict[int, _Open] = {}          # insertion order = age
        self.done = np.zeros(self.partitions, bool)     # routing modulo: delivered keys
        self.placed: Dict[int, Tuple[int, int]] = {}  # routing any: frame -> (key, row)
        self.done_keys: Set[int] = set()
        self.next_key = 0
        self.begins: Set[int] = set()
        self.ends: Set[int] = set()
        self.last = now
        self.complete = 0
        self.bytes = 0


class _Modulo:
    """Routing ``modulo`` (the native protocol's): receiver r of R holds frames r, r+R,
    ...; its j-th frame is row j mod K of partition j // K, known before it arrives."""

    def __init__(self, receiver: int, receivers: int) -> None:
        self.receiver, self.receivers = receiver, receivers

    def expected(self, g: ScanGeometry) -> Tuple[np.ndarray, int]:
        """The frames this receiver expects, and the ends (one per producer)."""
        return (np.arange(g.frames) % self.receivers) == self.receiver, g.producers

    def most(self, frames: int) -> int:
        """The most frames of a scan any receiver holds (what a scan costs)."""
        return -(-frames // self.receivers)

    def known_producer(self, producer: int, g: ScanGeometry) -> bool:
        return producer < g.producers

    def wrong_receiver(self, f: int) -> str:
        """Why frame ``f`` is not this receiver's ("": it is)."""
        if f % self.receivers == self.receiver:
            return ""
        return (f"sent to receiver {self.receiver}; frame mod {self.receivers} = "
                f"{f % self.receivers}")

    def place(self, a: Assembler, st: _Scan, f: int) -> Optional[Tuple[_Open, int]]:
        """Frame ``f``'s partition and row (None: its partition was delivered)."""
        key, row = divmod(f // self.receivers, st.K)
        op = st.open.get(key)
        if op is not None:
            return op, row
        if st.done[key]:
            return None
        first = key * st.K
        n = min(st.K, st.local - first)
        frames = self.receiver + self.receivers * np.arange(first, first + n, dtype=np.int64)
        return a._open(st, key, frames, n * st.g.sectors), row

    def commit(self, st: _Scan, op: _Open, row: int, f: int, m: int = 1) -> None:
        """A sector of ``f`` (of ``m`` frames from ``f``) stored in its row (here: placed
        already)."""

    def delivered(self, st: _Scan, op: _Open) -> int:
        """``op`` is being delivered: its frames."""
        st.done[op.key] = True
        return len(op.frames)


class _Any(_Modulo):
    """Routing ``any`` (a detector's own stream, any frame at any receiver): frames fill
    partitions in arrival order."""

    def expected(self, g: ScanGeometry) -> Tuple[np.ndarray, int]:
        return np.ones(g.frames, bool), 1

    def most(self, frames: int) -> int:
        return frames

    def known_producer(self, producer: int, g: ScanGeometry) -> bool:
        return True

    def wrong_receiver(self, f: int) -> str:
        return ""

    def place(self, a: Assembler, st: _Scan, f: int) -> Optional[Tuple[_Open, int]]:
        # Propose the next free row; commit takes it only after the payload decoded,
        # so a corrupt copy leaves no reserved, zeroed row behind.
        if f in st.placed:
            key, row = st.placed[f]
            op = st.open.get(key)
            return None if op is None else (op, row)
        op = st.open.get(st.next_key)
        if op is None:
            n = min(st.K, max(st.local - len(st.placed), 1))
            op = a._open(st, st.next_key, np.full(n, -1, np.int64), n * st.g.sectors)
        return op, op.filled

    def commit(self, st: _Scan, op: _Open, row: int, f: int, m: int = 1) -> None:
        if m == 1:
            if f in st.placed:
                return
            op.frames[row] = f
            st.placed[f] = (op.key, row)
        else:        # new frames f .. f+m-1 in rows row .. row+m-1 (Assembler.data_range)
            op.frames[row:row + m] = np.arange(f, f + m)
            st.placed.update(zip(range(f, f + m), ((op.key, r) for r in range(row, row + m))))
        op.filled += m
        if op.filled == len(op.frames):
            st.next_key += 1

    def delivered(self, st: _Scan, op: _Open) -> int:
        st.done_keys.add(op.key)
        if op.key == st.next_key:
            st.next_key += 1
        return op.filled


class Assembler:
    """Assemble sectors into partitions and account for every message.

    Parameters
    ----------
    deliver : callable(Partition)
        Called with every finished partition (in the caller's thread). The
        partition's memory is reused once it returns.
    receiver, receivers : int
        This receiver's index r and the number R of receivers (routing ``modulo``).
    routing : {"modulo", "any"}
        ``modulo``: frame f belongs here iff ``f mod R == r`` (native protocol).
        ``any``: accept every frame (Stream V2 clients).
    partition_frames : int or callable(ScanGeometry) -> int
        K, frames per partition; a callable chooses K per scan from its geometry
        (the frame size is known only at ``begin``).
    memory_bytes : int
        Partition memory per open scan (see the module docstring).
    max_scans : int
        Scans open at once.
    idle_timeout : float
        Seconds without a message for a scan after which :meth:`expire` closes it.
    job_bytes : callable(ScanGeometry) -> int, optional
        What the rest of the job holds for a scan besides the assembler (the
        analysis's state: :meth:`analyses.contract.Analysis.scan_bytes`), counted in
        the cost checked at ``begin``.
    on_close : callable(ScanReport), optional
        Called with each scan's report when it closes.
    clock : callable() -> float
        Monotonic seconds (injectable for tests).
    """

    def __init__(self, deliver: Callable[[Partition], Any], *, receiver: int = 0,
                 receivers: int = 1, routing: str = "modulo",
                 partition_frames: Union[int, Callable[[ScanGeometry], int]] = 1,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES, max_scans: int = 4,
                 idle_timeout: float = 30.0,
                 on_close: Optional[Callable[[ScanReport], Any]] = None,
                 clock: Callable[[], float] = time.monotonic,
                 job_bytes: Optional[Callable[[ScanGeometry], int]] = None) -> None:
        if routing not in ("modulo", "any"):
            raise ValueError(f"routing must be 'modulo' or 'any', not {routing!r}")
        if not 0 <= receiver < receivers:
            raise ValueError(f"expecting receiver in range({receivers}), not {receiver}")
        if (not callable(partition_frames) and partition_frames < 1) or max_scans < 1 \
                or idle_timeout <= 0 or memory_bytes < 0:
            raise ValueError("partition_frames, max_scans, idle_timeout must be positive")
        self.deliver, self.on_close, self.clock = deliver, on_close, clock
        self.receiver, self.receivers, self.routing = receiver, receivers, routing
        self.placement = (_Modulo if routing == "modulo" else _Any)(receiver, receivers)
        self.partition_frames, self.memory_bytes = partition_frames, memory_bytes
        self.max_scans, self.idle_timeout = max_scans, idle_timeout
        self.job_bytes = job_bytes
        self.scans: Dict[str, _Scan] = {}
        self.closed: Dict[str, ScanReport] = {}
        #: Why no new scan may open (the job served its scans), or "".
        self.refuse_new = ""
        self._seed = secrets.randbits(64)
        import xxhash    # small, C: the digest of every accepted sector

        self._xxh3 = xxhash.xxh3_64_intdigest
        self.rejected: Counter = Counter()      # every rejection, by reason
        self.examples: List[str] = []

    def frames_per_partition(self, g: ScanGeometry) -> int:
        """K for scan ``g`` (at least 1)."""
        pf = self.partition_frames
        return max(1, int(pf(g) if callable(pf) else pf))

    # ---- rejection ----
    def reject(self, reason: str, detail: str, scan: Optional[str] = None,
               received: bool = False) -> None:
        """Count one rejected message; attribute it to ``scan`` when that scan is open
        (``received``: it was a data message of that scan, counted as received too)."""
        reason = str(reason)
        self.rejected[reason] += 1
        text = f"{reason}: {detail}"
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(text)
        st = self.scans.get(scan) if scan is not None else None
        if st is not None:
            if received:
                st.report.received_data += 1
            st.report.rejected[reason] += 1
            if len(st.report.examples) < MAX_EXAMPLES:
                st.report.examples.append(text)
        else:
            for st in self.scans.values():
                st.report.rejected_unattributed[reason] += 1
                if len(st.report.examples) < MAX_EXAMPLES:   # named in the report too
                    st.report.examples.append(f"(no scan of its own) {text}")

    def _known(self, scan: str, what: str) -> Optional[_Scan]:
        st = self.scans.get(scan)
        if st is None:
            if scan in self.closed:
                self.reject(Reason.LATE, f"{what} for scan {scan}, which this receiver "
                            "already closed")
            else:
                self.reject(Reason.UNKNOWN_SCAN, f"{what} for scan {scan}, of which no begin "
                            "arrived here: send begin to every receiver first")
        return st

    def begin(self, b: Begin) -> None:
        """A producer announces a scan (opens it on the first ``begin``)."""
        g, now = b.geometry, self.clock()
        if g.scan in self.closed:
            self.reject(Reason.NAME_USED, f"begin for scan {g.scan}: this job has already "
                        f"served a scan named {g.scan}; give every scan a new name")
            return
        if not b.producer < g.producers:
            self.reject(Reason.OUT_OF_RANGE, f"begin from producer {b.producer} of "
                        f"{g.producers}", g.scan if g.scan in self.scans else None)
            return
        st = self.scans.get(g.scan)
        if st is None:
            if self.refuse_new:
                self.reject(Reason.BUSY, f"begin for scan {g.scan}: {self.refuse_new}")
                return
            if self._too_large(g):
                return
            if len(self.scans) >= self.max_scans:
                self.reject(Reason.BUSY, f"begin for scan {g.scan} while {len(self.scans)} "
                            f"scans are open ({', '.join(self.scans)}; --max-open-scans "
                            f"{self.max_scans}): refused, the open scans go on")
                return
            try:
                st = self.scans[g.scan] = _Scan(g, self, now)
            except MemoryError:
                self.reject(Reason.BUSY, f"no memory for scan {g.scan} "
                            f"({self.memory_bytes} bytes of partitions)")
                return
        elif st.g != g:
            self.reject(Reason.CONFLICT, f"begin from producer {b.producer} says {g}, the "
                        f"scan began as {st.g}", g.scan)
            return
        elif b.producer in st.begins:
            self.reject(Reason.DUPLICATE, f"second begin from producer {b.producer}", g.scan)
            return
        st.begins.add(b.producer)
        st.last = st.report.last_message = now

    def cost(self, g: ScanGeometry) -> ScanCost:
        """What scan ``g`` would cost here and in the rest of the job (no allocation)."""
        return scan_cost(g, self.frames_per_partition(g), self.placement.most(g.frames),
                         self.job_bytes(g) if self.job_bytes is not None else 0)

    def _too_large(self, g: ScanGeometry) -> bool:
        """Reject (``too_large``) a scan whose whole cost exceeds the bound: checked at
        ``begin``, before anything of the scan is allocated."""
        c = self.cost(g)
        if c.total <= self.memory_bytes:
            return False
        self.reject(Reason.TOO_LARGE, f"begin for scan {g.scan}: {g.frames} frames of "
                    f"{g.shape[0]}x{g.shape[1]} {g.dtype} need {c.describe()}, more than "
                    f"the memory bound of {self.memory_bytes} bytes per scan (--memory)")
        return True

    def end(self, e: End) -> None:
        """A producer is done with this receiver; the scan closes after the last one."""
        st = self._known(e.scan, "end")
        if st is None:
            return
        st.last = st.report.last_message = self.clock()
        if not self.placement.known_producer(e.producer, st.g):
            self.reject(Reason.OUT_OF_RANGE, f"end from producer {e.producer} of "
                        f"{st.g.producers}", e.scan)
            return
        if e.producer in st.ends:
            self.reject(Reason.DUPLICATE, f"second end from producer {e.producer}", e.scan)
            return
        st.ends.add(e.producer)
        st.report.ends_received += 1
        if e.sent is None:
            st.report.ends_uncounted += 1
        else:
            st.report.sent += e.sent
        if len(st.ends) >= st.report.ends_expected:
            self.close(e.scan, "end")

    def data(self, d: Data, payload: Any, where: Optional[str] = None) -> None:
        """One sector: check it, decode it into its partition, deliver when complete.

        A sector is committed (counted, its frame's row kept) only once its payload
        decoded: a corrupt copy is rejected and leaves nothing behind, so a good
        copy arriving later is kept, and a good copy is never overwritten (a
        second one is rejected ``duplicate``). ``where`` names the message in
        rejections (default ``scan S frame F sector K``).
        """
        st = self._known(d.scan, f"data (frame {d.frame}, sector {d.sector})")
        if st is None:
            return
        g = st.g
        st.last = st.report.last_message = self.clock()
        st.report.received_data += 1
        f, s = d.frame, d.sector
        where = where or f"scan {d.scan} frame {f} sector {s}"
        if not (0 <= f < g.frames and 0 <= s < g.sectors):   # a negative one would wrap
            self.reject(Reason.OUT_OF_RANGE, f"{where}: the scan has {g.frames} frames of "
                        f"{g.sectors} sectors", d.scan)
            return
        wrong = self.placement.wrong_receiver(f)
        if wrong:
            self.reject(Reason.WRONG_RECEIVER, f"{where} {wrong}", d.scan)
            return
        r0, r1 = g.sector_rows(s)
        if (d.r0, d.r1) != (r0, r1):
            self.reject(Reason.OUT_OF_RANGE, f"{where}: rows [{d.r0}, {d.r1}], the sector "
                        f"holds rows [{r0}, {r1}]", d.scan)
            return
        if st.report.got[f, s]:
            self._second_copy(st, d, payload, where)
            return
        place = self.placement.place(self, st, f)
        if place is None:
            self.reject(Reason.LATE, f"{where} arrived after its partition was delivered "
                        "(memory budget full: raise memory_bytes)", d.scan)
            return
        op, row = place
        try:
            digest = self._store(st, op.slot, row, d.encoding, payload, r0, r1)
        except CodecError as e:
            # routing any: the row was only proposed (see _Any.place); nothing to undo
            self.reject(e.reason, f"{where}: {e.detail}", d.scan)
            return
        self.placement.commit(st, op, row, f)
        st.digests[f, s] = digest
        st.report.got[f, s] = True
        st.bytes += (r1 - r0) * g.shape[1] * g.itemsize
        n = st.nsect[f] = st.nsect[f] + 1
        if n == g.sectors:
            st.complete += 1
        op.remaining -= 1
        if op.remaining == 0:
            self._deliver(st, op, evicted=False)

    def data_range(self, scan: str, first: int, count: int,
                   decode: Callable[[int, np.ndarray], Any]) -> int:
        """Whole frames ``first .. first + count - 1`` of a scan of one sector (routing
        ``any``), as one call instead of ``count`` :meth:`data` calls: each partition's
        share decoded in one go, ``decode(i, rows)`` writing frames ``first + i ...`` into
        ``rows`` (consecutive rows of the partition's buffer, shape (m, rows, cols)), and
        counted, placed and digested as :meth:`data` does. For a receiver that checked the
        frames' headers as a batch (Merlin's fixed-size frames): it takes frames from
        ``first`` up to the first that is not new here (a second copy, beyond the scan)
        and returns how many it took; the caller hands that one to :meth:`data`, which
        checks, rejects and counts it. A ``CodecError`` of ``decode`` commits nothing of
        that call's partition share (the rows were only proposed)."""
        st = self.scans.get(scan)
        if st is None or self.routing != "any" or st.g.sectors != 1 or first < 0:
            return 0
        g, rep = st.g, st.report
        n = max(0, min(count, g.frames - first))
        seen = rep.got[first:first + n, 0]
        if n and seen.any():
            n = int(seen.argmax())
        if n:
            st.last = rep.last_message = self.clock()
        done = 0
        while done < n:
            f = first + done
            op, row = self.placement.place(self, st, f)  # type: ignore[misc]  # f is new
            m = min(n - done, len(op.frames) - row)
            rows = st.pool[op.slot][row:row + m]
            try:
                decode(done, rows)
            except CodecError:
                break
            self.placement.commit(st, op, row, f, m)
            st.digests[f:f + m, 0] = [self._digest(r) for r in rows]
            rep.got[f:f + m, 0] = True
            st.nsect[f:f + m] = 1
            st.complete += m
            st.bytes += m * g.frame_bytes
            rep.received_data += m
            done += m
            op.remaining -= m
            if op.remaining == 0:
                self._deliver(st, op, evicted=False)
        return done

    def _digest(self, rows: Any) -> int:
        return self._xxh3(rows.data, seed=self._seed)    # C-contiguous rows

    # ---- where sectors are kept: dense here, CSR in streams.protocols.asi_tpx3.partitions ----
    def _buffer(self, st: _Scan) -> Any:
        """A new partition buffer of ``st`` (K frames)."""
        return np.empty((st.K, *st.g.shape), st.dtype)

    def _store(self, st: _Scan, slot: int, row: int, encoding: str, payload: Any,
               r0: int, r1: int) -> int:
        """Decode a sector into its place; return its digest (raises ``CodecError``)."""
        rows = st.pool[slot][row, r0:r1]
        decode_into(encoding, payload, rows)
        return self._digest(rows)

    def _digest_aside(self, st: _Scan, encoding: str, payload: Any, r0: int, r1: int) -> int:
        """The digest of a second copy, decoded aside (raises ``CodecError``)."""
        aside = np.empty((r1 - r0, st.g.shape[1]), st.dtype)
        decode_into(encoding, payload, aside)
        return self._digest(aside)

    def _partition_data(self, st: _Scan, slot: int, k: int, got: np.ndarray) -> Any:
        """The first ``k`` frames of a buffer as delivered, rows that did not arrive zeroed."""
        data = st.pool[slot][:k]
        for i in np.flatnonzero(~got.all(axis=1)):
            for s in np.flatnonzero(~got[i]):
                r0, r1 = st.g.sector_rows(int(s))
                data[i, r0:r1] = 0
        return data

    def _second_copy(self, st: _Scan, d: Data, payload: Any, where: str) -> None:
        """A sector already accepted arrives again: decoded aside and compared."""
        g, f, s = st.g, d.frame, d.sector
        r0, r1 = g.sector_rows(s)
        try:
            digest = self._digest_aside(st, d.encoding, payload, r0, r1)
        except CodecError as e:
            self.reject(e.reason, f"{where} (a second copy): {e.detail}", d.scan)
            return
        if digest == int(st.digests[f, s]):
            self.reject(Reason.DUPLICATE, f"{where} arrived twice, the same content (the "
                        "first copy is kept)", d.scan)
            return
        sectors = st.report.conflicting.setdefault(int(f), [])
        if int(s) not in sectors:
            sectors.append(int(s))
        self.reject(Reason.CONFLICTING_DUPLICATE, f"{where} arrived twice with different "
                    "content: the frame is marked conflicting, the scan's result invalid",
                    d.scan)

    # ---- partitions ----
    def _open(self, st: _Scan, key: int, frames: np.ndarray, remaining: int) -> _Open:
        if not st.free:
            if len(st.pool) < st.slots:
                st.pool.append(self._buffer(st))
                st.free.append(len(st.pool) - 1)
            else:
                oldest = next(iter(st.open.values()))
                st.report.evicted_partitions += 1
                self._deliver(st, oldest, evicted=True)
        op = _Open(key, st.free.pop(), frames, remaining)
        st.open[key] = op
        return op

    def _deliver(self, st: _Scan, op: _Open, evicted: bool) -> None:
        g = st.g
        del st.open[op.key]
        k = self.placement.delivered(st, op)
        frames = op.frames[:k]
        got = st.report.got[frames]
        complete = got.all(axis=1)
        data = self._partition_data(st, op.slot, k, got)
        part = Partition(g.scan, op.key, frames.copy(), data, complete, got, g, evicted)
        try:
            if k:
                self.deliver(part)
        finally:
            if part.taken:
                st.pool[op.slot] = self._buffer(st)
            st.free.append(op.slot)

    # ---- closing ----
    def expire(self, now: Optional[float] = None) -> List[ScanReport]:
        """Close every scan idle for ``idle_timeout`` seconds; return their reports."""
        now = self.clock() if now is None else now
        idle = [s for s, st in self.scans.items() if now - st.last >= self.idle_timeout]
        return [self.close(s, "timeout") for s in idle]

    def close(self, scan: str, ended_by: str) -> ScanReport:
        """Deliver what is left of ``scan``, free its memory and return its report."""
        st = self.scans[scan]
        for op in sorted(st.open.values(), key=lambda o: o.key):
            self._deliver(st, op, evicted=False)
        del self.scans[scan]
        rep = st.report
        rep.ended_by = ended_by
        rep.accepted_bytes = st.bytes
        rep.buffer_bytes = sum(b.nbytes for b in st.pool)
        rep.closed_at = self.clock()
        self.closed[scan] = rep
        if self.on_close is not None:
            self.on_close(rep)
        return rep

    def close_all(self, ended_by: str = "stopped") -> List[ScanReport]:
        """Close every open scan (the receiver is stopping)."""
        return [self.close(s, ended_by) for s in list(self.scans)]

    # ---- live figures ----
    def progress(self) -> Dict[str, Dict[str, Any]]:
        """Per open scan: frames complete so far, bytes, seconds since its last message."""
        now = self.clock()
        return {s: {"frames_complete": st.complete, "frames_expected": st.local,
                    "bytes": st.bytes, "idle_s": now - st.last,
                    "rejected": sum(st.report.rejected.values())}
                for s, st in self.scans.items()}
