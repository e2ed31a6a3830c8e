"""NF-HEDM per-frame reduction (after MIDAS's NF image processing).

Steps, each a flat kernel, composed by :func:`reduce_frame`:

1. background: per-pixel lower median over a stack of frames
   (:func:`median_background`, computable on a band of pixel rows so a
   workflow can split rows over tasks and stack the bands);
2. ``sub = max(frame - background - offset, 0)`` (uint16);
3. ``med = median_filter(sub, median_size)`` (3x3 or 5x5, edges repeated);
4. ``log = LoG(med, sigma, radius)`` (float64, edges repeated);
5. zero-crossing edges: ``log < 0`` pixels touching a ``log >= 0`` pixel or
   the image border;
6. fill: edges plus everything they enclose (holes, 4-connected background);
7. label the filled mask with 8-connectivity.

Steps 6-7 differ from "label the edges, then fill each contour" only for
nested contours, which here merge into their enclosing spot (one spot, one
label).  Output is sparse: every labelled pixel's (row, col, intensity,
label), in raster order, where intensity is ``med`` at that pixel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .errors import KernelArgumentError, check_frame, check_out
from .filters import (MEDIAN_SIZES, _NET3, _NET5, log_filter_kernel, log_weights,
                      median_filter_kernel, zero_crossings_kernel)
from .label import fill_holes_kernel, label8_kernel

__all__ = [
    "NFParams", "NFSpots", "NFWorkspace", "NF_SPOT_DTYPE",
    "median_background", "median_background_kernel",
    "subtract_background", "subtract_background_kernel",
    "reduce_frame", "reduce_frame_kernel", "sparse_kernel",
]

NF_SPOT_DTYPE = np.dtype([("frame", np.int32), ("row", np.int32), ("col", np.int32),
                          ("intensity", np.uint16), ("label", np.int32)])


@dataclass(frozen=True)
class NFParams:
    """Parameters of the NF per-frame reduction (validated on construction).

    offset : blanket offset subtracted after the background (counts, >= 0).
    median_size : median window side, 3 or 5.
    log_sigma, log_radius : LoG Gaussian sigma (px) and half-width (px).
    """

    offset: int = 0
    median_size: int = 3
    log_sigma: float = 1.0
    log_radius: int = 4

    def __post_init__(self):
        if not (isinstance(self.offset, (int, np.integer)) and 0 <= self.offset <= 65535):
            raise KernelArgumentError(
                f"offset must be an integer in [0, 65535], got {self.offset!r}")
        if self.median_size not in MEDIAN_SIZES:
            raise KernelArgumentError(
                f"median_size must be one of {MEDIAN_SIZES}, got {self.median_size!r}")
        log_weights(self.log_sigma, self.log_radius)  # validates both


@dataclass(frozen=True)
class NFSpots:
    """Sparse result of one frame: parallel arrays, one entry per labelled pixel."""

    rows: np.ndarray        # int32
    cols: np.ndarray        # int32
    intensity: np.ndarray   # uint16, median-filtered background-subtracted value
    labels: np.ndarray      # int32, 1..n_labels
    n_labels: int

    def to_records(self, frame: int = 0) -> np.ndarray:
        """The pixels as a :data:`NF_SPOT_DTYPE` structured array (concatenates across frames)."""
        rec = np.empty(self.rows.shape[0], dtype=NF_SPOT_DTYPE)
        rec["frame"] = frame
        rec["row"] = self.rows
        rec["col"] = self.cols
        rec["intensity"] = self.intensity
        rec["label"] = self.labels
        return rec

    def centroids(self) -> np.ndarray:
        """(n_labels, 2) intensity-weighted (row, col) centroid of each label.

        A label whose pixels all have zero intensity gets its unweighted mean.
        """
        n = self.n_labels
        idx = self.labels - 1
        wgt = self.intensity.astype(np.float64)
        tot = np.bincount(idx, wgt, n)
        cnt = np.bincount(idx, None, n)
        zero = tot == 0
        wgt_eff = np.where(zero[idx], 1.0, wgt)
        tot = np.where(zero, cnt, tot)
        out = np.empty((n, 2))
        out[:, 0] = np.bincount(idx, wgt_eff * self.rows, n) / tot
        out[:, 1] = np.bincount(idx, wgt_eff * self.cols, n) / tot
        return out


@njit(cache=True, nogil=True)
def _kth_smallest(a, k):
    # Wirth's selection (in place): O(n) on average, no allocation.
    lo = 0
    hi = a.shape[0] - 1
    while lo < hi:
        x = a[k]
        i = lo
        j = hi
        while True:
            while a[i] < x:
                i += 1
            while x < a[j]:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
            if i > j:
                break
        if j < k:
            lo = i
        if k < i:
            hi = j
    return a[k]


@njit(cache=True, nogil=True)
def median_background_kernel(stack, out):
    """``out[r, c]`` = lower median of ``stack[:, r, c]`` (element ``(n-1)//2`` sorted)."""
    n, h, w = stack.shape
    k = (n - 1) // 2
    col = np.empty((w, n), dtype=stack.dtype)
    for r in range(h):
        for i in range(n):
            for c in range(w):
                col[c, i] = stack[i, r, c]
        for c in range(w):
            out[r, c] = _kth_smallest(col[c], k)


def median_background(stack: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Per-pixel lower median of a (n_frames, rows, W) uint16 stack.

    For a row band, pass ``stack[:, r0:r1]`` of every frame (or just those rows
    read from disk); bands computed separately and stacked equal the whole.

    Returns
    -------
    out : (rows, W) uint16, ``np.sort(stack, 0)[(n - 1) // 2]``
    """
    check_frame("stack", stack, np.uint16, ndim=3)
    out = check_out("out", out, stack.shape[1:], np.uint16)
    median_background_kernel(np.ascontiguousarray(stack), out)
    return out


@njit(cache=True, nogil=True)
def subtract_background_kernel(frame, background, offset, out):
    """``out = max(frame - background - offset, 0)`` in uint16 (computed in int64)."""
    h, w = frame.shape
    for r in range(h):
        for c in range(w):
            v = np.int64(frame[r, c]) - np.int64(background[r, c]) - offset
            out[r, c] = v if v > 0 else 0


def subtract_background(frame, background, offset=0, out=None):
    """uint16 ``max(frame - background - offset, 0)``; see :func:`subtract_background_kernel`."""
    check_frame("frame", frame, np.uint16)
    check_frame("background", background, np.uint16)
    if background.shape != frame.shape:
        raise KernelArgumentError(
            f"background shape {background.shape} differs from frame shape {frame.shape}")
    out = check_out("out", out, frame.shape, np.uint16)
    subtract_background_kernel(frame, background, np.int64(offset), out)
    return out


class NFWorkspace:
    """Scratch arrays for :func:`reduce_frame`; reuse one per worker to avoid
    re-allocating ~150 MB per 2048x2048 frame."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.sub = np.empty(shape, np.uint16)
        self.med = np.empty(shape, np.uint16)
        self.log = np.empty(shape, np.float64)
        self.tmp_a = np.empty(shape, np.float64)
        self.tmp_b = np.empty(shape, np.float64)
        self.edges = np.empty(shape, np.uint8)
        self.filled = np.empty(shape, np.uint8)
        self.labels = np.empty(shape, np.int32)


@njit(cache=True, nogil=True)
def reduce_frame_kernel(frame, background, offset, size, lo, hi, g0, g2,
                        sub, med, log, tmp_a, tmp_b, edges, filled, labels):
    """Steps 2-7 of the module docstring into the caller's arrays; returns the
    number of labels (``labels`` holds them, 0 = no spot)."""
    subtract_background_kernel(frame, background, offset, sub)
    median_filter_kernel(sub, size, lo, hi, med)
    log_filter_kernel(med, g0, g2, tmp_a, tmp_b, log)
    zero_crossings_kernel(log, edges)
    fill_holes_kernel(edges, filled)
    return label8_kernel(filled, labels)


@njit(cache=True, nogil=True)
def sparse_kernel(labels, values, rows, cols, vals, labs):
    """Copy labelled pixels (raster order) into the 1-D outputs; returns the count.

    The outputs must hold at least ``np.count_nonzero(labels)`` entries.
    """
    h, w = labels.shape
    k = 0
    for r in range(h):
        for c in range(w):
            lab = labels[r, c]
            if lab != 0:
                rows[k] = r
                cols[k] = c
                vals[k] = values[r, c]
                labs[k] = lab
                k += 1
    return k


def reduce_frame(frame: np.ndarray, background: np.ndarray, params: NFParams = NFParams(),
                 work: NFWorkspace | None = None) -> NFSpots:
    """Reduce one NF frame to sparse labelled spot pixels.

    Parameters
    ----------
    frame, background : (H, W) uint16 arrays
    params : NFParams
    work : NFWorkspace, optional
        Scratch of the frame's shape, reused across calls; after the call it
        holds every intermediate image (``work.med``, ``work.log``, ...).

    Returns
    -------
    NFSpots
    """
    check_frame("frame", frame, np.uint16)
    check_frame("background", background, np.uint16)
    if background.shape != frame.shape:
        raise KernelArgumentError(
            f"background shape {background.shape} differs from frame shape {frame.shape}")
    if work is None:
        work = NFWorkspace(frame.shape)
    elif work.shape != frame.shape:
        raise KernelArgumentError(f"workspace shape {work.shape} differs from frame {frame.shape}")
    lo, hi = _NET3 if params.median_size == 3 else _NET5
    g0, g2 = log_weights(params.log_sigma, params.log_radius)
    n = reduce_frame_kernel(np.ascontiguousarray(frame), np.ascontiguousarray(background),
                            np.int64(params.offset), params.median_size, lo, hi, g0, g2,
                            work.sub, work.med, work.log, work.tmp_a, work.tmp_b,
                            work.edges, work.filled, work.labels)
    count = int(np.count_nonzero(work.filled))
    rows = np.empty(count, np.int32)
    cols = np.empty(count, np.int32)
    vals = np.empty(count, np.uint16)
    labs = np.empty(count, np.int32)
    sparse_kernel(work.labels, work.med, rows, cols, vals, labs)
    return NFSpots(rows, cols, vals, labs, int(n))
