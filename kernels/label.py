"""Connected components with 8-connectivity (union-find) and hole filling.

Labelling is the classic two-pass scan with a union-find forest (Wu, Otoo &
Suzuki's decision tree over the already-scanned neighbours W, NW, N, NE;
roots are always the smaller provisional label, with path halving).  No
fixed-size equivalence table: the forest has one slot per possible
provisional label, bounded by ``ceil(H/2) * ceil(W/2)`` for 8-connectivity.

Numbering is canonical: components are numbered 1..n in raster order of
their first pixel, which is what ``scipy.ndimage.label`` produces, so the two
agree exactly.  Why that holds without a sort: a component's first pixel in
raster order always opens a new provisional label, labels grow in raster
order, and unions keep the smaller label as root.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .errors import check_frame, check_out

__all__ = ["label8", "label8_kernel", "fill_holes", "fill_holes_kernel"]


@njit(cache=True, nogil=True, inline="always")
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True, nogil=True, inline="always")
def _union(parent, a, b):
    ra = _find(parent, a)
    rb = _find(parent, b)
    if ra < rb:
        parent[rb] = ra
        return ra
    parent[ra] = rb
    return rb


@njit(cache=True, nogil=True)
def label8_kernel(mask, out):
    """Label nonzero pixels of ``mask`` (8-connected) into int32 ``out``; return n.

    Background pixels get 0; components get 1..n in raster order of their
    first pixel.
    """
    h, w = mask.shape
    parent = np.empty(((h + 1) // 2) * ((w + 1) // 2) + 1, dtype=np.int32)
    parent[0] = 0
    nxt = 1
    for r in range(h):
        cur = out[r]
        mrow = mask[r]
        if r == 0:
            west = 0
            for c in range(w):
                if mrow[c] == 0:
                    west = 0
                elif west == 0:
                    parent[nxt] = nxt
                    west = nxt
                    nxt += 1
                cur[c] = west
            continue
        prev = out[r - 1]
        # Sliding window over the scanned neighbours: NW and N are the
        # previous step's N and NE, W is the previous step's label.
        nw = 0
        north = prev[0]
        west = 0
        for c in range(w):
            ne = prev[c + 1] if c + 1 < w else 0
            if mrow[c] == 0:
                lab = 0
            elif north != 0:
                # N touches W, NW and NE, so it alone decides.
                lab = north
            elif nw != 0:
                # NE is not adjacent to NW (nor to W), hence the union.
                lab = nw
                if ne != 0 and ne != nw:
                    lab = _union(parent, nw, ne)
            elif west != 0:
                lab = west
                if ne != 0 and ne != west:
                    lab = _union(parent, west, ne)
            elif ne != 0:
                lab = ne
            else:
                parent[nxt] = nxt
                lab = nxt
                nxt += 1
            cur[c] = lab
            nw = north
            north = ne
            west = lab
    # Roots are the smallest label of their set, so one increasing sweep both
    # flattens the forest and numbers roots consecutively.
    n = 0
    for i in range(1, nxt):
        p = parent[i]
        if p == i:
            n += 1
            parent[i] = n
        else:
            parent[i] = parent[p]
    for r in range(h):
        for c in range(w):
            v = out[r, c]
            if v != 0:
                out[r, c] = parent[v]
    return n


def label8(mask: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """8-connected labelling, equal to ``scipy.ndimage.label(mask, np.ones((3, 3)))``.

    Parameters
    ----------
    mask : (H, W) bool, uint8 or other integer array
        Nonzero pixels are foreground.
    out : (H, W) int32 array, optional

    Returns
    -------
    (labels, n) : int32 array and the number of components
    """
    check_frame("mask", mask)
    if mask.dtype == np.bool_:
        mask = mask.view(np.uint8)
    out = check_out("out", out, mask.shape, np.int32)
    n = label8_kernel(np.ascontiguousarray(mask), out)
    return out, int(n)


@njit(cache=True, nogil=True)
def fill_holes_kernel(mask, out):
    """``out`` (uint8) = ``mask`` plus every background pixel that cannot reach the
    image border through 4-connected background; returns the filled pixel count.

    Same definition as ``scipy.ndimage.binary_fill_holes`` with its default
    (cross) structure.  Why not a flood fill from the border: the flood visits
    nearly every pixel in random order through a stack; a raster union-find
    over 4-connected background, with an "touches the border" flag per set, is
    about three times faster on mostly empty NF frames.
    """
    h, w = mask.shape
    lab = np.empty((h, w), dtype=np.int32)
    parent = np.empty(h * w + 1, dtype=np.int32)
    border = np.zeros(h * w + 1, dtype=np.uint8)
    nxt = 1
    for r in range(h):
        for c in range(w):
            if mask[r, c] != 0:
                lab[r, c] = 0
                continue
            north = lab[r - 1, c] if r > 0 else 0
            west = lab[r, c - 1] if c > 0 else 0
            if north != 0:
                cur = north
                if west != 0 and west != north:
                    cur = _union(parent, north, west)
            elif west != 0:
                cur = west
            else:
                parent[nxt] = nxt
                cur = nxt
                nxt += 1
            lab[r, c] = cur
            if r == 0 or c == 0 or r == h - 1 or c == w - 1:
                border[cur] = 1
    # Children have larger labels than their roots: a decreasing sweep moves
    # every flag to its root, an increasing one flattens and copies back.
    for i in range(nxt - 1, 0, -1):
        if border[i]:
            border[_find(parent, i)] = 1
    for i in range(1, nxt):
        root = _find(parent, i)
        border[i] = border[root]
    n = 0
    for r in range(h):
        for c in range(w):
            v = lab[r, c]
            if v != 0 and border[v]:
                out[r, c] = 0
            else:
                out[r, c] = 1
                n += 1
    return n


def fill_holes(mask: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Fill holes of a binary mask; equal to ``scipy.ndimage.binary_fill_holes(mask)``.

    Returns
    -------
    out : (H, W) uint8 array of 0/1
    """
    check_frame("mask", mask)
    if mask.dtype == np.bool_:
        mask = mask.view(np.uint8)
    out = check_out("out", out, mask.shape, np.uint8)
    fill_holes_kernel(np.ascontiguousarray(mask), out)
    return out
