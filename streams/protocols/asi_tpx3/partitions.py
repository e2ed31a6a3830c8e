"""Partitions kept as CSR: the assembler of a sparse detector's frames.

:class:`SparseAssembler` is :class:`streams.assemble.Assembler` -- the same checks,
accounting, partitions, eviction and duplicate digests -- with a partition buffer that
holds each frame's events (pixel ``indices`` and ``values``, uint32) instead of its
pixels, and delivers partitions whose ``data`` is an
:class:`analyses.sparse.CSRFrames`. A frame arrives whole, as one sector of encoding
``csr``: the payload is the pair ``(indices, values)``; or a whole chunk of frames at
once (:meth:`SparseAssembler.chunk`, the receiver's way). A frame of more events than
pixels is refused by the receiver before it gets here, so a partition holds at most 8
bytes per pixel of its frames: twice its dense ``uint32`` size in the worst case (the
bound :func:`streams.bounds.scan_cost` charges is the dense one, one partition of
which is as large as two CSR ones in that case), and about 1/400 of it for the
scans of ``bench/results/asi_tpx3.md``.
"""
from __future__ import annotations

from itertools import repeat
from typing import Any, List, Tuple

import numpy as np

from analyses.sparse import CSRFrames
from streams.assemble import Assembler
from streams.errors import CodecError
from streams.protocol import Data

__all__ = ["SparseAssembler", "ENCODING"]

#: the encoding of a sector whose payload is ``(indices, values)``
ENCODING = "csr"


class _Rows:
    """The events of one partition buffer's K frames: blocks of consecutive rows
    ``(row0, indptr from 0, indices, values)``, disjoint (a row not in one: not arrived)."""

    def __init__(self) -> None:
        self.blocks: List[Tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []

    @property
    def nbytes(self) -> int:
        return sum(ix.nbytes + v.nbytes for _, _, ix, v in self.blocks)


class SparseAssembler(Assembler):
    """An :class:`~streams.assemble.Assembler` of CSR frames (one sector each).

    ``held_bytes`` / ``peak_bytes``: the events its partition buffers hold now / held at
    most (what its dense twin's ``buffer_bytes`` reports).
    """

    held_bytes = 0
    peak_bytes = 0

    def _buffer(self, st: Any) -> _Rows:
        return _Rows()

    def _csr(self, encoding: str, payload: Any) -> Tuple[np.ndarray, np.ndarray]:
        if encoding != ENCODING:
            raise CodecError("unknown_encoding", f"encoding {encoding!r} (a sparse "
                             f"partition takes {ENCODING!r})")
        ix, v = payload
        return ix, v

    def _digest_of(self, ix: np.ndarray, v: np.ndarray) -> int:
        return self._digests(ix, v, [0, len(ix)])[0]

    def _digests(self, ix: np.ndarray, v: np.ndarray, indptr: Any) -> List[int]:
        """Each frame's digest: of its events as (index, value) pairs, one buffer."""
        mv = memoryview(np.stack((ix, v), axis=1)).cast("B")
        at = [int(p) * 2 * ix.itemsize for p in indptr]
        return [self._xxh3(mv[a:b], seed=self._seed) for a, b in zip(at[:-1], at[1:])]

    def _store(self, st: Any, slot: int, row: int, encoding: str, payload: Any,
               r0: int, r1: int) -> int:
        ix, v = self._csr(encoding, payload)
        self._keep(st.pool[slot], row, np.array([0, len(ix)], np.int64), ix, v)
        return self._digest_of(ix, v)

    def _keep(self, rows: _Rows, row0: int, indptr: np.ndarray, ix: np.ndarray,
              v: np.ndarray) -> None:
        rows.blocks.append((row0, indptr, ix.copy(), v.copy()))   # the payload is the socket's
        self.held_bytes += ix.nbytes + v.nbytes
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)

    def chunk(self, scan: str, f0: int, indptr: np.ndarray, indices: np.ndarray,
              values: np.ndarray, where: str) -> None:
        """Frames ``f0, f0 + 1, ...`` of ``scan`` at once: ``indptr`` (from 0) into
        ``indices`` and ``values``, each slice that falls in one partition copied in one
        piece. The same checks, counts, digests, partitions and rejections as one
        :meth:`~streams.assemble.Assembler.data` per frame -- which is what runs when any
        frame is not the plain case (no scan, past its end, a second copy)."""
        st = self.scans.get(scan)
        n = len(indptr) - 1
        if st is None or st.g.sectors != 1 or f0 + n > st.g.frames or \
                st.report.got[f0:f0 + n].any() or self.routing != "any":
            rows = st.g.shape[0] if st is not None else 0
            for i in range(n):
                a, b = int(indptr[i]), int(indptr[i + 1])
                self.data(Data(scan, f0 + i, 0, 0, rows, ENCODING),
                          (indices[a:b], values[a:b]), where=f"{where} frame {f0 + i}")
            return
        st.last = st.report.last_message = self.clock()
        st.report.received_data += n
        frame_bytes = st.g.frame_bytes
        i = 0
        while i < n:
            op = st.open.get(st.next_key)
            if op is None:      # as _Any.place opens it
                k = min(st.K, max(st.local - len(st.placed), 1))
                op = self._open(st, st.next_key, np.full(k, -1, np.int64), k)
            row, take = op.filled, min(n - i, len(op.frames) - op.filled)
            a, b = int(indptr[i]), int(indptr[i + take])
            ip = (indptr[i:i + take + 1] - a).astype(np.int64)
            buf: Any = st.pool[op.slot]
            self._keep(buf, row, ip, indices[a:b], values[a:b])
            ix, v = buf.blocks[-1][2:]
            fs = np.arange(f0 + i, f0 + i + take, dtype=np.int64)
            st.digests[fs, 0] = self._digests(ix, v, ip.tolist())
            op.frames[row:row + take] = fs        # as _Any.commit, for `take` frames
            op.filled += take
            st.placed.update(zip(range(f0 + i, f0 + i + take),
                                 zip(repeat(op.key), range(row, row + take))))
            if op.filled == len(op.frames):
                st.next_key += 1
            st.report.got[fs, 0] = True
            st.nsect[fs] = 1
            st.complete += take
            st.bytes += take * frame_bytes
            op.remaining -= take
            i += take
            if op.remaining == 0:
                self._deliver(st, op, evicted=False)

    def _digest_aside(self, st: Any, encoding: str, payload: Any, r0: int, r1: int) -> int:
        return self._digest_of(*self._csr(encoding, payload))

    def _partition_data(self, st: Any, slot: int, k: int, got: np.ndarray) -> CSRFrames:
        buf = st.pool[slot]
        blocks = sorted(buf.blocks, key=lambda b: b[0])   # rows in order; each one got
        counts = np.zeros(k, np.int64)
        for r0, ip, _, _ in blocks:
            counts[r0:r0 + len(ip) - 1] = np.diff(ip)
        self.held_bytes -= buf.nbytes       # the buffer is reused: nothing of this one stays
        buf.blocks = []
        indptr = np.zeros(k + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        cat = (lambda j: blocks[0][j] if len(blocks) == 1  # noqa: E731 (ours: not copied)
               else np.concatenate([b[j] for b in blocks]) if blocks else np.zeros(0, np.uint32))
        return CSRFrames(indptr, cat(2), cat(3), (k, *st.g.shape))
