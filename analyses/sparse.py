"""Frames as CSR: a partition of a sparse (event) detector, kept sparse up to the analysis.

A :class:`CSRFrames` is k frames as one CSR matrix of k rows (flat pixel indices
``row * cols + col``) standing where a dense ``(k, rows, cols)`` partition stands
(``len``, ``shape``, ``dtype``, ``nbytes``, ``copy``, ``frames[i]``,
``np.asarray``). An analysis that computes on CSR says so (``sparse``); every
other one gets dense frames from :func:`frames_for`, the one place they are
densified. Pure numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["CSRFrames", "densify", "frames_for", "row_sums"]


@dataclass(frozen=True, eq=False)
class CSRFrames:
    """k frames of ``shape[1:]`` as CSR (duplicate indices of a frame add up)."""

    indptr: np.ndarray     # (k + 1,) int64, from 0 to len(indices)
    indices: np.ndarray    # flat pixel indices (uint32)
    values: np.ndarray     # the counts (uint32)
    shape: Tuple[int, int, int]

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes + self.values.nbytes)

    def __len__(self) -> int:
        return self.shape[0]

    def copy(self) -> CSRFrames:
        return CSRFrames(self.indptr.copy(), self.indices.copy(), self.values.copy(),
                         self.shape)

    def dense(self) -> np.ndarray:
        """All frames dense, ``(k, rows, cols)`` of :attr:`dtype`."""
        k, rows, cols = self.shape
        out = np.zeros((k, rows * cols), self.dtype)
        densify(out, self.indptr, self.indices, self.values)
        return out.reshape(self.shape)

    def __getitem__(self, i: Any) -> Any:
        """Frame ``i`` dense, ``(rows, cols)``; a bool mask or an index array: those
        frames, still CSR (the offline runner's ``--valid`` on a TPX3 file)."""
        k, rows, cols = self.shape
        if isinstance(i, np.ndarray):
            if i.dtype == bool and len(i) != k:
                raise IndexError(f"a mask of {len(i)} frames for {k}")
            picked = np.flatnonzero(i) if i.dtype == bool else np.asarray(i, np.int64)
            lo, hi = self.indptr[picked], self.indptr[picked + 1]
            indptr = np.concatenate(([0], np.cumsum(hi - lo))).astype(np.int64)
            at = np.repeat(lo - indptr[:-1], hi - lo) + np.arange(indptr[-1])
            return CSRFrames(indptr, self.indices[at], self.values[at],
                             (len(picked), rows, cols))
        if not -k <= i < k:
            raise IndexError(f"frame {i} of {k}")
        i %= k
        out = np.zeros((1, rows * cols), self.dtype)
        densify(out, self.indptr[i:i + 2] - self.indptr[i],
                self.indices[self.indptr[i]:self.indptr[i + 1]],
                self.values[self.indptr[i]:self.indptr[i + 1]])
        return out.reshape(rows, cols)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        d = self.dense()
        return d if dtype is None else d.astype(dtype)


def densify(out: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """CSR rows (``indptr`` from 0) into dense frames ``out`` ``(n, pixels)``, which must be
    zero; returns the flat positions written (zeroing them again is far cheaper than the
    frames). Duplicate pixel indices of a frame add up (as scipy's ``toarray`` and
    LiberTEM's dense tiles do); a canonical matrix (indices increasing within each frame)
    takes one scatter, any other the slower ``np.add.at``."""
    pos = np.repeat(np.arange(out.shape[0], dtype=np.int64) * out.shape[1], np.diff(indptr))
    pos += indices
    flat = out.reshape(-1)
    if len(pos) < 2 or bool(np.all(pos[1:] > pos[:-1])):
        flat[pos] = values
    else:
        np.add.at(flat, pos, values.astype(out.dtype))
    return pos


def frames_for(analysis: Any, data: Any) -> Any:
    """THE SPARSE LIMIT of a job: ``data`` as ``analysis`` takes it -- CSR to an analysis
    whose ``sparse`` is true, dense frames to every other one."""
    if isinstance(data, CSRFrames) and not getattr(analysis, "sparse", False):
        return data.dense()
    return data


def row_sums(data: CSRFrames, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """``out[i, j] = sum over frame i's events of value * weights[j, index]``, float64
    ``(k, m)`` (``weights``: ``(m, pixels)``; None: each frame's pixel sum, ``(k, 1)``)."""
    k = len(data)
    v = data.values.astype(np.float64)
    w = v[None, :] if weights is None else weights[:, data.indices] * v
    out = np.zeros((k, w.shape[0]))
    for i in np.flatnonzero(np.diff(data.indptr)):   # Python loop over k frames, not pixels
        out[i] = w[:, data.indptr[i]:data.indptr[i + 1]].sum(axis=1)
    return out
