"""The NF reconstruction grid (MIDAS's ``MakeHexGrid``) and voxel footprints on the detector.

**Grid.** MIDAS covers a hexagon whose inscribed circle has radius
``Rsample`` with rows of equilateral triangles of side ``GridSize`` and
writes one line per triangle, ``y1 y2 xs ys gs`` (``grid.txt``, first line
the count): the centroid ``(xs, ys)``, the centroid's distances to the
lower (``y1``) and upper (``y2``) extent, and ``gs``, half the drawn edge
``EdgeLength`` (default ``GridSize``).  ``y1 > y2`` marks a triangle
pointing down (``UD = -1``).  ``FitOrientationOMP`` turns a line into
vertices::

    UD = -1: (xs, ys - y1), (xs - gs, ys + y2), (xs + gs, ys + y2)
    UD = +1: (xs, ys + y2), (xs - gs, ys - y1), (xs + gs, ys - y1)

:func:`hex_grid` writes the same columns, row by row from the bottom
(``y`` increasing, then ``x``).  Deliberate difference: in MIDAS's rows
above ``y = 0`` the triangle shapes are swapped against their centroids
(an upward triangle gets the centroid height of a downward one), so those
triangles overlap their neighbours and leave gaps; ours tile the hexagon.

**Footprint** (MIDAS's ``CalcPixels2``).  The three vertices' pixel offsets
from the spot centre are rounded (half away from zero); a pixel of their
bounding box belongs to the footprint when it is inside the triangle by
the edge functions (counter-clockwise test, as MIDAS) or within 0.99 px of
one of the three edge *lines*.  When the drawn edge ``2 gs`` is not larger
than the pixel, the footprint is the one pixel at the rounded mean offset.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .errors import KernelArgumentError

__all__ = ["hex_grid", "grid_vertices", "read_grid", "write_grid", "within_radius",
           "footprint_kernel", "footprint", "c_round", "max_footprint_pixels"]


def hex_grid(grid_size: float, rsample: float, edge_length: float | None = None) -> np.ndarray:
    """Triangles tiling the hexagon around a disk of radius ``rsample`` (MIDAS's ``MakeHexGrid``).

    Returns
    -------
    (n, 5) float64 rows ``(y1, y2, xs, ys, gs)`` as MIDAS's ``grid.txt``;
    ``n = 6 * NrHex**2`` with ``NrHex = ceil(2 rsample / (sqrt(3) grid_size))``.
    """
    for name, v in (("grid_size", grid_size), ("rsample", rsample)):
        if not (isinstance(v, (int, float, np.number)) and math.isfinite(v) and v > 0):
            raise KernelArgumentError(f"{name} must be a finite number > 0 (um), got {v!r}")
    edge = grid_size if edge_length is None else edge_length
    if not (math.isfinite(edge) and edge > 0):
        raise KernelArgumentError(f"edge_length must be > 0 (um), got {edge_length!r}")
    ht = math.sqrt(3.0) * grid_size / 2.0
    nr_hex = int(math.ceil((2.0 * rsample / math.sqrt(3.0)) / grid_size))
    a_last = grid_size * nr_hex
    small, big = edge * math.sqrt(3.0) / 6.0, edge * math.sqrt(3.0) / 3.0
    rows = []
    for i in range(-nr_hex, nr_hex):         # row i spans y in [i ht, (i + 1) ht]
        level = i + 0.5                      # distance of the row's middle from y = 0, in rows
        n_row = 2 * (2 * nr_hex - int(abs(level) + 0.5)) + 1
        x0 = -a_last + (abs(level) + 0.5) * grid_size / 2.0
        # Below y = 0 a row starts with a downward triangle, above with an upward one.
        up = i >= 0
        for j in range(n_row):
            xs = x0 + j * grid_size / 2.0
            if up:   # apex on top: centroid a third of the height above the base
                rows.append((small, big, xs, i * ht + ht / 3.0, edge / 2.0))
            else:
                rows.append((big, small, xs, (i + 1) * ht - ht / 3.0, edge / 2.0))
            up = not up
    return np.array(rows, dtype=np.float64)


def grid_vertices(grid: np.ndarray) -> np.ndarray:
    """(n, 3, 2) triangle vertices (x, y) um of grid rows, in MIDAS's order (module docstring)."""
    grid = _check_grid(grid)
    y1, y2, xs, ys, gs = grid.T
    down = y1 > y2
    out = np.empty((len(grid), 3, 2))
    out[:, 0, 0] = xs
    out[:, 0, 1] = np.where(down, ys - y1, ys + y2)
    out[:, 1, 0] = xs - gs
    out[:, 2, 0] = xs + gs
    out[:, 1, 1] = out[:, 2, 1] = np.where(down, ys + y2, ys - y1)
    return out


def within_radius(grid: np.ndarray, radius: float) -> np.ndarray:
    """The grid rows whose centroid lies within ``radius`` um of the rotation axis."""
    grid = _check_grid(grid)
    return grid[np.hypot(grid[:, 2], grid[:, 3]) <= radius]


def _check_grid(grid) -> np.ndarray:
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 2 or grid.shape[1] != 5 or not np.all(np.isfinite(grid)):
        raise KernelArgumentError(f"grid: expected finite (n, 5) rows (y1, y2, xs, ys, gs), "
                                  f"got shape {grid.shape}")
    return grid


def write_grid(path, grid: np.ndarray) -> None:
    """Write MIDAS's ``grid.txt``: the count, then one ``y1 y2 xs ys gs`` line per row."""
    grid = _check_grid(grid)
    with open(path, "w") as fh:
        fh.write(f"{len(grid)}\n")
        for row in grid:
            fh.write(" ".join(f"{v:.6f}" for v in row) + "\n")


def read_grid(path) -> np.ndarray:
    """Read MIDAS's ``grid.txt`` (see :func:`write_grid`); errors name the file and line."""
    with open(path) as fh:
        lines = fh.read().splitlines()
    try:
        n = int(lines[0].split()[0])
    except (IndexError, ValueError):
        raise KernelArgumentError(f"{path}, line 1: expected the number of grid points") from None
    rows = []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            vals = [float(v) for v in line.split()[:5]]
        except ValueError:
            vals = []
        if len(vals) != 5:
            raise KernelArgumentError(f"{path}, line {lineno}: expected 5 numbers "
                                      f"'y1 y2 xs ys gs', got {line.strip()!r}")
        rows.append(vals)
    if len(rows) != n:
        raise KernelArgumentError(f"{path}: line 1 announces {n} grid points, the file has "
                                  f"{len(rows)}")
    return np.array(rows, dtype=np.float64).reshape(-1, 5)


@njit(cache=True, nogil=True)
def c_round(x):
    """C's ``round``: half away from zero (Python's and NumPy's round half to even)."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


@njit(cache=True, nogil=True)
def _dist2_line(ax, ay, bx, by, px, py):
    num = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
    den = (ay - by) * (ay - by) + (bx - ax) * (bx - ax)
    if den == 0.0:
        return math.inf
    return num * num / den


@njit(cache=True, nogil=True)
def footprint_kernel(offsets, rasterize, out):
    """Integer pixel offsets covered by a triangle (MIDAS's ``CalcPixels2``).

    ``offsets`` is (3, 2) float vertex offsets (y, z) in pixels from the spot
    centre; ``rasterize`` False gives the single rounded-mean pixel.  Writes
    (y, z) rows into ``out`` (int64, (capacity, 2)) and returns the count,
    or -1 when ``out`` is too small.
    """
    if not rasterize:
        out[0, 0] = c_round((offsets[0, 0] + offsets[1, 0] + offsets[2, 0]) / 3.0)
        out[0, 1] = c_round((offsets[0, 1] + offsets[1, 1] + offsets[2, 1]) / 3.0)
        return 1
    x0 = c_round(offsets[0, 0])
    y0 = c_round(offsets[0, 1])
    x1 = c_round(offsets[1, 0])
    y1 = c_round(offsets[1, 1])
    x2 = c_round(offsets[2, 0])
    y2 = c_round(offsets[2, 1])
    min_x = min(x0, x1, x2)
    max_x = max(x0, x1, x2)
    min_y = min(y0, y1, y2)
    max_y = max(y0, y1, y2)
    n = 0
    for py in range(int(min_y), int(max_y) + 1):
        for px in range(int(min_x), int(max_x) + 1):
            w0 = (x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)
            w1 = (x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)
            w2 = (x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)
            take = w0 >= 0 and w1 >= 0 and w2 >= 0
            if not take:
                take = (_dist2_line(x1, y1, x2, y2, px, py) < 0.9801
                        or _dist2_line(x2, y2, x0, y0, px, py) < 0.9801
                        or _dist2_line(x0, y0, x1, y1, px, py) < 0.9801)
            if take:
                if n >= out.shape[0]:
                    return -1
                out[n, 0] = px
                out[n, 1] = py
                n += 1
    return n


def max_footprint_pixels(gs: float, px: float, stretch: float = 1.5) -> int:
    """A safe capacity for :func:`footprint_kernel`'s ``out`` for half-edge ``gs`` um.

    A voxel's image is at most ``stretch`` times its size (the ``(1 - xa /
    Lsd)`` factors are within a few per cent of 1), so its rounded bounding
    box has at most ``ceil(stretch 2 gs / px) + 3`` pixels a side.
    """
    side = int(math.ceil(stretch * 2.0 * gs / px)) + 3
    return side * side


def footprint(offsets, rasterize: bool = True) -> np.ndarray:
    """(k, 2) int64 pixel offsets (y, z) of a triangle given as (3, 2) pixel offsets."""
    offsets = np.ascontiguousarray(offsets, dtype=np.float64)
    if offsets.shape != (3, 2) or not np.all(np.isfinite(offsets)):
        raise KernelArgumentError(f"offsets: expected finite (3, 2) pixel offsets, got "
                                  f"shape {offsets.shape}")
    span = float(np.ptp(offsets, axis=0).max()) + 3
    out = np.empty((int(span + 1) ** 2, 2), np.int64)
    n = footprint_kernel(offsets, bool(rasterize), out)
    return out[:n].copy()
