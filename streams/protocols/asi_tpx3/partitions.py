"""Partitions kept as CSR: the assembler of a sparse detector's frames.

:class:`SparseAssembler` is :class:`streams.assemble.Assembler` -- the same checks,
accounting, partitions, eviction and duplicate digests -- with a partition buffer that
holds each frame's events (pixel ``indices`` and ``values``, uint32) instead of its
pixels, and delivers partitions whose ``data`` is an
:class:`analyses.sparse.CSRFrames`. A frame arrives whole, as one sector of encoding
``csr``: the payload is the pair ``(indices, values)``. A frame of more events than
pixels is refused by the receiver before it gets here, so a partition holds at most 8
bytes per pixel of its frames: twice its dense ``uint32`` size in the worst case (the
bound :func:`streams.bounds.scan_cost` charges is the dense one, one partition of
which is as large as two CSR ones in that case), and about 1/400 of it for the
scans of ``bench/results/asi_tpx3.md``.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from analyses.sparse import CSRFrames
from streams.assemble import Assembler
from streams.errors import CodecError

__all__ = ["SparseAssembler", "ENCODING"]

#: the encoding of a sector whose payload is ``(indices, values)``
ENCODING = "csr"


class _Rows:
    """The events of one partition buffer's K frames (None: not arrived)."""

    def __init__(self, k: int) -> None:
        self.rows: List[Optional[Tuple[np.ndarray, np.ndarray]]] = [None] * k

    @property
    def nbytes(self) -> int:
        return sum(ix.nbytes + v.nbytes for ix, v in filter(None, self.rows))


class SparseAssembler(Assembler):
    """An :class:`~streams.assemble.Assembler` of CSR frames (one sector each).

    ``held_bytes`` / ``peak_bytes``: the events its partition buffers hold now / held at
    most (what its dense twin's ``buffer_bytes`` reports).
    """

    held_bytes = 0
    peak_bytes = 0

    def _buffer(self, st: Any) -> _Rows:
        return _Rows(st.K)

    def _csr(self, encoding: str, payload: Any) -> Tuple[np.ndarray, np.ndarray]:
        if encoding != ENCODING:
            raise CodecError("unknown_encoding", f"encoding {encoding!r} (a sparse "
                             f"partition takes {ENCODING!r})")
        ix, v = payload
        return ix, v

    def _digest_of(self, ix: np.ndarray, v: np.ndarray) -> int:
        return self._xxh3(ix.tobytes() + v.tobytes(), seed=self._seed)

    def _store(self, st: Any, slot: int, row: int, encoding: str, payload: Any,
               r0: int, r1: int) -> int:
        ix, v = self._csr(encoding, payload)
        st.pool[slot].rows[row] = (ix.copy(), v.copy())   # the payload is the socket's
        self.held_bytes += ix.nbytes + v.nbytes
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        return self._digest_of(ix, v)

    def _digest_aside(self, st: Any, encoding: str, payload: Any, r0: int, r1: int) -> int:
        return self._digest_of(*self._csr(encoding, payload))

    def _partition_data(self, st: Any, slot: int, k: int, got: np.ndarray) -> CSRFrames:
        rows = st.pool[slot].rows
        empty = (np.zeros(0, np.uint32), np.zeros(0, np.uint32))
        got_rows = [rows[i] if rows[i] is not None and got[i].all() else empty
                    for i in range(k)]
        for i, r in enumerate(rows):   # the buffer is reused: nothing of this one stays
            if r is not None:
                self.held_bytes -= r[0].nbytes + r[1].nbytes
                rows[i] = None
        counts = [len(ix) for ix, _ in got_rows]
        indptr = np.zeros(k + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        cat = (lambda j: np.concatenate([r[j] for r in got_rows]) if k  # noqa: E731
               else np.zeros(0, np.uint32))
        return CSRFrames(indptr, cat(0), cat(1), (k, *st.g.shape))
