"""4D-STEM kernels: virtual detectors and electron counting.

* Virtual detector: ``out[i, j] = sum(frames[i] * masks[j])`` for a stack
  of masks (bright field disk, annular dark field rings, ...), in float64
  from the frames' own values (any of :data:`FRAME_DTYPES`: every value of
  them is exact in float64).  Masks are turned into a sparse (CSR) list of
  their nonzero pixels once, so a ring costs only its own pixels per frame.
  :func:`circular_mask` makes disks and rings the way LiberTEM's
  ``masks.circular``/``masks.ring`` do (centre ``(cx, cy)`` in x, y order;
  ``r <= radius``, a ring ``radius_inner < r <= radius``).
* Electron counting: ``v = (frame - dark) / gain`` in float64 from the
  frame's own values; a pixel is an *event* when
  ``background_threshold < v < xray_threshold`` and ``v`` is strictly greater
  than each of its 8 neighbours that lie inside the frame.  Two rules for
  the neighbours: ``"raw"`` compares with their ``v`` as it is (an X-ray hit
  next to a pixel keeps it from being an event), ``"stempy"`` compares with
  their values after the thresholds blanked (set to 0) everything at or
  below the background and at or above the X-ray threshold, as stempy's
  ``electronCount`` does (in float32; integer frames without a gain map:
  ``trunc(frame - dark)``, the difference stored back into the integer frame
  as stempy 3.6 does).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .errors import KernelArgumentError, check_frame, check_out

__all__ = ["ring_mask", "circular_mask", "sparse_masks", "virtual_detector",
           "virtual_detector_kernel", "count_electrons", "count_electrons_kernel",
           "FRAME_DTYPES", "COUNT_RULES", "check_frame_dtype"]

#: Frame dtypes the 4D-STEM kernels take: every value exact in float64.
FRAME_DTYPES = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.int8,
                                           np.int16, np.int32, np.float32, np.float64))

#: Neighbour rules of :func:`count_electrons`.
COUNT_RULES = ("raw", "stempy")


def check_frame_dtype(name: str, dtype) -> np.dtype:
    """The native-byte-order dtype of ``dtype`` if it is one of :data:`FRAME_DTYPES`.

    Raises
    ------
    KernelArgumentError
        For any other dtype, saying why it is refused.
    """
    dt = np.dtype(dtype)
    native = dt.newbyteorder("=")
    if native in FRAME_DTYPES:
        return native
    why = ("64-bit integers above 2**53 are not exact in float64"
           if dt.kind in "ui" else "not a real-valued detector type"
           if dt.kind not in "f" else "half precision is not supported by the kernels")
    raise KernelArgumentError(
        f"{name}: frames of dtype {dt} are not supported ({why}); supported: "
        f"{', '.join(d.name for d in FRAME_DTYPES)} -- convert them yourself if the "
        "conversion keeps your values")


def ring_mask(shape, center, r_inner: float, r_outer: float, dtype=np.float32) -> np.ndarray:
    """Mask of pixels whose centre lies at distance ``r_inner <= d < r_outer`` from ``center``.

    ``center`` is (row, col) and the outer edge is excluded; :func:`circular_mask`
    follows LiberTEM's convention and is the one to prefer.  ``r_inner=0`` gives a
    disk.  Values are 1/0 in ``dtype``.
    """
    if not 0 <= r_inner < r_outer:
        raise KernelArgumentError(f"need 0 <= r_inner < r_outer, got {r_inner}, {r_outer}")
    rr, cc = np.indices(tuple(shape), dtype=np.float64)
    d = np.hypot(rr - center[0], cc - center[1])
    return ((d >= r_inner) & (d < r_outer)).astype(dtype)


def circular_mask(shape, cx: float, cy: float, radius: float, radius_inner: float = 0.0,
                  dtype=np.float32) -> np.ndarray:
    """A disk (``radius_inner == 0``) or ring mask in LiberTEM's convention.

    Parameters
    ----------
    shape : (rows, cols)
    cx, cy : float
        Centre in x (column), y (row) order, as LiberTEM's ``masks.circular(centerX,
        centerY, ...)``.
    radius, radius_inner : float
        A pixel is in the disk when ``(x-cx)**2 + (y-cy)**2 <= radius**2``; a ring
        (``radius_inner > 0``) is that disk minus the disk of ``radius_inner``:
        ``radius_inner < r <= radius`` (``masks.ring``).
    dtype : values 1/0 in this dtype

    Returns
    -------
    (rows, cols) array equal to LiberTEM's mask for the same arguments.
    """
    if not 0 <= radius_inner < radius:
        raise KernelArgumentError(
            f"need 0 <= radius_inner < radius, got {radius_inner}, {radius}")
    rows, cols = (int(s) for s in shape)
    y = np.arange(rows, dtype=np.float64)[:, None] - cy
    x = np.arange(cols, dtype=np.float64)[None, :] - cx
    d2 = y * y + x * x
    m = d2 <= radius * radius
    if radius_inner > 0:
        m &= ~(d2 <= radius_inner * radius_inner)
    return m.astype(dtype)


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
    """``out[i, j] = sum_k frames[i].flat[idx[k]] * wts[k]`` over mask ``j``'s CSR row
    (float64 accumulation of the frames' own values, whatever their dtype)."""
    n = frames.shape[0]
    m = ptr.shape[0] - 1
    for i in range(n):
        f = frames[i].ravel()
        for j in range(m):
            s = 0.0
            for k in range(ptr[j], ptr[j + 1]):
                s += np.float64(f[idx[k]]) * wts[k]
            out[i, j] = s


def _native(name: str, a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous in native byte order (values unchanged), dtype checked."""
    dt = check_frame_dtype(name, a.dtype)
    return np.ascontiguousarray(a, dtype=dt)


def virtual_detector(frames: np.ndarray, masks: np.ndarray,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Frame x mask dot products.

    Parameters
    ----------
    frames : (n, H, W) array of one of :data:`FRAME_DTYPES` (any byte order)
    masks : (m, H, W) array of weights (e.g. from :func:`circular_mask`)
    out : (n, m) float64 array, optional

    Returns
    -------
    out : (n, m) float64, equal to ``np.tensordot(frames.astype(float64), masks, ((1, 2), (1, 2)))``

    Raises
    ------
    KernelArgumentError
        A dtype outside :data:`FRAME_DTYPES`, or masks of another frame shape.
    """
    check_frame("frames", frames, ndim=3)
    frames = _native("frames", frames)
    check_frame("masks", masks, ndim=3)
    if masks.shape[1:] != frames.shape[1:]:
        raise KernelArgumentError(
            f"mask frame shape {masks.shape[1:]} differs from frame shape {frames.shape[1:]}")
    out = check_out("out", out, (frames.shape[0], masks.shape[0]), np.float64)
    ptr, idx, wts = sparse_masks(masks)
    virtual_detector_kernel(frames, ptr, idx, wts, out)
    return out


@njit(cache=True, nogil=True)
def count_electrons_kernel(frame, dark, inv_gain, bg_threshold, xray_threshold, blank,
                           truncate, single, work, out):
    """Write events (uint8 0/1) into ``out``; return their number.

    ``work`` (float64, frame shape) receives ``v = (frame - dark) * inv_gain``
    (in float32 if ``single``; ``trunc(frame - dark)`` if ``truncate``); with
    ``blank`` the values outside the thresholds are set to 0 before the
    local-maximum test (stempy's rule).
    """
    h, w = frame.shape
    for r in range(h):
        for c in range(w):
            if truncate:    # stempy's integer path: the difference stored as an integer
                v = np.trunc(np.float64(frame[r, c]) - dark[r, c])
            elif single:    # stempy's float32 arithmetic
                v32 = (np.float32(frame[r, c]) - np.float32(dark[r, c])) * \
                    np.float32(inv_gain[r, c])
                v = np.float64(v32)
            else:
                v = (np.float64(frame[r, c]) - dark[r, c]) * inv_gain[r, c]
            if blank and not (bg_threshold < v < xray_threshold):
                v = 0.0
            work[r, c] = v
    n = 0
    for r in range(h):
        for c in range(w):
            v = work[r, c]
            hit = 0
            if bg_threshold < v < xray_threshold:
                hit = 1
                for rr in range(max(r - 1, 0), min(r + 2, h)):
                    for cc in range(max(c - 1, 0), min(c + 2, w)):
                        if (rr != r or cc != c) and work[rr, cc] >= v:
                            hit = 0
            out[r, c] = hit
            n += hit
    return n


def count_electrons(frame: np.ndarray, dark, background_threshold: float,
                    xray_threshold: float, out: np.ndarray | None = None, *,
                    gain: np.ndarray | None = None, rule: str = "raw",
                    work: np.ndarray | None = None):
    """Electron events of one frame (see the module docstring).

    Parameters
    ----------
    frame : (H, W) array of one of :data:`FRAME_DTYPES` (counted on its own values)
    dark : (H, W) array or a number: the dark reference subtracted first
    background_threshold, xray_threshold : float, ``background < xray``
    out : (H, W) uint8, optional
    gain : (H, W) array, optional
        Per-pixel gain; the counted value is ``(frame - dark) / gain``, as stempy's
        ``electron_count(gain=...)`` (which inverts the map and multiplies).
    rule : ``"raw"`` or ``"stempy"``
        The neighbours of the local-maximum test: their values as they are, or
        blanked outside the thresholds first (stempy). With ``"stempy"`` the
        value is computed in float32 as stempy does, and for integer frames
        without a gain the difference is truncated to an integer (stempy stores
        ``frame - dark`` back into the integer frame) (``"raw"``: float64, exact).
    work : (H, W) float64, optional scratch array

    Returns
    -------
    (events, n) : uint8 0/1 map and the event count

    Raises
    ------
    KernelArgumentError
        Unsupported dtype, shapes that differ, ``background >= xray``, unknown rule,
        a gain with a zero or non-finite pixel.
    """
    check_frame("frame", frame)
    frame = _native("frame", frame)
    shape = frame.shape
    if np.ndim(dark) == 0:
        dark_a = np.full(shape, float(dark), np.float64)
    else:
        check_frame("dark", dark)
        if dark.shape != shape:
            raise KernelArgumentError(f"dark shape {dark.shape} differs from frame shape {shape}")
        dark_a = np.ascontiguousarray(dark, dtype=np.float64)
    if gain is None:
        inv = np.ones(shape, np.float64)
    else:
        check_frame("gain", gain)
        if gain.shape != shape:
            raise KernelArgumentError(f"gain shape {gain.shape} differs from frame shape {shape}")
        g = np.asarray(gain, np.float64)
        if not (np.isfinite(g).all() and (g != 0).all()):
            raise KernelArgumentError("gain: every pixel must be finite and nonzero "
                                      "(the counted value is (frame - dark) / gain)")
        inv = np.ascontiguousarray(1.0 / g)
    if not background_threshold < xray_threshold:
        raise KernelArgumentError(
            f"need background_threshold < xray_threshold, got {background_threshold}, "
            f"{xray_threshold}")
    if rule not in COUNT_RULES:
        raise KernelArgumentError(f"rule: expected one of {COUNT_RULES}, got {rule!r}")
    out = check_out("out", out, shape, np.uint8)
    work = check_out("work", work, shape, np.float64)
    truncate = rule == "stempy" and gain is None and frame.dtype.kind in "ui"
    n = count_electrons_kernel(frame, dark_a, inv, float(background_threshold),
                               float(xray_threshold), rule == "stempy", truncate,
                               rule == "stempy", work, out)
    return out, int(n)
