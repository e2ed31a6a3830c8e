"""4D-STEM kernels: virtual detectors and electron counting.

* Virtual detector: ``out[i, j] = sum(frames[i] * masks[j])`` for a stack
  of masks (bright field disk, annular dark field rings, ...).  Masks are
  turned into a sparse (CSR) list of their nonzero pixels once, so a ring
  costs only its own pixels per frame.
* Electron counting: ``v = frame - dark`` (float32); a pixel is an *event*
  when ``background_threshold < v < xray_threshold`` and ``v`` is strictly
  greater than each of its 8 neighbours that lie inside the frame.  Values
  at or above the X-ray threshold are direct X-ray hits, not electrons.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .errors import KernelArgumentError, check_frame, check_out

__all__ = ["ring_mask", "sparse_masks", "virtual_detector", "virtual_detector_kernel",
           "count_electrons", "count_electrons_kernel"]


def ring_mask(shape, center, r_inner: float, r_outer: float, dtype=np.float32) -> np.ndarray:
    """Mask of pixels whose centre lies at distance ``r_inner <= d < r_outer`` from ``center``.

    ``r_inner=0`` gives a disk (bright-field detector).  Values are 1/0 in ``dtype``.
    """
    if not 0 <= r_inner < r_outer:
        raise KernelArgumentError(f"need 0 <= r_inner < r_outer, got {r_inner}, {r_outer}")
    rr, cc = np.indices(tuple(shape), dtype=np.float64)
    d = np.hypot(rr - center[0], cc - center[1])
    return ((d >= r_inner) & (d < r_outer)).astype(dtype)


def sparse_masks(masks: np.ndarray):
    """CSR ``(ptr, idx, wts)`` of a (m, H, W) mask stack, for :func:`virtual_detector_kernel`."""
    check_frame("masks", masks, ndim=3)
    flat = masks.reshape(masks.shape[0], -1)
    ptr = np.zeros(masks.shape[0] + 1, np.int64)
    idx_parts, wts_parts = [], []
    for j, mk in enumerate(flat):
        nz = np.flatnonzero(mk)
        idx_parts.append(nz)
        wts_parts.append(mk[nz].astype(np.float64))
        ptr[j + 1] = ptr[j] + nz.size
    return ptr, np.concatenate(idx_parts).astype(np.int64), np.concatenate(wts_parts)


@njit(cache=True, nogil=True)
def virtual_detector_kernel(frames, ptr, idx, wts, out):
    """``out[i, j] = sum_k frames[i].flat[idx[k]] * wts[k]`` over mask ``j``'s CSR row."""
    n = frames.shape[0]
    m = ptr.shape[0] - 1
    for i in range(n):
        f = frames[i].ravel()
        for j in range(m):
            s = 0.0
            for k in range(ptr[j], ptr[j + 1]):
                s += f[idx[k]] * wts[k]
            out[i, j] = s


def virtual_detector(frames: np.ndarray, masks: np.ndarray,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Frame x mask dot products.

    Parameters
    ----------
    frames : (n, H, W) uint16 or float32 array (one scan row, a partition, ...)
    masks : (m, H, W) array of weights (e.g. from :func:`ring_mask`)
    out : (n, m) float64 array, optional

    Returns
    -------
    out : (n, m) float64, equal to ``np.tensordot(frames, masks, ((1, 2), (1, 2)))``
    """
    check_frame("frames", frames, ndim=3)
    if frames.dtype not in (np.uint16, np.float32):
        raise KernelArgumentError(f"frames: expected uint16 or float32, got {frames.dtype}")
    check_frame("masks", masks, ndim=3)
    if masks.shape[1:] != frames.shape[1:]:
        raise KernelArgumentError(
            f"mask frame shape {masks.shape[1:]} differs from frame shape {frames.shape[1:]}")
    out = check_out("out", out, (frames.shape[0], masks.shape[0]), np.float64)
    ptr, idx, wts = sparse_masks(masks)
    virtual_detector_kernel(np.ascontiguousarray(frames), ptr, idx, wts, out)
    return out


@njit(cache=True, nogil=True)
def count_electrons_kernel(frame, dark, bg_threshold, xray_threshold, out):
    """Write events (uint8 0/1) into ``out``; return their number."""
    h, w = frame.shape
    n = 0
    for r in range(h):
        for c in range(w):
            v = np.float32(frame[r, c]) - dark[r, c]
            hit = 0
            if bg_threshold < v < xray_threshold:
                hit = 1
                for rr in range(max(r - 1, 0), min(r + 2, h)):
                    for cc in range(max(c - 1, 0), min(c + 2, w)):
                        if (rr != r or cc != c) and \
                                np.float32(frame[rr, cc]) - dark[rr, cc] >= v:
                            hit = 0
            out[r, c] = hit
            n += hit
    return n


def count_electrons(frame: np.ndarray, dark: np.ndarray, background_threshold: float,
                    xray_threshold: float, out: np.ndarray | None = None):
    """Electron events of one frame (see the module docstring).

    Parameters
    ----------
    frame : (H, W) uint16
    dark : (H, W), converted to float32
    background_threshold, xray_threshold : float, ``background < xray``
    out : (H, W) uint8, optional

    Returns
    -------
    (events, n) : uint8 0/1 map and the event count
    """
    check_frame("frame", frame, np.uint16)
    check_frame("dark", dark)
    if dark.shape != frame.shape:
        raise KernelArgumentError(f"dark shape {dark.shape} differs from frame shape {frame.shape}")
    if not background_threshold < xray_threshold:
        raise KernelArgumentError(
            f"need background_threshold < xray_threshold, got {background_threshold}, "
            f"{xray_threshold}")
    out = check_out("out", out, frame.shape, np.uint8)
    n = count_electrons_kernel(np.ascontiguousarray(frame),
                               np.ascontiguousarray(dark, dtype=np.float32),
                               np.float32(background_threshold), np.float32(xray_threshold), out)
    return out, int(n)
