"""4D-STEM kernels: virtual detectors and electron counting.

* Virtual detector: ``out[i, j] = sum(frames[i] * masks[j])`` for a stack
  of masks (bright field disk, annular dark field rings, ...), in float64
  from the frames' own values (any of :data:`FRAME_DTYPES`: every value of
  them is exact in float64).  Masks are turned into runs of nonzero pixels
  along rows once (:func:`mask_runs`), so a ring costs only its own pixels per
  frame, read in order.
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
  as stempy 3.6 does).  :func:`count_stack` counts a stack of frames in one
  call (one pass over each frame, the events written as flat pixel indices);
  :func:`count_electrons` is one frame's events as a map.
* Per-frame sums: :func:`frame_sums` (integer frames exactly, in int64).

Frames are processed in batches: one call per partition of frames, not one per
frame; at 128x128 frames a Python call per frame cost more than the kernels.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .errors import KernelArgumentError, check_frame, check_out

__all__ = ["ring_mask", "circular_mask", "mask_runs", "virtual_detector",
           "virtual_detector_kernel", "count_electrons", "count_stack", "count_events_kernel",
           "frame_sums", "frame_sums_kernel",
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


def mask_runs(masks: np.ndarray):
    """Row runs ``(ptr, start, length, wts)`` of a (m, H, W) mask stack, for
    :func:`virtual_detector_kernel`: mask ``j``'s runs are ``ptr[j]:ptr[j + 1]``, run ``k``
    covers the flat pixels ``start[k] .. start[k] + length[k] - 1`` of a frame, and ``wts``
    holds the weights of every run's pixels one run after the other (float64)."""
    check_frame("masks", masks, ndim=3)
    m, h, w = masks.shape
    nz = masks.reshape(m, h, w) != 0
    ptr = np.zeros(m + 1, np.int64)
    starts, lens, wts = [], [], []
    for j in range(m):
        # a run starts where a nonzero pixel follows a zero one (or a row's start)
        edge = np.diff(np.pad(nz[j], ((0, 0), (1, 1))).astype(np.int8), axis=1)
        r0, c0 = np.nonzero(edge == 1)
        r1, c1 = np.nonzero(edge == -1)
        st = r0.astype(np.int64) * w + c0
        starts.append(st)
        lens.append((c1 - c0).astype(np.int64))
        wts.append(masks[j][nz[j]].astype(np.float64))      # row-major: the runs' order
        ptr[j + 1] = ptr[j] + st.size
    return ptr, np.concatenate(starts), np.concatenate(lens), np.concatenate(wts)


@njit(cache=True, nogil=True)
def virtual_detector_kernel(frames, ptr, start, length, wts, out):
    """``out[i, j] = sum of frames[i].flat[p] * w`` over mask ``j``'s runs (:func:`mask_runs`),
    float64 from the frames' own values, whatever their dtype.

    Each run is summed into four partial sums (pixels ``t % 4``), added as
    ``(s0 + s1) + (s2 + s3)`` at the end: a fixed order, so the result never depends on
    the machine; the four independent additions keep the FPU busy (one chain of dependent
    additions ran at a third of the speed)."""
    n = frames.shape[0]
    m = ptr.shape[0] - 1
    for i in range(n):
        f = frames[i].ravel()
        o = 0                   # the weights of the masks' runs follow each other
        for j in range(m):
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            for k in range(ptr[j], ptr[j + 1]):
                p = start[k]
                ln = length[k]
                t = 0
                while t + 4 <= ln:
                    s0 += np.float64(f[p + t]) * wts[o + t]
                    s1 += np.float64(f[p + t + 1]) * wts[o + t + 1]
                    s2 += np.float64(f[p + t + 2]) * wts[o + t + 2]
                    s3 += np.float64(f[p + t + 3]) * wts[o + t + 3]
                    t += 4
                while t < ln:
                    s0 += np.float64(f[p + t]) * wts[o + t]
                    t += 1
                o += ln
            out[i, j] = (s0 + s1) + (s2 + s3)


def _native(name: str, a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous in native byte order (values unchanged), dtype checked."""
    dt = check_frame_dtype(name, a.dtype)
    return np.ascontiguousarray(a, dtype=dt)


def virtual_detector(frames: np.ndarray, masks: np.ndarray,
                     out: np.ndarray | None = None, runs: tuple | None = None) -> np.ndarray:
    """Frame x mask dot products.

    Parameters
    ----------
    frames : (n, H, W) array of one of :data:`FRAME_DTYPES` (any byte order)
    masks : (m, H, W) array of weights (e.g. from :func:`circular_mask`)
    out : (n, m) float64 array, optional
    runs : :func:`mask_runs` of ``masks``, optional
        Made once by a caller that applies the same masks to many stacks (else made here).

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
    virtual_detector_kernel(frames, *(mask_runs(masks) if runs is None else runs), out)
    return out


@njit(cache=True, nogil=True)
def _count_row(row, dark, inv_gain, has_gain, bg_threshold, xray_threshold, blank, truncate,
               single, v):
    """``v[c]``: the counted value of ``row[c]`` (see :func:`count_events_kernel`); one
    plain loop per case, so each compiles to straight (vectorised) code."""
    w = row.shape[0]
    if truncate:        # stempy's integer path: the difference stored as an integer
        for c in range(w):
            v[c] = np.trunc(np.float64(row[c]) - dark[c])
    elif single and has_gain:      # stempy's float32 arithmetic
        for c in range(w):
            v[c] = np.float64((np.float32(row[c]) - np.float32(dark[c])) *
                              np.float32(inv_gain[c]))
    elif single:
        for c in range(w):
            v[c] = np.float64(np.float32(row[c]) - np.float32(dark[c]))
    elif has_gain:
        for c in range(w):
            v[c] = (np.float64(row[c]) - dark[c]) * inv_gain[c]
    else:
        for c in range(w):
            v[c] = np.float64(row[c]) - dark[c]
    if blank:
        for c in range(w):
            x = v[c]
            v[c] = x if bg_threshold < x < xray_threshold else 0.0


@njit(cache=True, nogil=True)
def count_events_kernel(frames, first, dark, inv_gain, has_gain, bg_threshold, xray_threshold,
                        blank, truncate, single, rows, counts, events, filled):
    """Count the events of ``frames[first:]`` (n, H, W) into ``events`` (the flat pixel
    index ``r * W + c`` of each, uint32, frame after frame, ascending in each frame)
    from ``events[filled]`` on, and their number per frame into ``counts``.

    ``v = (frame - dark) * inv_gain`` in float64 (without the product unless
    ``has_gain``; in float32 if ``single``; ``trunc(frame - dark)`` if ``truncate``);
    with ``blank`` the values outside the thresholds are set to 0 before the
    local-maximum test (stempy's rule). ``rows`` (3, W) float64 holds the values of
    three rows at a time: one pass over each frame, nothing of the frame's size written.

    Stops before a frame whose events might not fit (``ceil(H/2) * ceil(W/2)``, the
    most a frame can hold: no two events touch). Returns ``(next frame, filled)``.
    """
    n, h, w = frames.shape
    most = ((h + 1) // 2) * ((w + 1) // 2)
    for i in range(first, n):
        if filled + most > events.shape[0]:
            return i, filled
        f = frames[i]
        start = filled
        _count_row(f[0], dark[0], inv_gain[0], has_gain, bg_threshold, xray_threshold,
                   blank, truncate, single, rows[0])
        for r in range(h):
            if r + 1 < h:
                _count_row(f[r + 1], dark[r + 1], inv_gain[r + 1], has_gain, bg_threshold,
                           xray_threshold, blank, truncate, single, rows[(r + 1) % 3])
            cur = rows[r % 3]
            up = rows[(r + 2) % 3]
            dn = rows[(r + 1) % 3]
            for c in range(w):
                v = cur[c]
                if not (bg_threshold < v < xray_threshold):
                    continue
                if (c > 0 and cur[c - 1] >= v) or (c + 1 < w and cur[c + 1] >= v):
                    continue
                hit = True
                c0 = max(c - 1, 0)
                c1 = min(c + 2, w)
                if r > 0:
                    for cc in range(c0, c1):
                        if up[cc] >= v:
                            hit = False
                if hit and r + 1 < h:
                    for cc in range(c0, c1):
                        if dn[cc] >= v:
                            hit = False
                if hit:
                    events[filled] = r * w + c
                    filled += 1
        counts[i] = filled - start
    return n, filled


def count_stack(frames: np.ndarray, dark, background_threshold: float, xray_threshold: float,
                gain: np.ndarray | None = None, rule: str = "raw"):
    """Electron events of a stack of frames (see the module docstring).

    Parameters
    ----------
    frames : (n, H, W) array of one of :data:`FRAME_DTYPES` (counted on its own values)
    dark : (H, W) array or a number: the dark reference subtracted first
    background_threshold, xray_threshold : float, ``background < xray``
    gain : (H, W) array, optional
        Per-pixel gain; the counted value is ``(frame - dark) / gain``, as stempy's
        ``electron_count(gain=...)`` (which inverts the map and multiplies).
    rule : ``"raw"`` or ``"stempy"``
        The neighbours of the local-maximum test: their values as they are, or
        blanked outside the thresholds first (stempy). With ``"stempy"`` the
        value is computed in float32 as stempy does, and for integer frames
        without a gain the difference is truncated to an integer (stempy stores
        ``frame - dark`` back into the integer frame) (``"raw"``: float64, exact).

    Returns
    -------
    (counts, events) : int64 (n,) events per frame, and uint32 the flat pixel index
        ``row * W + col`` of every event, frame after frame, ascending in each frame

    Raises
    ------
    KernelArgumentError
        Unsupported dtype, shapes that differ, ``background >= xray``, unknown rule,
        a gain with a zero or non-finite pixel.
    """
    check_frame("frames", frames, ndim=3)
    frames = _native("frames", frames)
    shape = frames.shape[1:]
    if np.ndim(dark) == 0:
        dark_a = np.full(shape, float(dark), np.float64)
    else:
        check_frame("dark", dark)
        if dark.shape != shape:
            raise KernelArgumentError(f"dark shape {dark.shape} differs from frame shape {shape}")
        dark_a = np.ascontiguousarray(dark, dtype=np.float64)
    if gain is None:
        inv = np.ones((shape[0], 1), np.float64)        # not read (has_gain False)
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
    n, (h, w) = len(frames), shape
    truncate = rule == "stempy" and gain is None and frames.dtype.kind in "ui"
    counts = np.zeros(n, np.int64)
    # room for a few frames' worth of the most events, grown when a frame might not fit
    most = ((h + 1) // 2) * ((w + 1) // 2)
    events = np.empty(max(most, min(n * h * w // 64, 4 * most)), np.uint32)
    rows = np.empty((3, w), np.float64)
    done, filled = 0, 0
    while done < n:
        done, filled = count_events_kernel(
            frames, done, dark_a, inv, gain is not None, float(background_threshold),
            float(xray_threshold), rule == "stempy", truncate, rule == "stempy", rows, counts,
            events, filled)
        if done < n:
            events = np.concatenate((events[:filled], np.empty(2 * len(events), np.uint32)))
    return counts, events[:filled].copy()


def count_electrons(frame: np.ndarray, dark, background_threshold: float,
                    xray_threshold: float, out: np.ndarray | None = None, *,
                    gain: np.ndarray | None = None, rule: str = "raw"):
    """Electron events of one frame as a map: :func:`count_stack` of ``frame[None]``.

    Parameters
    ----------
    frame : (H, W) array of one of :data:`FRAME_DTYPES`
    dark, background_threshold, xray_threshold, gain, rule : as :func:`count_stack`
    out : (H, W) uint8, optional

    Returns
    -------
    (events, n) : uint8 0/1 map and the event count

    Raises
    ------
    KernelArgumentError
        As :func:`count_stack`.
    """
    check_frame("frame", frame)
    counts, flat = count_stack(frame[None], dark, background_threshold, xray_threshold,
                               gain=gain, rule=rule)
    out = check_out("out", out, frame.shape, np.uint8)
    out[...] = 0
    out.reshape(-1)[flat] = 1
    return out, int(counts[0])


@njit(cache=True, nogil=True)
def frame_sums_kernel(frames, out):
    """``out[i]``: the sum of ``frames[i]``'s integer values, accumulated exactly in int64."""
    for i in range(frames.shape[0]):
        f = frames[i].ravel()
        s0 = np.int64(0)
        s1 = np.int64(0)
        s2 = np.int64(0)
        s3 = np.int64(0)
        t = 0
        n = f.shape[0]
        while t + 4 <= n:
            s0 += np.int64(f[t])
            s1 += np.int64(f[t + 1])
            s2 += np.int64(f[t + 2])
            s3 += np.int64(f[t + 3])
            t += 4
        while t < n:
            s0 += np.int64(f[t])
            t += 1
        out[i] = np.float64((s0 + s1) + (s2 + s3))


def frame_sums(frames: np.ndarray) -> np.ndarray:
    """The sum of every frame's pixels, float64 from the frames' own values.

    Integer frames (at most 32-bit: a frame's sum is far below 2**53, so exact in
    float64) are summed exactly in int64 by :func:`frame_sums_kernel`; float frames by
    NumPy (pairwise), as before, so their last bits do not change.
    """
    check_frame("frames", frames, ndim=3)
    frames = _native("frames", frames)
    if frames.dtype.kind == "f":
        return frames.reshape(len(frames), -1).sum(axis=1, dtype=np.float64)
    out = np.empty(len(frames), np.float64)
    frame_sums_kernel(frames, out)
    return out
