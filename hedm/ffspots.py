"""FF-HEDM spots: stage 1's per-frame peaks merged across frames, with omega, eta, 2theta.

A grain's reflection crosses the Ewald sphere over an omega interval, so its peak is seen
on one or a few consecutive frames. :func:`merge_peaks` links a peak of frame ``f`` to
the nearest peak of frame ``f + 1`` within ``MergePixels`` (mutual nearest neighbours,
``scipy.spatial.cKDTree``), and each connected chain (``scipy.sparse.csgraph``) is one
spot. On a full rotation (``n_frames * |OmegaStep| = 360``) the last frame is followed
by the first, so a spot seen across the end and the start of the sweep is one spot too.

A reflection's intensity over omega rises and falls once (its rocking curve). Where
spots of two grains fall on nearly the same pixels a few frames apart, the chain links
them; a chain whose intensity falls to a *valley* -- a frame below ``VALLEY`` times the
smaller of the maxima on either side -- and rises again is cut there, the valley frame
going with its brighter neighbour. (In the test sweep of 30 grains on 192 x 192 pixels
one spot in seven is such a chain; uncut, its omega is frames off and matches no
prediction, and a grain with many of them is not indexed.)

Per spot: the integrated intensity (sum over its peaks), the intensity-weighted centroid
(pixels), omega as the intensity-weighted circular mean of its frames' omegas (MIDAS's
stamps ``OmegaStart + frame OmegaStep``, :func:`kernels.geometry.frame_omega`), and, from
the detector geometry (:mod:`kernels.ffmodel`), the lab point of the centroid, ``eta``,
``2theta``, the ring radius at ``Lsd`` (``Lsd tan 2theta``, um) and the ring it lies on (the
nearest within ``Width``; 0: on none). The table is :data:`SPOT_DTYPE`, ``id`` from 0 in order.
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np

__all__ = ["SPOT_DTYPE", "VALLEY", "merge_peaks", "split_at_valleys", "spots_from_peaks"]

#: A chain is cut at a frame whose intensity is below this fraction of the smaller
#: maximum on either side (one rocking curve does not dip; noise dips less than this).
VALLEY = 0.5

#: One row per merged spot.
SPOT_DTYPE = np.dtype([("id", np.int64), ("omega", np.float64), ("eta", np.float64),
                       ("two_theta", np.float64), ("radius", np.float64),
                       ("y", np.float64), ("z", np.float64), ("intensity", np.float64),
                       ("n_frames", np.int32), ("first_frame", np.int32), ("ring", np.int32),
                       ("lab_x", np.float64), ("lab_y", np.float64), ("lab_z", np.float64)])


def split_at_valleys(intensity: np.ndarray, valley: float = VALLEY) -> np.ndarray:
    """Where to cut one chain of peaks (intensities in frame order): a boolean per link
    ``i -> i + 1``, True to cut it (module docstring)."""
    v = np.asarray(intensity, np.float64)
    cut = np.zeros(max(len(v) - 1, 0), bool)
    start = 0
    for i in range(1, len(v) - 1):
        if not (v[i] < v[i - 1] and v[i] <= v[i + 1]):
            continue
        left = v[start:i].max()
        j = i + 1                        # the right maximum: the top of the rise after i
        while j + 1 < len(v) and v[j + 1] >= v[j]:
            j += 1
        right = v[i + 1:j + 1].max()
        if v[i] < valley * min(left, right):
            if v[i - 1] >= v[i + 1]:
                cut[i] = True            # the valley frame stays with the left curve
            else:
                cut[i - 1] = True
            start = i
    return cut


def merge_peaks(frame: np.ndarray, y: np.ndarray, z: np.ndarray, n_frames: int,
                max_px: float, wrap: bool, intensity: np.ndarray | None = None) -> np.ndarray:
    """Spot label (0..k-1) of each peak: chains of peaks on consecutive frames.

    ``frame`` are sweep positions ``0..n_frames-1``; ``wrap``: frame ``n_frames - 1`` is
    followed by frame 0 (a full rotation). With ``intensity`` (per peak), chains are cut
    at valleys of their intensity (:func:`split_at_valleys`).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    n = len(frame)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(frame, kind="stable")
    fs = frame[order]
    bounds = np.searchsorted(fs, np.arange(n_frames + 1))
    pts = np.c_[y, z]
    rows, cols = [], []
    last = n_frames if wrap else n_frames - 1
    for f in range(last):
        g = (f + 1) % n_frames
        a = order[bounds[f]:bounds[f + 1]]
        b = order[bounds[g]:bounds[g + 1]]
        if len(a) == 0 or len(b) == 0 or (g == f):
            continue
        da, ia = cKDTree(pts[b]).query(pts[a], distance_upper_bound=max_px)
        db, ib = cKDTree(pts[a]).query(pts[b], distance_upper_bound=max_px)
        for i, (d, j) in enumerate(zip(da, ia)):
            if np.isfinite(d) and ib[j] == i:            # mutual nearest neighbours
                rows.append(a[i])
                cols.append(b[j])
    if intensity is not None and rows:
        rows, cols = _cut_valleys(np.asarray(rows), np.asarray(cols), n,
                                  np.asarray(intensity, np.float64))
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    return connected_components(graph, directed=False)[1].astype(np.int64)


def _cut_valleys(rows: np.ndarray, cols: np.ndarray, n: int, intensity: np.ndarray):
    """The links ``rows[i] -> cols[i]`` (each peak at most one of each) without those
    :func:`split_at_valleys` cuts in each chain."""
    nxt = np.full(n, -1, np.int64)
    prv = np.full(n, -1, np.int64)
    nxt[rows] = cols
    prv[cols] = rows
    cut = set()
    seen = np.zeros(n, bool)
    heads = [i for i in np.unique(rows) if prv[i] < 0]
    # a chain round the whole turn has no head: start it anywhere
    for start in heads + [int(i) for i in rows]:
        if seen[start]:
            continue
        chain = [int(start)]
        seen[start] = True
        while nxt[chain[-1]] >= 0 and not seen[nxt[chain[-1]]]:
            chain.append(int(nxt[chain[-1]]))
            seen[chain[-1]] = True
        if len(chain) < 3:
            continue
        for k in np.flatnonzero(split_at_valleys(intensity[chain])):
            cut.add(chain[k])
    keep = np.array([r not in cut for r in rows.tolist()], bool)
    return rows[keep].tolist(), cols[keep].tolist()


def spots_from_peaks(peaks: np.ndarray, first_frame: int, n_frames: int, p: Dict[str, Any],
                     arrays: Any, rings: np.ndarray) -> np.ndarray:
    """The spot table of stage 1's ``peaks`` (:data:`kernels.ff.PEAK_DTYPE`, frame numbers
    from ``first_frame``): merged (:func:`merge_peaks`), located and given a ring.

    ``arrays`` is the sweep's :class:`kernels.ffmodel.FFArrays`, ``rings`` the rows
    ``(ring, two_theta, radius)`` of :func:`hedm.ffparams.ring_table`.
    """
    from kernels.ffmodel import pixel_to_lab_kernel
    from kernels.geometry import eta_kernel, frame_omega

    pos = peaks["frame"].astype(np.int64) - int(first_frame)
    keep = (pos >= 0) & (pos < n_frames) & (peaks["integrated"] > 0)
    pk = peaks[keep]
    pos = pos[keep]
    step = float(p["OmegaStep"])
    wrap = abs(abs(n_frames * step) - 360.0) < 1e-6 * abs(step)
    label = merge_peaks(pos, pk["col"], pk["row"], n_frames, float(p["MergePixels"]), wrap,
                        pk["integrated"])
    k = int(label.max()) + 1 if len(label) else 0
    w = pk["integrated"].astype(np.float64)
    tot = np.bincount(label, w, k)
    yc = np.bincount(label, w * pk["col"], k) / tot
    zc = np.bincount(label, w * pk["row"], k) / tot
    ome = np.radians(frame_omega(pos, float(p["OmegaStart"]), step))
    s = np.bincount(label, w * np.sin(ome), k)
    c = np.bincount(label, w * np.cos(ome), k)
    out = np.zeros(k, SPOT_DTYPE)
    out["id"] = np.arange(k)
    out["omega"] = np.degrees(np.arctan2(s, c))
    out["intensity"] = tot
    out["y"] = yc
    out["z"] = zc
    out["n_frames"] = np.bincount(label, None, k)
    first = np.full(k, n_frames, np.int64)
    np.minimum.at(first, label, pos)
    out["first_frame"] = first
    lab = np.empty((k, 3))
    pixel_to_lab_kernel(np.ascontiguousarray(yc), np.ascontiguousarray(zc), arrays, lab)
    out["lab_x"], out["lab_y"], out["lab_z"] = lab.T
    r = np.hypot(lab[:, 1], lab[:, 2])
    out["two_theta"] = np.degrees(np.arctan2(r, lab[:, 0]))
    out["eta"] = [eta_kernel(y, z) for y, z in zip(lab[:, 1], lab[:, 2])]
    out["radius"] = float(p["Lsd"]) * np.tan(np.radians(out["two_theta"]))
    if len(rings) and k:
        d = np.abs(out["radius"][:, None] - rings[None, :, 2])
        best = np.argmin(d, axis=1)
        on = d[np.arange(k), best] <= float(p["Width"])
        out["ring"] = np.where(on, rings[best, 0].astype(np.int32), 0)
    return out

