"""Orientation fitting of NF grid points (MIDAS's ``FitOrientationOMP``).

Per grid point, as MIDAS:

1. **screen**: the confidence (:mod:`kernels.nfconfidence`) of every seed
   orientation, whose spots are computed once per seed list
   (:func:`seed_spots`; MIDAS's ``MakeDiffrSpots`` writes them to
   ``DiffractionSpots.bin``); seeds with confidence >= ``MinFracAccept``
   are the candidates (their number is reported, MIDAS's second ``.mic``
   column);
2. **refine**: Nelder-Mead maximises the confidence within +-``OrientTol``
   of a candidate (MIDAS: nlopt's ``LN_NELDERMEAD``, ``xtol_rel = ftol_rel =
   1e-5``, at most 5000 evaluations), and the best refined orientation wins.

Deliberate differences:

* We refine a rotation vector ``w`` (radians, each component within
  +-OrientTol) applied in the sample frame, ``U = R(w) U_seed``, instead of
  the three Euler angles within +-OrientTol each: near ``Phi = 0`` Euler
  boxes are degenerate (phi1 and phi2 rotate about the same axis), a
  rotation vector box is the same size everywhere.
* The confidence is a staircase (a count of pixels): a simplex can shrink
  onto a step below the top.  So each refinement starts with a simplex as
  large as OrientTol, restarts ``restarts`` times from its best point with
  halved simplices, and finally moves to the middle of the plateau of equal
  confidence around it, axis by axis (``centre``).  Measured on the demo
  geometry (microstructure seed 3, FF-like seeds 0.5 deg off, every third
  grid point): a first simplex of OrientTol / 4 with 2 restarts left 4.9%
  of the interior voxels beyond 0.25 deg, stuck on lower steps; the
  defaults left none.
* MIDAS refines *every* candidate; we refine at most ``n_refine`` (8)
  candidates in order of screened confidence, skipping any within
  OrientTol of an orientation already refined, and stop early, as MIDAS
  does, once a fit reaches confidence 1 - 1e-4.  Candidates close to one
  another converge to the same optimum.  (Refining only the best 3 lost
  whole grains whose seed screened fourth.)
* The optimiser is our own 3-parameter Nelder-Mead compiled with numba,
  so a whole grid point (or block of points) runs in one ``nogil`` call
  with no Python in the loop.  scipy's ``minimize`` calling the same numba
  confidence back through Python evaluates 2.4x fewer confidences per
  second (``bench/nf_fit_bench.py``; figures in ``bench/results/nf_fit.md``)
  and holds the GIL between evaluations, so threads could not fit points
  side by side.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from .crystal import CUBIC_SYMMETRY, matrix_to_euler, misorientation_angle
from .errors import KernelArgumentError
from .nfconfidence import FitWorkspace, check_images, confidence_kernel, overlap_kernel
from .nfgeometry import NFGeometry
from .nfgrid import grid_vertices
from .nfmodel import N_SPOT_COLS, theoretical_spots_kernel

__all__ = ["FitOptions", "FIT_DTYPE", "SeedSpots", "seed_spots", "fit_point", "fit_points",
           "seed_spots_kernel", "screen_kernel", "refine_kernel", "fit_point_kernel",
           "fit_points_kernel", "exercise"]

#: One row per grid point (orientation as matrix and as Euler angles in radians).
FIT_DTYPE = np.dtype([
    ("x", np.float64), ("y", np.float64), ("ud", np.int8), ("u", np.float64, (3, 3)),
    ("euler", np.float64, (3,)), ("confidence", np.float64), ("n_candidates", np.int32),
    ("seed", np.int32), ("n_evals", np.int32)])


@dataclass(frozen=True)
class FitOptions:
    """How hard to fit.

    The defaults were chosen on the demo geometry (``tests/data/nf_demo_ps.txt``,
    module docstring): with them every voxel two grid steps inside a grain
    of the microstructures tried came within 0.25 deg.

    Attributes
    ----------
    orient_tol, min_frac_accept
        None takes the geometry's OrientTol / MinFracAccept.
    n_refine
        Most distinct candidates refined per grid point (MIDAS: all).
    max_evals
        Confidence evaluations per candidate (MIDAS: 5000).
    xtol_deg
        A Nelder-Mead run stops when the simplex is this small (degrees).
    step_frac
        First simplex edge as a fraction of OrientTol.
    restarts, shrink
        Nelder-Mead restarts from the best point, each with a simplex ``shrink``
        times the previous one.
    centre, centre_span_deg
        Passes moving the result to the middle of its plateau of equal confidence,
        searched within +-span (0: no pass).
    """

    orient_tol: float | None = None
    min_frac_accept: float | None = None
    n_refine: int = 8
    max_evals: int = 1500
    xtol_deg: float = 5e-3
    step_frac: float = 1.0
    restarts: int = 4
    shrink: float = 0.5
    centre: int = 1
    centre_span_deg: float = 0.5

    def resolve(self, geometry: NFGeometry):
        """(orient_tol rad, min_frac_accept) after defaults, validated."""
        tol = self.orient_tol if self.orient_tol is not None else geometry.orient_tol
        frac = (self.min_frac_accept if self.min_frac_accept is not None
                else geometry.min_frac_accept)
        missing = [n for n, v in (("orient_tol", tol), ("min_frac_accept", frac)) if v is None]
        if missing:
            geometry.require(*missing, what="orientation fitting")
        assert tol is not None and frac is not None
        if not (0 < tol <= 30):
            raise KernelArgumentError(f"OrientTol must be in (0, 30] degrees, got {tol}")
        if not 0 <= frac <= 1:
            raise KernelArgumentError(f"MinFracAccept must be in [0, 1], got {frac}")
        if not (isinstance(self.n_refine, int) and self.n_refine >= 1):
            raise KernelArgumentError(f"n_refine must be an integer >= 1, got {self.n_refine}")
        if not (self.xtol_deg > 0 and self.max_evals >= 10 and 0 < self.step_frac <= 1
                and self.restarts >= 0 and 0 < self.shrink < 1 and self.centre >= 0
                and self.centre_span_deg > 0):
            raise KernelArgumentError(
                "need xtol_deg > 0, max_evals >= 10, 0 < step_frac <= 1, restarts >= 0, "
                f"0 < shrink < 1, centre >= 0, centre_span_deg > 0; got {self}")
        return math.radians(tol), float(frac)


@njit(cache=True, nogil=True)
def seed_spots_kernel(seeds, m, spots, counts):
    """``spots[i, :counts[i]]`` = theoretical spots of ``seeds[i]`` (see nfmodel)."""
    for i in range(seeds.shape[0]):
        counts[i] = theoretical_spots_kernel(seeds[i], m, spots[i])


@njit(cache=True, nogil=True)
def screen_kernel(verts, rasterize, m, images, spots, counts, fracs, pix, base):
    """``fracs[i]`` = confidence of seed ``i`` at triangle ``verts`` (precomputed spots)."""
    for i in range(counts.shape[0]):
        overlap, total = overlap_kernel(spots[i], counts[i], verts, rasterize, m, images,
                                        pix, base)
        fracs[i] = overlap / total if total > 0 else 0.0


@njit(cache=True, nogil=True)
def _rotvec_times(w, u0, out):
    # out = R(w) @ u0, R by Rodrigues' formula.
    th = math.sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
    r = np.empty((3, 3))
    if th < 1e-15:
        r[:] = 0.0
        r[0, 0] = r[1, 1] = r[2, 2] = 1.0
    else:
        kx = w[0] / th
        ky = w[1] / th
        kz = w[2] / th
        c = math.cos(th)
        s = math.sin(th)
        v = 1.0 - c
        r[0, 0] = c + kx * kx * v
        r[0, 1] = kx * ky * v - kz * s
        r[0, 2] = kx * kz * v + ky * s
        r[1, 0] = ky * kx * v + kz * s
        r[1, 1] = c + ky * ky * v
        r[1, 2] = ky * kz * v - kx * s
        r[2, 0] = kz * kx * v - ky * s
        r[2, 1] = kz * ky * v + kx * s
        r[2, 2] = c + kz * kz * v
    for i in range(3):
        for j in range(3):
            out[i, j] = r[i, 0] * u0[0, j] + r[i, 1] * u0[1, j] + r[i, 2] * u0[2, j]


@njit(cache=True, nogil=True)
def _objective(w, u0, verts, rasterize, m, images, spots, pix, base, u):
    _rotvec_times(w, u0, u)
    return -confidence_kernel(u, verts, rasterize, m, images, spots, pix, base)


@njit(cache=True, nogil=True)
def _nelder_mead(x0, f0, u0, verts, rasterize, m, images, tol, step, xtol, max_evals,
                 spots, pix, base, x_best):
    """One Nelder-Mead run from ``x0`` (objective ``f0``) with edge ``step``.

    Writes the best point to ``x_best``; returns ``(best objective, evaluations)``.
    """
    u = np.empty((3, 3))
    x = np.zeros((4, 3))
    f = np.empty(4)
    for i in range(4):
        x[i, :] = x0
    f[0] = f0
    for i in range(3):
        # step towards the box's interior when x0 is at an edge
        x[i + 1, i] = x0[i] + step if x0[i] + step <= tol else x0[i] - step
        f[i + 1] = _objective(x[i + 1], u0, verts, rasterize, m, images, spots, pix, base, u)
    evals = 3
    xr = np.empty(3)
    xe = np.empty(3)
    xc = np.empty(3)
    cen = np.empty(3)
    while evals < max_evals:
        # order the simplex: best first (insertion sort keeps equal values in place)
        for i in range(1, 4):
            j = i
            while j > 0 and f[j] < f[j - 1]:
                for k in range(3):
                    t = x[j, k]
                    x[j, k] = x[j - 1, k]
                    x[j - 1, k] = t
                t = f[j]
                f[j] = f[j - 1]
                f[j - 1] = t
                j -= 1
        size = 0.0
        for i in range(1, 4):
            for k in range(3):
                size = max(size, abs(x[i, k] - x[0, k]))
        if size < xtol:
            break
        for k in range(3):
            cen[k] = (x[0, k] + x[1, k] + x[2, k]) / 3.0
            xr[k] = min(tol, max(-tol, 2.0 * cen[k] - x[3, k]))
        fr = _objective(xr, u0, verts, rasterize, m, images, spots, pix, base, u)
        evals += 1
        if fr < f[0]:
            for k in range(3):
                xe[k] = min(tol, max(-tol, 3.0 * cen[k] - 2.0 * x[3, k]))
            fe = _objective(xe, u0, verts, rasterize, m, images, spots, pix, base, u)
            evals += 1
            if fe < fr:
                x[3, :] = xe
                f[3] = fe
            else:
                x[3, :] = xr
                f[3] = fr
            continue
        if fr < f[2]:
            x[3, :] = xr
            f[3] = fr
            continue
        if fr < f[3]:     # outside contraction
            for k in range(3):
                xc[k] = cen[k] + 0.5 * (xr[k] - cen[k])
        else:             # inside contraction
            for k in range(3):
                xc[k] = cen[k] + 0.5 * (x[3, k] - cen[k])
        fc = _objective(xc, u0, verts, rasterize, m, images, spots, pix, base, u)
        evals += 1
        if fc < min(fr, f[3]):
            x[3, :] = xc
            f[3] = fc
            continue
        for i in range(1, 4):   # shrink towards the best vertex
            for k in range(3):
                x[i, k] = x[0, k] + 0.5 * (x[i, k] - x[0, k])
            f[i] = _objective(x[i], u0, verts, rasterize, m, images, spots, pix, base, u)
        evals += 3
    best = 0
    for i in range(1, 4):
        if f[i] < f[best]:
            best = i
    x_best[:] = x[best]
    return f[best], evals


@njit(cache=True, nogil=True)
def _centre(x, f, u0, verts, rasterize, m, images, tol, span, xtol, spots, pix, base):
    """Move ``x`` to the middle of the region where the objective stays at ``f``, axis by
    axis (bisection for each edge within ``span``); returns evaluations."""
    u = np.empty((3, 3))
    y = np.empty(3)
    evals = 0
    for k in range(3):
        ends = np.zeros(2)
        for side in range(2):
            sgn = 1.0 if side == 0 else -1.0
            lo = 0.0
            hi = span
            y[:] = x
            y[k] = min(tol, max(-tol, x[k] + sgn * hi))
            if _objective(y, u0, verts, rasterize, m, images, spots, pix, base, u) <= f:
                lo = hi      # still on the plateau at the end of the span
            evals += 1
            while hi - lo > xtol and lo < span:
                mid = 0.5 * (lo + hi)
                y[k] = min(tol, max(-tol, x[k] + sgn * mid))
                evals += 1
                if _objective(y, u0, verts, rasterize, m, images, spots, pix, base, u) <= f:
                    lo = mid
                else:
                    hi = mid
            ends[side] = lo
        x[k] = min(tol, max(-tol, x[k] + 0.5 * (ends[0] - ends[1])))
    return evals


@njit(cache=True, nogil=True)
def refine_kernel(u0, verts, rasterize, m, images, tol, step, xtol, max_evals, restarts,
                  shrink, centre, span, spots, pix, base, u_out):
    """Nelder-Mead over rotation vectors in [-tol, tol]^3 (radians) around ``u0``.

    Maximises the confidence; writes the best orientation to ``u_out`` and
    returns ``(confidence, evaluations)``.  Trial points are clamped into
    the box; a run stops when every vertex is within ``xtol`` of the best
    (each component) or after ``max_evals`` evaluations.  Then it restarts
    ``restarts`` times from the best point with a 4 times smaller simplex:
    the confidence is a staircase (a count of pixels), on which a simplex
    can shrink onto a step below the top.
    """
    u = np.empty((3, 3))
    x = np.zeros(3)
    xb = np.empty(3)
    f = _objective(x, u0, verts, rasterize, m, images, spots, pix, base, u)
    evals = 1
    for _ in range(restarts + 1):
        if evals >= max_evals or f <= -1.0:
            break
        fb, ne = _nelder_mead(x, f, u0, verts, rasterize, m, images, tol, step, xtol,
                              max_evals - evals, spots, pix, base, xb)
        evals += ne
        if fb <= f:
            f = fb
            x[:] = xb
        step *= shrink
    for _ in range(centre):
        xc = x.copy()
        evals += _centre(xc, f, u0, verts, rasterize, m, images, tol, span, xtol, spots,
                         pix, base)
        fc = _objective(xc, u0, verts, rasterize, m, images, spots, pix, base, u)
        evals += 1
        if fc <= f:
            x[:] = xc
            f = fc
    _rotvec_times(x, u0, u_out)
    return -f, evals


@njit(cache=True, nogil=True)
def fit_point_kernel(verts, rasterize, m, images, seeds, spots, counts, sym, min_frac, tol,
                     step, xtol, max_evals, restarts, shrink, centre, span, n_refine, fracs,
                     spot_buf, pix, base, u_out):
    """Screen every seed at one triangle, refine the best distinct candidates.

    Returns ``(confidence, n_candidates, seed index or -1, evaluations)``;
    ``u_out`` holds the best orientation (unchanged when no seed reaches
    ``min_frac``).
    """
    screen_kernel(verts, rasterize, m, images, spots, counts, fracs, pix, base)
    n_cand = 0
    for i in range(fracs.shape[0]):
        if fracs[i] >= min_frac:
            n_cand += 1
    if n_cand == 0:
        return 0.0, 0, -1, 0
    cand = np.empty(n_cand, np.int64)
    k = 0
    for i in range(fracs.shape[0]):
        if fracs[i] >= min_frac:
            cand[k] = i
            k += 1
    order = np.argsort(-fracs[cand], kind="mergesort")
    done = np.empty((n_refine, 3, 3))
    u_try = np.empty((3, 3))
    work = np.empty((2, 3, 3))
    n_done = 0
    best_conf = -1.0
    best_seed = -1
    evals = 0
    for oi in range(n_cand):
        if n_done >= n_refine or best_conf >= 1.0 - 1e-4:
            break
        s = cand[order[oi]]
        near = False
        for j in range(n_done):
            if misorientation_angle(seeds[s], done[j], sym, work) < tol:
                near = True
                break
        if near:
            continue
        conf, ne = refine_kernel(seeds[s], verts, rasterize, m, images, tol, step, xtol,
                                 max_evals, restarts, shrink, centre, span, spot_buf, pix,
                                 base, u_try)
        evals += ne
        done[n_done] = u_try
        n_done += 1
        if conf > best_conf:
            best_conf = conf
            best_seed = s
            u_out[:, :] = u_try
    return best_conf, n_cand, best_seed, evals


@njit(cache=True, nogil=True)
def fit_points_kernel(all_verts, rasterize, m, images, seeds, spots, counts, sym, min_frac,
                      tol, step, xtol, max_evals, restarts, shrink, centre, span, n_refine,
                      fracs, spot_buf, pix, base, out_u, out_conf, out_ncand, out_seed, out_evals):
    """:func:`fit_point_kernel` for each triangle of ``all_verts`` (n, 3, 2), in order."""
    u = np.empty((3, 3))
    for p in range(all_verts.shape[0]):
        u[:, :] = np.nan
        conf, nc, seed, ne = fit_point_kernel(
            all_verts[p], rasterize, m, images, seeds, spots, counts, sym, min_frac, tol,
            step, xtol, max_evals, restarts, shrink, centre, span, n_refine, fracs,
            spot_buf, pix, base, u)
        out_u[p] = u
        out_conf[p] = conf
        out_ncand[p] = nc
        out_seed[p] = seed
        out_evals[p] = ne


@dataclass(frozen=True)
class SeedSpots:
    """Seed orientations and their precomputed spots (MIDAS's ``DiffractionSpots.bin``)."""

    seeds: np.ndarray    # (n, 3, 3)
    spots: np.ndarray    # (n, 2 n_hkl, 6)
    counts: np.ndarray   # (n,) int64


def seed_spots(seeds, geometry: NFGeometry) -> SeedSpots:
    """Precompute the spots of every seed orientation ((n, 3, 3) matrices)."""
    seeds = np.ascontiguousarray(seeds, dtype=np.float64)
    if seeds.ndim != 3 or seeds.shape[1:] != (3, 3) or len(seeds) == 0:
        raise KernelArgumentError(f"seeds: expected (n >= 1, 3, 3) orientation matrices, "
                                  f"got shape {seeds.shape}")
    if not np.allclose(np.einsum("nij,nkj->nik", seeds, seeds), np.eye(3), atol=1e-6):
        raise KernelArgumentError("seeds: not all rotation matrices (U U^T != I)")
    m = geometry.arrays
    spots = np.empty((len(seeds), 2 * m.g.shape[0], N_SPOT_COLS))
    counts = np.empty(len(seeds), np.int64)
    seed_spots_kernel(seeds, m, spots, counts)
    return SeedSpots(seeds, spots, counts)


def fit_points(grid, geometry: NFGeometry, images: np.ndarray, seeds, options=FitOptions(),
               symmetry: np.ndarray = CUBIC_SYMMETRY) -> np.ndarray:
    """Fit the orientation of each grid row; one :data:`FIT_DTYPE` record per row.

    Parameters
    ----------
    grid : (n, 5) rows ``(y1, y2, xs, ys, gs)`` (:func:`kernels.nfgrid.hex_grid`)
    geometry : NFGeometry (OrientTol and MinFracAccept unless ``options`` sets them)
    images : bit-packed binary images (:func:`kernels.nfconfidence.pack_images`)
    seeds : SeedSpots from :func:`seed_spots`, or (k, 3, 3) orientation matrices
        (e.g. :func:`kernels.crystal.fundamental_zone_grid`, or FF-HEDM grains)
    options : FitOptions

    Returns
    -------
    Structured array: position, triangle up/down, orientation (NaN and
    confidence 0 where no seed reached MinFracAccept), candidates, the
    seed refined to the result, evaluations.
    """
    tol, min_frac = options.resolve(geometry)
    grid = np.ascontiguousarray(grid, dtype=np.float64)
    if grid.ndim == 1:
        grid = grid[None]
    verts = np.ascontiguousarray(grid_vertices(grid))
    images = check_images(images, geometry)
    ss = seeds if isinstance(seeds, SeedSpots) else seed_spots(seeds, geometry)
    n = len(grid)
    gs_all = grid[:, 4]
    if n and not np.all(gs_all == gs_all[0]):
        raise KernelArgumentError("grid: all rows must have the same gs (edge length / 2)")
    out = np.zeros(n, FIT_DTYPE)
    out["x"], out["y"] = grid[:, 2], grid[:, 3]
    out["ud"] = np.where(grid[:, 0] > grid[:, 1], -1, 1)
    if n == 0:
        return out
    work = FitWorkspace(geometry, float(gs_all[0]))
    u = np.empty((n, 3, 3))
    conf = np.empty(n)
    ncand = np.empty(n, np.int64)
    seed = np.empty(n, np.int64)
    evals = np.empty(n, np.int64)
    fit_points_kernel(verts, work.rasterize, geometry.arrays, images, ss.seeds, ss.spots,
                      ss.counts, np.ascontiguousarray(symmetry), min_frac, tol,
                      options.step_frac * tol, math.radians(options.xtol_deg),
                      options.max_evals, options.restarts, options.shrink, options.centre,
                      math.radians(options.centre_span_deg), options.n_refine,
                      np.empty(len(ss.seeds)),
                      work.spots, work.pix, work.base, u, conf, ncand, seed, evals)
    out["u"] = u
    out["euler"] = np.nan
    ok = seed >= 0
    if ok.any():
        out["euler"][ok] = matrix_to_euler(u[ok])
    out["confidence"] = np.where(ok, conf, 0.0)
    out["n_candidates"], out["seed"], out["n_evals"] = ncand, seed, evals
    return out


def fit_point(grid_row, geometry: NFGeometry, images: np.ndarray, seeds,
              options=FitOptions()) -> np.void:
    """:func:`fit_points` for one grid row; returns its record."""
    return fit_points(np.asarray(grid_row, dtype=np.float64)[None], geometry, images, seeds,
                      options)[0]


_TINY_GEOMETRY = """\
LatticeParameter 4.08 4.08 4.08 90 90 90
Wavelength 0.172979
SpaceGroup 225
Lsd 2000
Lsd 2500
BC 16 2
BC 16 2
px 20
NrPixelsY 32
NrPixelsZ 16
OmegaStart 180
OmegaStep -90
NrFilesPerDistance 4
OmegaRange -180 180
BoxSize -400 400 -400 400
GridSize 25
OrientTol 1
MinFracAccept 0.5
"""


def exercise() -> None:
    """Call every NF stage-2 kernel once on tiny inputs with the production dtypes
    (writable and read-only images, as a memory map gives), so each compiles or
    loads from numba's cache; for :mod:`kernels.numba_cache`'s warm-up."""
    from .crystal import euler_to_matrix, matrix_to_euler, misorientation
    from .microstructure import median_root_kernel, paint_grid
    from .nfconfidence import confidence
    from .nfgrid import footprint, hex_grid
    from .nfmodel import predict_spots

    geo = NFGeometry.from_text(_TINY_GEOMETRY, "kernels.nffit exercise")
    u = euler_to_matrix(0.1, 0.2, 0.3)
    matrix_to_euler(u)
    misorientation(u, u)
    predict_spots(u, (1.0, 2.0), geo)
    footprint(np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]]))
    grid = hex_grid(25.0, 20.0)[:2]
    images = paint_grid(grid, np.stack([u, u]), geo)
    median_root_kernel(np.zeros((4, 4), np.bool_), np.zeros((4, 4), np.bool_))
    read_only = images.copy()
    read_only.setflags(write=False)
    for imgs in (images, read_only):
        confidence(u, grid[0], geo, imgs)
        fit_points(grid, geo, imgs, u[None])
