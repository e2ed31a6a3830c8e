"""FF-HEDM peak search (after MIDAS's stage 1), as flat kernels plus one wrapper.

Definitions (the tests' NumPy/SciPy reference implements exactly these):

* ``sub = max(frame - dark, 0)`` in float32; a pixel is *above* when
  ``sub > threshold``;
* regions: 8-connected components of above pixels, kept when
  ``min_pixels <= size <= max_pixels``;
* a *maximum pixel* is a pixel of a kept region with no 8-neighbour (inside
  the image) whose ``sub`` is strictly greater; 8-adjacent maximum pixels are
  necessarily equal and form one *peak* (a plateau), located at its first
  pixel in raster order;
* every pixel of a region belongs to its nearest peak (squared Euclidean
  distance to the peak location; ties go to the lower peak id), so a region
  with several maxima is split among them;
* per peak: intensity-weighted centroid, integrated intensity (sum of
  ``sub``), maximum ``sub``, pixel count and bounding box of its pixels.

Peaks are numbered 1..n in raster order of their location.  The result is a
structured array of :data:`PEAK_DTYPE`; tables of many frames concatenate
with ``np.concatenate`` and write directly to HDF5 or CSV.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .errors import KernelArgumentError, check_frame
from .label import label8_kernel

__all__ = ["FFParams", "PEAK_DTYPE", "find_peaks", "dark_threshold_kernel",
           "maxima_kernel", "peak_stats_kernel"]

PEAK_DTYPE = np.dtype([
    ("frame", np.int32), ("peak", np.int32), ("region", np.int32), ("n_in_region", np.int32),
    ("row", np.float64), ("col", np.float64), ("peak_row", np.int32), ("peak_col", np.int32),
    ("integrated", np.float64), ("max_intensity", np.float64), ("n_pixels", np.int32),
    ("row_min", np.int32), ("row_max", np.int32), ("col_min", np.int32), ("col_max", np.int32)])


@dataclass(frozen=True)
class FFParams:
    """threshold (counts above dark, >= 0) and region size limits in pixels."""

    threshold: float = 50.0
    min_pixels: int = 2
    max_pixels: int = 10_000

    def __post_init__(self):
        if not (np.isfinite(self.threshold) and self.threshold >= 0):
            raise KernelArgumentError(f"threshold must be finite and >= 0, got {self.threshold!r}")
        if not (isinstance(self.min_pixels, (int, np.integer))
                and isinstance(self.max_pixels, (int, np.integer))
                and 1 <= self.min_pixels <= self.max_pixels):
            raise KernelArgumentError(
                "need integers 1 <= min_pixels <= max_pixels, got "
                f"{self.min_pixels!r}, {self.max_pixels!r}")


@njit(cache=True, nogil=True)
def dark_threshold_kernel(frame, dark, threshold, sub, above):
    """``sub = max(frame - dark, 0)`` (float32), ``above = sub > threshold`` (uint8)."""
    h, w = frame.shape
    for r in range(h):
        for c in range(w):
            v = np.float32(frame[r, c]) - dark[r, c]
            if v < 0:
                v = np.float32(0.0)
            sub[r, c] = v
            above[r, c] = 1 if v > threshold else 0


@njit(cache=True, nogil=True)
def maxima_kernel(sub, labels, n_regions, min_px, max_px, maxmask):
    """Mark (uint8) the maximum pixels of kept regions; returns the region sizes."""
    h, w = sub.shape
    size = np.zeros(n_regions + 1, dtype=np.int64)
    for r in range(h):
        for c in range(w):
            size[labels[r, c]] += 1
    for r in range(h):
        for c in range(w):
            lab = labels[r, c]
            maxmask[r, c] = 0
            if lab == 0 or size[lab] < min_px or size[lab] > max_px:
                continue
            v = sub[r, c]
            top = 1
            for rr in range(max(r - 1, 0), min(r + 2, h)):
                for cc in range(max(c - 1, 0), min(c + 2, w)):
                    if sub[rr, cc] > v:
                        top = 0
            maxmask[r, c] = top
    return size


@njit(cache=True, nogil=True)
def peak_stats_kernel(sub, labels, n_regions, peaklab, n_peaks, fstats, istats):
    """Assign region pixels to peaks and accumulate per-peak statistics.

    ``fstats`` (n_peaks, 4) float64: sum, sum*row, sum*col, max.
    ``istats`` (n_peaks, 9) int32: region, n_in_region, peak_row, peak_col,
    n_pixels, row_min, row_max, col_min, col_max.
    """
    h, w = sub.shape
    for k in range(n_peaks):
        fstats[k, 0] = 0.0
        fstats[k, 1] = 0.0
        fstats[k, 2] = 0.0
        fstats[k, 3] = -1.0
        istats[k, 0] = -1
        istats[k, 4] = 0
        istats[k, 5] = h
        istats[k, 6] = -1
        istats[k, 7] = w
        istats[k, 8] = -1
    # Peak location = first pixel in raster order; region of each peak.
    for r in range(h):
        for c in range(w):
            p = peaklab[r, c]
            if p != 0 and istats[p - 1, 0] < 0:
                istats[p - 1, 0] = labels[r, c]
                istats[p - 1, 2] = r
                istats[p - 1, 3] = c
    # Peaks of each region, as CSR (peak ids ascending within a region).
    start = np.zeros(n_regions + 2, dtype=np.int64)
    for k in range(n_peaks):
        start[istats[k, 0] + 1] += 1
    for g in range(n_regions + 1):
        start[g + 1] += start[g]
    members = np.empty(n_peaks, dtype=np.int64)
    fill = start.copy()
    for k in range(n_peaks):
        g = istats[k, 0]
        members[fill[g]] = k
        fill[g] += 1
    for k in range(n_peaks):
        g = istats[k, 0]
        istats[k, 1] = start[g + 1] - start[g]
    for r in range(h):
        for c in range(w):
            g = labels[r, c]
            if g == 0 or start[g + 1] == start[g]:
                continue
            best = -1
            bestd = 0
            for m in range(start[g], start[g + 1]):
                k = members[m]
                dr = r - istats[k, 2]
                dc = c - istats[k, 3]
                d = dr * dr + dc * dc
                if best < 0 or d < bestd:
                    best = k
                    bestd = d
            v = np.float64(sub[r, c])
            fstats[best, 0] += v
            fstats[best, 1] += v * r
            fstats[best, 2] += v * c
            if v > fstats[best, 3]:
                fstats[best, 3] = v
            istats[best, 4] += 1
            istats[best, 5] = min(istats[best, 5], r)
            istats[best, 6] = max(istats[best, 6], r)
            istats[best, 7] = min(istats[best, 7], c)
            istats[best, 8] = max(istats[best, 8], c)


def find_peaks(frame: np.ndarray, dark: np.ndarray, params: FFParams = FFParams(),
               frame_index: int = 0) -> np.ndarray:
    """Peak table of one FF frame (see the module docstring for definitions).

    Parameters
    ----------
    frame : (H, W) uint16 array
    dark : (H, W) array, converted to float32 (e.g. the mean of dark frames)
    params : FFParams
    frame_index : int
        Stored in the ``frame`` column.

    Returns
    -------
    peaks : structured array of :data:`PEAK_DTYPE`, sorted by ``peak`` (1..n)
    """
    check_frame("frame", frame, np.uint16)
    check_frame("dark", dark)
    if dark.shape != frame.shape:
        raise KernelArgumentError(f"dark shape {dark.shape} differs from frame shape {frame.shape}")
    frame = np.ascontiguousarray(frame)
    dark = np.ascontiguousarray(dark, dtype=np.float32)
    sub = np.empty(frame.shape, np.float32)
    above = np.empty(frame.shape, np.uint8)
    dark_threshold_kernel(frame, dark, np.float32(params.threshold), sub, above)
    labels = np.empty(frame.shape, np.int32)
    n_regions = label8_kernel(above, labels)
    maxmask = above  # reused: `above` is no longer needed
    maxima_kernel(sub, labels, n_regions, params.min_pixels, params.max_pixels, maxmask)
    peaklab = np.empty(frame.shape, np.int32)
    n_peaks = label8_kernel(maxmask, peaklab)
    fstats = np.empty((n_peaks, 4), np.float64)
    istats = np.empty((n_peaks, 9), np.int32)
    peak_stats_kernel(sub, labels, n_regions, peaklab, n_peaks, fstats, istats)
    out = np.zeros(n_peaks, dtype=PEAK_DTYPE)
    out["frame"] = frame_index
    out["peak"] = np.arange(1, n_peaks + 1)
    out["region"] = istats[:, 0]
    out["n_in_region"] = istats[:, 1]
    out["peak_row"] = istats[:, 2]
    out["peak_col"] = istats[:, 3]
    out["integrated"] = fstats[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["row"] = fstats[:, 1] / fstats[:, 0]
        out["col"] = fstats[:, 2] / fstats[:, 0]
    out["max_intensity"] = fstats[:, 3]
    out["n_pixels"] = istats[:, 4]
    out["row_min"] = istats[:, 5]
    out["row_max"] = istats[:, 6]
    out["col_min"] = istats[:, 7]
    out["col_max"] = istats[:, 8]
    return out
