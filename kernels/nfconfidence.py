"""Confidence of an orientation at a grid point: MIDAS's ``CalcFracOverlap``.

For each spot the orientation predicts (:mod:`kernels.nfmodel`), the grid
point's triangle is projected onto the first detector from the spot's
omega; its footprint (:func:`kernels.nfgrid.footprint_kernel`) is placed at
the floor of the spot centre scaled to every distance.  A footprint pixel
*overlaps* when it is set in the binary image of the spot's frame **at
every distance**; the confidence is overlapping pixels / footprint pixels
over all spots (0 when no spot is on the detectors).

As in MIDAS, a spot is skipped when its frame is outside the scan or a
projected vertex is off the first detector, and its footprint pixels are
visited in raster order (z, then y) up to the first one that is off a
detector at some distance: the pixels before it count, the rest not.  The
centre at distance ``k`` is computed with MIDAS's operations and order,
``floor(((Yc - ybc_0) px (Lsd_k / Lsd_0)) / px + ybc_k)``, so floors agree
to the last bit.

**Binary images** are bit-packed along detector y, one bit per pixel:
``images[d, f, z, y >> 3] >> (y & 7) & 1`` is pixel (y, z) of frame ``f``
at distance ``d`` (``np.packbits(..., axis=-1, bitorder="little")``; see
:func:`pack_images`).  That is MIDAS's ``SpotsInfo.bin`` size (1.41 GiB for
2 x 1440 x 2048^2), laid out as frames (rows z, columns y) where MIDAS
orders each frame y-major.

:func:`paint_kernel` is the forward direction (MIDAS's
``SimulateDiffractionImage``): it sets the footprint pixels instead of
testing them (without the vertex check, as MIDAS).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .errors import KernelArgumentError
from .nfgeometry import NFGeometry
from .nfgrid import footprint_kernel, grid_vertices, max_footprint_pixels
from .nfmodel import (N_SPOT_COLS, OMEGA, YL, ZL, check_orientation, frame_of,
                      project_kernel, theoretical_spots_kernel)

__all__ = ["pack_images", "unpack_images", "check_images", "confidence", "FitWorkspace",
           "spot_footprint_kernel", "overlap_kernel", "confidence_kernel", "paint_kernel"]


def pack_images(binary: np.ndarray) -> np.ndarray:
    """(n_dist, n_frames, NrPixelsZ, NrPixelsY) bool -> bit-packed uint8 (module docstring)."""
    binary = np.asarray(binary)
    if binary.ndim != 4:
        raise KernelArgumentError(f"binary images: expected (n_dist, n_frames, z, y), got "
                                  f"shape {binary.shape}")
    return np.packbits(binary.astype(bool), axis=-1, bitorder="little")


def unpack_images(packed: np.ndarray, n_pixels_y: int) -> np.ndarray:
    """Inverse of :func:`pack_images`: (n_dist, n_frames, z, n_pixels_y) bool."""
    return np.unpackbits(packed, axis=-1, count=n_pixels_y, bitorder="little").astype(bool)


def check_images(images, geometry: NFGeometry) -> np.ndarray:
    """``images`` if it is a C-contiguous packed uint8 stack of the geometry's shape."""
    want = (geometry.n_distances, geometry.n_frames, geometry.n_pixels_z,
            (geometry.n_pixels_y + 7) // 8)
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.shape != want:
        got = (getattr(images, "shape", None), getattr(images, "dtype", None))
        raise KernelArgumentError(
            f"images: expected bit-packed uint8 of shape {want} (distances, frames, NrPixelsZ, "
            f"ceil(NrPixelsY / 8)) for {geometry.source}; got shape/dtype {got}. Pack a bool "
            "stack with kernels.nfconfidence.pack_images")
    if not images.flags.c_contiguous:
        raise KernelArgumentError("images: must be C-contiguous (np.ascontiguousarray)")
    return images


@njit(cache=True, nogil=True)
def spot_footprint_kernel(yl, zl, ome, verts, rasterize, m, check_vertices, pix, base):
    """Footprint of the triangle ``verts`` (3, 2) um for spot (yl, zl, omega).

    Writes the footprint offsets into ``pix`` and, per distance ``d``,
    ``base[d] = (floor y, floor z)`` of the spot centre; returns the pixel
    count, or -1 when the spot is rejected (``check_vertices``: a vertex
    off the first detector) or ``pix`` is too small.
    """
    rad = math.radians(ome)
    so = math.sin(rad)
    co = math.cos(rad)
    centre = np.empty(2)
    tmp = np.empty(2)
    off = np.empty((3, 2))
    for k in range(3):
        project_kernel(yl, zl, so, co, verts[k, 0], verts[k, 1], m, tmp)
        if check_vertices and not (0.0 <= tmp[0] <= m.n_pixels_y
                                   and 0.0 <= tmp[1] <= m.n_pixels_z):
            return -1
        off[k, 0] = tmp[0]
        off[k, 1] = tmp[1]
    project_kernel(yl, zl, so, co, 0.0, 0.0, m, centre)
    for k in range(3):
        off[k, 0] -= centre[0]
        off[k, 1] -= centre[1]
    for d in range(m.lsd.shape[0]):
        scale = m.lsd[d] / m.lsd[0]
        base[d, 0] = math.floor(((centre[0] - m.ybc[0]) * m.px * scale) / m.px + m.ybc[d])
        base[d, 1] = math.floor(((centre[1] - m.zbc[0]) * m.px * scale) / m.px + m.zbc[d])
    return footprint_kernel(off, rasterize, pix)


@njit(cache=True, nogil=True)
def overlap_kernel(spots, n_spots, verts, rasterize, m, images, pix, base):
    """(overlapping pixels, footprint pixels) of a spot table for one triangle.

    ``spots`` as written by :func:`~kernels.nfmodel.theoretical_spots_kernel`
    (first ``n_spots`` rows); ``pix`` (capacity, 2) int64 and ``base``
    (n_dist, 2) int64 are scratch.  Footprint pixels are visited in raster
    order; at the first one off a detector the rest of the spot is skipped
    (pixels before it count), as in MIDAS.
    """
    n_dist = m.lsd.shape[0]
    overlap = 0
    total = 0
    for j in range(n_spots):
        frame = frame_of(spots[j, OMEGA], m)
        if frame < 0 or frame >= m.n_frames:
            continue
        n_pix = spot_footprint_kernel(spots[j, YL], spots[j, ZL], spots[j, OMEGA], verts,
                                      rasterize, m, True, pix, base)
        for p in range(n_pix):
            hit = True
            off = False
            for d in range(n_dist):
                y = base[d, 0] + pix[p, 0]
                z = base[d, 1] + pix[p, 1]
                if y < 0 or y >= m.n_pixels_y or z < 0 or z >= m.n_pixels_z:
                    off = True
                    break
                if (images[d, frame, z, y >> 3] >> (y & 7)) & 1 == 0:
                    hit = False
            if off:
                break
            if hit:
                overlap += 1
            total += 1
    return overlap, total


@njit(cache=True, nogil=True)
def confidence_kernel(u, verts, rasterize, m, images, spots, pix, base):
    """Fraction of footprint pixels set at every distance for orientation ``u``.

    Scratch: ``spots`` (2 n_hkl, 6) float64, ``pix`` (capacity, 2) and
    ``base`` (n_dist, 2) int64.  Returns 0.0 when no pixel is counted.
    """
    n_spots = theoretical_spots_kernel(u, m, spots)
    overlap, total = overlap_kernel(spots, n_spots, verts, rasterize, m, images, pix, base)
    return overlap / total if total > 0 else 0.0


@njit(cache=True, nogil=True)
def paint_kernel(u, verts, rasterize, m, images, spots, pix, base):
    """Set the footprint pixels of orientation ``u`` at triangle ``verts`` in ``images``.

    Every spot in the frame range is drawn; each footprint pixel at the
    distances in order up to the first where it is off the detector (as
    MIDAS).  Returns the number of pixels set (including ones already set).
    """
    n_spots = theoretical_spots_kernel(u, m, spots)
    n_set = 0
    for j in range(n_spots):
        frame = frame_of(spots[j, OMEGA], m)
        if frame < 0 or frame >= m.n_frames:
            continue
        n_pix = spot_footprint_kernel(spots[j, YL], spots[j, ZL], spots[j, OMEGA], verts,
                                      rasterize, m, False, pix, base)
        for p in range(n_pix):
            for d in range(m.lsd.shape[0]):
                y = base[d, 0] + pix[p, 0]
                z = base[d, 1] + pix[p, 1]
                if y < 0 or y >= m.n_pixels_y or z < 0 or z >= m.n_pixels_z:
                    break
                images[d, frame, z, y >> 3] |= np.uint8(1 << (y & 7))
                n_set += 1
    return n_set


class FitWorkspace:
    """Scratch arrays of the confidence/fit kernels for one geometry and half-edge ``gs``.

    Reuse one per worker thread (the kernels write into it).
    """

    def __init__(self, geometry: NFGeometry, gs: float):
        m = geometry.arrays
        self.rasterize = bool(2.0 * gs > geometry.px)
        self.spots = np.empty((2 * m.g.shape[0], N_SPOT_COLS))
        self.pix = np.empty((max_footprint_pixels(gs, geometry.px), 2), np.int64)
        self.base = np.empty((m.lsd.shape[0], 2), np.int64)


def _one_row(grid_row) -> np.ndarray:
    row = np.asarray(grid_row, dtype=np.float64)
    if row.shape != (5,):
        raise KernelArgumentError(f"grid_row: expected one (y1, y2, xs, ys, gs) grid row, "
                                  f"got shape {row.shape}")
    return row


def confidence(u, grid_row, geometry: NFGeometry, images: np.ndarray,
               work: FitWorkspace | None = None) -> float:
    """MIDAS's fractional overlap of orientation ``u`` at one grid point.

    Parameters
    ----------
    u : (3, 3) orientation matrix
    grid_row : (5,) ``(y1, y2, xs, ys, gs)`` row of :func:`kernels.nfgrid.hex_grid`
    geometry : NFGeometry
    images : bit-packed binary images (:func:`pack_images`)
    work : FitWorkspace, optional; reuse across calls

    Returns
    -------
    float in [0, 1]
    """
    u = check_orientation("u", u)
    row = _one_row(grid_row)
    images = check_images(images, geometry)
    if work is None:
        work = FitWorkspace(geometry, row[4])
    verts = np.ascontiguousarray(grid_vertices(row[None])[0])
    return float(confidence_kernel(u, verts, work.rasterize, geometry.arrays, images,
                                   work.spots, work.pix, work.base))
