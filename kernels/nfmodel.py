"""NF-HEDM forward model: where a voxel of given orientation diffracts (after MIDAS).

Laboratory frame (MIDAS's): the beam travels along +x, the sample rotates
by omega about +z, detectors are planes perpendicular to the beam at
distances ``Lsd`` (um) downstream, detector y is lab y and detector z is
lab z; pixel ``(y, z)`` of a lab point is ``(y / px + ybc, z / px + zbc)``.

Per reflection ``g`` (crystal frame, from :mod:`kernels.hkl`), with ``G =
U @ g`` in the sample frame and ``v = |g| sin(theta)``:

1. **Bragg condition** (MIDAS's ``CalcOmega``): the rotated vector
   ``Rz(omega) G`` must satisfy ``-Gx cos(omega) + Gy sin(omega) = v``.  We
   solve it in closed form, ``omega = alpha + asin(v / rho)`` and ``alpha +
   180 - asin(v / rho)`` with ``rho = hypot(Gx, Gy)``, ``alpha =
   atan2(Gx, Gy)``, both wrapped to (-180, 180]; MIDAS solves a quadratic in
   cos(omega) and picks the sign of each root by substitution (same
   solutions to rounding; no special case at ``Gy = 0``).
2. **eta** (``CalcEtaAngle``): of the rotated vector's (y, z):
   ``acos(z / hypot(y, z))``, negated when ``y > 0``; the spot centre for a
   voxel at the rotation axis on the first detector is ``(yl, zl) =
   (-sin(eta), cos(eta)) * Lsd tan(2 theta)`` (``CalcSpotPosition``).
3. **filters** (``CalcDiffrSpots_Furnace``): drop spots with ``|eta|`` or
   ``180 - |eta|`` below ``ExcludePoleAngle``; keep a spot when, for some
   omega range ``i``, ``OmegaRange_i`` contains omega and ``BoxSize_i``
   contains (yl, zl), all strict inequalities.
4. **voxel displacement** (``DisplacementSpots``): a voxel at sample (a, b)
   sits at ``(xa, ya) = Rz(omega)(a, b)``; its ray in the direction of the
   spot reaches the first detector at ``(ya + yl t, zl t)``, ``t = 1 - xa /
   Lsd``; then MIDAS's tilt projection (``RotMatTilts``, ``P0``) and pixels.
5. **more distances** (``CalcFracOverlap``): the centre of the axis voxel
   scales about the beam centre, ``(Yc - ybc0) Lsd_k / Lsd_0 + ybc_k``, and
   the voxel's pixel offset from that centre is carried over unchanged.
   Without tilts this equals the exact ray to distance k.
6. **frame** (``OmeBin``): ``floor((omega - OmegaStart) / OmegaStep)``, valid
   in ``[0, n_frames)``; a negative step counts frames downward in omega.

:func:`predict_spots` returns those spots for one voxel; the confidence and
fit kernels (:mod:`kernels.nfconfidence`, :mod:`kernels.nffit`) inline the
same steps per grid-point footprint.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .errors import KernelArgumentError
from .nfgeometry import NFGeometry

__all__ = ["SPOT_DTYPE", "predict_spots", "theoretical_spots_kernel", "calc_omega_kernel",
           "project_kernel", "predict_spots_kernel", "frame_of"]

#: One row per spot and detector distance.
SPOT_DTYPE = np.dtype([("omega", np.float64), ("eta", np.float64), ("y", np.float64),
                       ("z", np.float64), ("frame", np.int32), ("distance", np.int32),
                       ("ring", np.int32), ("hkl", np.int32)])

SPOT_FIELDS = ("omega", "eta", "y", "z", "frame", "distance", "ring", "hkl")

# Columns of the theoretical-spot table written by theoretical_spots_kernel.
YL, ZL, OMEGA, ETA, RING, HKL = 0, 1, 2, 3, 4, 5
N_SPOT_COLS = 6


@njit(cache=True, nogil=True)
def calc_omega_kernel(gx, gy, gz, v, omegas, etas):
    """The omegas (deg, (-180, 180]) bringing ``G`` into diffraction, and their etas (deg).

    Writes up to 2 solutions into ``omegas``/``etas``; returns how many.
    """
    rho = math.hypot(gx, gy)
    if rho == 0.0 or abs(v) > rho:
        return 0
    alpha = math.atan2(gx, gy)
    s = math.asin(v / rho)
    n = 0
    for w in (alpha + s, alpha + math.pi - s):
        deg = math.degrees(w)
        while deg > 180.0:
            deg -= 360.0
        while deg <= -180.0:
            deg += 360.0
        rad = math.radians(deg)
        yw = math.sin(rad) * gx + math.cos(rad) * gy
        eta = math.degrees(math.acos(max(-1.0, min(1.0, gz / math.hypot(yw, gz)))))
        if yw > 0:
            eta = -eta
        omegas[n] = deg
        etas[n] = eta
        n += 1
    return n


@njit(cache=True, nogil=True)
def theoretical_spots_kernel(u, m, out):
    """Spots of orientation ``u`` on the first detector, after MIDAS's filters.

    ``m`` is the geometry's :class:`~kernels.nfgeometry.ModelArrays`; ``out``
    is (>= 2 n_hkl, 6), rows ``(yl um, zl um, omega deg, eta deg, ring, hkl
    index)``.  Returns the number of rows written.
    """
    omegas = np.empty(2)
    etas = np.empty(2)
    n = 0
    for h in range(m.g.shape[0]):
        gx = u[0, 0] * m.g[h, 0] + u[0, 1] * m.g[h, 1] + u[0, 2] * m.g[h, 2]
        gy = u[1, 0] * m.g[h, 0] + u[1, 1] * m.g[h, 1] + u[1, 2] * m.g[h, 2]
        gz = u[2, 0] * m.g[h, 0] + u[2, 1] * m.g[h, 1] + u[2, 2] * m.g[h, 2]
        nsol = calc_omega_kernel(gx, gy, gz, m.gsin[h], omegas, etas)
        for i in range(nsol):
            eta = etas[i]
            aeta = abs(eta)
            if aeta < m.exclude_pole or 180.0 - aeta < m.exclude_pole:
                continue
            er = math.radians(eta)
            yl = -math.sin(er) * m.radius[h]
            zl = math.cos(er) * m.radius[h]
            ome = omegas[i]
            keep = False
            for r in range(m.omega_ranges.shape[0]):
                if (m.omega_ranges[r, 0] < ome < m.omega_ranges[r, 1]
                        and m.boxes[r, 0] < yl < m.boxes[r, 1]
                        and m.boxes[r, 2] < zl < m.boxes[r, 3]):
                    keep = True
                    break
            if keep:
                out[n, YL] = yl
                out[n, ZL] = zl
                out[n, OMEGA] = ome
                out[n, ETA] = eta
                out[n, RING] = m.ring[h]
                out[n, HKL] = h
                n += 1
    return n


@njit(cache=True, nogil=True)
def frame_of(omega, m):
    """MIDAS's ``OmeBin``: frame index of ``omega`` (may be out of range)."""
    return int(math.floor((omega - m.omega_start) / m.omega_step))


@njit(cache=True, nogil=True)
def project_kernel(yl, zl, sin_o, cos_o, a, b, m, out):
    """Pixel (y, z) on the first detector of the spot (yl, zl) seen from sample point (a, b).

    ``sin_o``/``cos_o`` of the spot's omega; MIDAS's ``DisplacementSpots``
    followed by its tilt projection.  Writes ``out[0], out[1]``.
    """
    lsd = m.lsd[0]
    xa = a * cos_o - b * sin_o
    ya = a * sin_o + b * cos_o
    t = 1.0 - xa / lsd
    dy = ya + yl * t
    dz = zl * t
    p1x = m.tilt[0, 1] * dy + m.tilt[0, 2] * dz
    p1y = m.tilt[1, 1] * dy + m.tilt[1, 2] * dz
    p1z = m.tilt[2, 1] * dy + m.tilt[2, 2] * dz
    ax = p1x - m.p0[0]
    ay = p1y - m.p0[1]
    az = p1z - m.p0[2]
    out[0] = (m.p0[1] - ay * m.p0[0] / ax) / m.px + m.ybc[0]
    out[1] = (m.p0[2] - az * m.p0[0] / ax) / m.px + m.zbc[0]


@njit(cache=True, nogil=True)
def predict_spots_kernel(u, a, b, m, spots, out):
    """Rows ``(omega, eta, y, z, frame, distance, ring, hkl)`` of a voxel at (a, b) um.

    ``spots`` is (>= 2 n_hkl, 6) scratch for :func:`theoretical_spots_kernel`;
    ``out`` is (>= 2 n_hkl n_dist, 8).  A row is written for each spot in
    the frame range and each distance where its pixel is on the detector.
    Returns the row count.
    """
    n_spots = theoretical_spots_kernel(u, m, spots)
    centre = np.empty(2)
    voxel = np.empty(2)
    k = 0
    for j in range(n_spots):
        ome = spots[j, OMEGA]
        frame = frame_of(ome, m)
        if frame < 0 or frame >= m.n_frames:
            continue
        rad = math.radians(ome)
        so = math.sin(rad)
        co = math.cos(rad)
        project_kernel(spots[j, YL], spots[j, ZL], so, co, 0.0, 0.0, m, centre)
        project_kernel(spots[j, YL], spots[j, ZL], so, co, a, b, m, voxel)
        for d in range(m.lsd.shape[0]):
            scale = m.lsd[d] / m.lsd[0]
            y = (centre[0] - m.ybc[0]) * scale + m.ybc[d] + (voxel[0] - centre[0])
            z = (centre[1] - m.zbc[0]) * scale + m.zbc[d] + (voxel[1] - centre[1])
            if not (0.0 <= y < m.n_pixels_y and 0.0 <= z < m.n_pixels_z):
                continue
            out[k, 0] = ome
            out[k, 1] = spots[j, ETA]
            out[k, 2] = y
            out[k, 3] = z
            out[k, 4] = frame
            out[k, 5] = d
            out[k, 6] = spots[j, RING]
            out[k, 7] = spots[j, HKL]
            k += 1
    return k


def check_orientation(name: str, u) -> np.ndarray:
    """``u`` as a C-contiguous (3, 3) float64 rotation matrix, else KernelArgumentError."""
    u = np.ascontiguousarray(u, dtype=np.float64)
    if u.shape != (3, 3) or not np.all(np.isfinite(u)):
        raise KernelArgumentError(f"{name}: expected a finite (3, 3) orientation matrix, "
                                  f"got shape {u.shape}")
    if not np.allclose(u @ u.T, np.eye(3), atol=1e-6) or np.linalg.det(u) < 0:
        raise KernelArgumentError(f"{name}: not a rotation matrix (U U^T != I or det < 0); "
                                  "build it with kernels.crystal.euler_to_matrix")
    return u


def predict_spots(u, position, geometry: NFGeometry) -> np.ndarray:
    """Spots of a voxel of orientation ``u`` at sample ``position`` (x, y) um.

    Parameters
    ----------
    u : (3, 3) orientation matrix (crystal -> sample, :mod:`kernels.crystal`)
    position : (x, y) of the voxel in the sample frame at omega = 0 (um)
    geometry : NFGeometry

    Returns
    -------
    Structured array of :data:`SPOT_DTYPE`, one row per spot and detector
    distance on the detector: omega and eta (deg), y and z (pixels, float;
    the pixel is ``floor``), frame, distance index, ring (1-based), hkl
    (row of ``geometry.hkls``).
    """
    u = check_orientation("u", u)
    pos = np.asarray(position, dtype=np.float64)
    if pos.shape != (2,) or not np.all(np.isfinite(pos)):
        raise KernelArgumentError(f"position: expected finite (x, y) in um, got {position!r}")
    m = geometry.arrays
    n_hkl = m.g.shape[0]
    spots = np.empty((2 * n_hkl, N_SPOT_COLS))
    table = np.empty((2 * n_hkl * m.lsd.shape[0], 8))
    n = predict_spots_kernel(u, float(pos[0]), float(pos[1]), m, spots, table)
    out = np.empty(n, SPOT_DTYPE)
    for i, name in enumerate(SPOT_FIELDS):
        out[name] = table[:n, i]
    return out
