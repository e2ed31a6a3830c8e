"""FF-HEDM forward model: where a grain of given orientation, position and lattice diffracts.

Every convention is MIDAS's FF one, taken from :mod:`kernels.geometry` (its table cites the
MIDAS source line of each): the beam travels along +x, the sample turns by +omega about +z
(``Rz(omega)`` active), the detector is a plane at distance ``Lsd`` (um) downstream, tilted
as MIDAS FF tilts it (``Rx(tx) Ry(ty) Rz(tz)`` about its point on the beam). A detector
point ``(Y, Z)`` (um, in the detector plane) is the lab point ``Lsd x + T (0, Y, Z)``; its
pixel is ``(ybc - Y / px, zbc + Z / px)``, pixel ``(y, z)`` being column ``y``, row ``z`` of
the frame after ``ImTransOpt`` -- lab +y lies towards *smaller* columns, as in MIDAS's FF
programs (``FitSetupParamsAllZarr.c`` 222, ``ForwardSimulationCompressed.c`` 1913).

Per reflection ``hkl`` of a grain with orientation ``U`` (crystal -> sample), lattice
``(a, b, c, alpha, beta, gamma)`` and sample position ``p`` (um):

1. ``g = B hkl`` with MIDAS's ``B`` of the lattice (``CorrectHKLsLatC``,
   ``ForwardSimulationCompressed.c`` 339-372; 1/A, ``|g| = 1/d``); ``G = U g`` in the
   sample frame;
2. **Bragg condition**: ``Rz(omega) G`` must satisfy ``-G_x cos(omega) + G_y
   sin(omega) = lambda |g|^2 / 2``, two omegas (MIDAS's ``CalcOmega``,
   :func:`kernels.geometry.calc_omega_kernel`);
3. **the diffracted ray**: direction ``k = x / lambda + Rz(omega) G`` (unit length after
   normalising), from the grain's lab position ``Rz(omega) p``, meets the detector plane at
   ``hit``; its detector ``(Y, Z)`` give the pixel (MIDAS's ``DisplacementInTheSpot``
   aims the ray at the spot seen from the origin, the same to O(p / Lsd)^2);
4. **as seen from the origin** (what a spot list without positions records): ``2theta =
   atan2(hypot(hit_y, hit_z), hit_x)``, ``eta`` of ``(hit_y, hit_z)`` as MIDAS's
   ``CalcEtaAngle`` (:func:`kernels.geometry.eta_kernel`);
5. **filters**: MIDAS's ``MinEta`` pole exclusion on ``eta``, its ``OmegaRange`` /
   ``BoxSize`` windows (``BoxSize`` on the origin view's ``hit_y, hit_z``), the pixel on
   the detector and the frame in the sweep: ``frame = (omega - OmegaStart) / OmegaStep``
   (continuous; frame ``k``'s omega is its stamp ``OmegaStart + k OmegaStep``, MIDAS's
   ``PeaksFittingOMPZarrRefactor.c`` 2856), taken modulo a full turn into ``[-0.5, turn -
   0.5)``; kept when it rounds to a frame of the sweep.

Every kernel is flat (``@njit``), outputs passed in; the tests hold a NumPy reference of
the same steps (``tests/ff_reference.py``) and a transcription of MIDAS's own equations
(``tests/unit/test_kernels_ff_midas.py``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from .errors import KernelArgumentError
from .geometry import calc_omega_kernel, eta_kernel, frame_position

__all__ = ["FFArrays", "b_matrix", "b_matrix_kernel", "ff_spots_kernel", "hkl_spots_kernel",
           "ff_spots", "residuals_kernel", "pixel_to_lab_kernel", "fable_strain",
           "lattice_from_strain", "lattice_rotation", "FF_SPOT_COLS", "N_FF_COLS"]

#: Columns of a predicted-spot row.
FF_SPOT_COLS = ("omega", "eta", "two_theta", "y", "z", "frame", "ring", "hkl")
OME, ETA, TTH, YPX, ZPX, FRM, RNG, HKL = range(8)
N_FF_COLS = 8


class FFArrays(NamedTuple):
    """The FF geometry as the flat arrays and scalars the kernels take (one numba argument).

    hkl : (n, 3) float64 Miller indices; ring : (n,) int64 ring numbers;
    tilt : (3, 3) MIDAS FF's detector rotation (:func:`kernels.geometry.ff_tilt_matrix`);
    omega_ranges : (m, 2) deg; boxes : (m, 4) um;
    scalars: lsd, ybc, zbc (px), px (um), wavelength (A), omega_start, omega_step (deg),
    n_frames, n_pixels_y, n_pixels_z, min_eta (deg).
    """

    hkl: np.ndarray
    ring: np.ndarray
    tilt: np.ndarray
    omega_ranges: np.ndarray
    boxes: np.ndarray
    lsd: float
    ybc: float
    zbc: float
    px: float
    wavelength: float
    omega_start: float
    omega_step: float
    n_frames: int
    n_pixels_y: int
    n_pixels_z: int
    min_eta: float


@njit(cache=True, nogil=True)
def b_matrix_kernel(lat, out):
    """MIDAS's ``B`` (``CorrectHKLsLatC``) of lattice ``lat`` (a, b, c in A, angles deg)."""
    a, b, c = lat[0], lat[1], lat[2]
    d2r = math.pi / 180.0
    sa, sb, sg = math.sin(lat[3] * d2r), math.sin(lat[4] * d2r), math.sin(lat[5] * d2r)
    ca, cb, cg = math.cos(lat[3] * d2r), math.cos(lat[4] * d2r), math.cos(lat[5] * d2r)
    gpr = math.acos(max(-1.0, min(1.0, (ca * cb - cg) / (sa * sb))))
    bpr = math.acos(max(-1.0, min(1.0, (cg * ca - cb) / (sg * sa))))
    sbpr = math.sin(bpr)
    vol = a * b * c * sa * sbpr * sg
    apr = b * c * sa / vol
    bp = c * a * sb / vol
    cpr = a * b * sg / vol
    out[0, 0] = apr
    out[0, 1] = bp * math.cos(gpr)
    out[0, 2] = cpr * math.cos(bpr)
    out[1, 0] = 0.0
    out[1, 1] = bp * math.sin(gpr)
    out[1, 2] = -cpr * sbpr * ca
    out[2, 0] = 0.0
    out[2, 1] = 0.0
    out[2, 2] = cpr * sbpr * sa


def b_matrix(lattice) -> np.ndarray:
    """(3, 3) ``B`` of a lattice ``(a, b, c, alpha, beta, gamma)``: ``g = B hkl`` (1/A)."""
    lat = np.asarray(lattice, np.float64)
    if lat.shape != (6,) or not np.all(np.isfinite(lat)) or np.any(lat <= 0):
        raise KernelArgumentError(f"lattice must be 6 positive numbers, got {lattice!r}")
    out = np.empty((3, 3))
    b_matrix_kernel(lat, out)
    return out


@njit(cache=True, nogil=True)
def _ray(gl0, gl1, gl2, co, so, pos, a, res):
    """Diffracted ray of lab ``G`` at ``omega`` (``co``, ``so``: its cosine and sine) from
    sample point ``pos``: writes ``res`` = (Y px, Z px, eta, 2theta, hit_y, hit_z); returns
    False when it misses the plane."""
    lam = a.wavelength
    kx = 1.0 / lam + gl0
    ky = gl1
    kz = gl2
    kn = math.sqrt(kx * kx + ky * ky + kz * kz)
    kx /= kn
    ky /= kn
    kz /= kn
    rx = co * pos[0] - so * pos[1]
    ry = so * pos[0] + co * pos[1]
    rz = pos[2]
    t = a.tilt
    nx, ny, nz = t[0, 0], t[1, 0], t[2, 0]          # plane normal T x
    den = nx * kx + ny * ky + nz * kz
    if den <= 1e-12:
        return False
    s = (nx * (a.lsd - rx) + ny * (0.0 - ry) + nz * (0.0 - rz)) / den
    hx = rx + s * kx
    hy = ry + s * ky
    hz = rz + s * kz
    dx = hx - a.lsd
    # detector coordinates: T^T (hit - Lsd x)
    yy = t[0, 1] * dx + t[1, 1] * hy + t[2, 1] * hz
    zz = t[0, 2] * dx + t[1, 2] * hy + t[2, 2] * hz
    res[0] = a.ybc - yy / a.px          # MIDAS FF: lab +y towards smaller columns
    res[1] = a.zbc + zz / a.px
    res[2] = eta_kernel(hy, hz)
    res[3] = math.degrees(math.atan2(math.hypot(hy, hz), hx))
    res[4] = hy
    res[5] = hz
    return True


@njit(cache=True, nogil=True)
def _frame(ome, a):
    """Frame position of ``ome`` in ``[-0.5, turn - 0.5)`` (frame ``k``'s stamp at ``k``)."""
    f = frame_position(ome, a.omega_start, a.omega_step) + 0.5
    turn = 360.0 / abs(a.omega_step)
    f = f - math.floor(f / turn) * turn
    return f - 0.5


@njit(cache=True, nogil=True)
def hkl_spots_kernel(u, bmat, pos, a, h, omegas, etas, res, out, n):
    """The spots of reflection ``h`` (its two omegas, filtered) into ``out[n:]``; returns
    the new row count. ``omegas``, ``etas`` (2,) and ``res`` (6,) are scratch."""
    g0 = bmat[0, 0] * a.hkl[h, 0] + bmat[0, 1] * a.hkl[h, 1] + bmat[0, 2] * a.hkl[h, 2]
    g1 = bmat[1, 0] * a.hkl[h, 0] + bmat[1, 1] * a.hkl[h, 1] + bmat[1, 2] * a.hkl[h, 2]
    g2 = bmat[2, 0] * a.hkl[h, 0] + bmat[2, 1] * a.hkl[h, 1] + bmat[2, 2] * a.hkl[h, 2]
    gx = u[0, 0] * g0 + u[0, 1] * g1 + u[0, 2] * g2
    gy = u[1, 0] * g0 + u[1, 1] * g1 + u[1, 2] * g2
    gz = u[2, 0] * g0 + u[2, 1] * g1 + u[2, 2] * g2
    gg = gx * gx + gy * gy + gz * gz
    nsol = calc_omega_kernel(gx, gy, gz, 0.5 * a.wavelength * gg, omegas, etas)
    for i in range(nsol):
        ome = omegas[i]
        co = math.cos(math.radians(ome))
        so = math.sin(math.radians(ome))
        if not _ray(co * gx - so * gy, so * gx + co * gy, gz, co, so, pos, a, res):
            continue
        eta = res[2]
        ae = abs(eta)
        if ae < a.min_eta or 180.0 - ae < a.min_eta:
            continue
        keep = False
        for r in range(a.omega_ranges.shape[0]):
            if (a.omega_ranges[r, 0] <= ome <= a.omega_ranges[r, 1]
                    and a.boxes[r, 0] < res[4] < a.boxes[r, 1]
                    and a.boxes[r, 2] < res[5] < a.boxes[r, 3]):
                keep = True
                break
        if not keep:
            continue
        if not (0.0 <= res[0] < a.n_pixels_y and 0.0 <= res[1] < a.n_pixels_z):
            continue
        f = _frame(ome, a)
        if f >= a.n_frames - 0.5:
            continue
        out[n, OME] = ome
        out[n, ETA] = eta
        out[n, TTH] = res[3]
        out[n, YPX] = res[0]
        out[n, ZPX] = res[1]
        out[n, FRM] = f
        out[n, RNG] = a.ring[h]
        out[n, HKL] = h
        n += 1
    return n


@njit(cache=True, nogil=True)
def ff_spots_kernel(u, bmat, pos, a, out):
    """Spots of one grain: rows of :data:`FF_SPOT_COLS` into ``out`` (>= 2 n_hkl, 8).

    ``u`` (3, 3) orientation, ``bmat`` (3, 3) ``B`` of its lattice, ``pos`` (3,) sample
    position (um). Returns the number of rows written (module docstring's filters).
    """
    omegas = np.empty(2)
    etas = np.empty(2)
    res = np.empty(6)
    n = 0
    for h in range(a.hkl.shape[0]):
        n = hkl_spots_kernel(u, bmat, pos, a, h, omegas, etas, res, out, n)
    return n


def ff_spots(u, lattice, pos, arrays: FFArrays) -> np.ndarray:
    """Predicted spots of one grain, (n, 8) rows of :data:`FF_SPOT_COLS` (wrapper)."""
    u = np.ascontiguousarray(u, np.float64)
    if u.shape != (3, 3):
        raise KernelArgumentError(f"orientation must be (3, 3), got {u.shape}")
    p = np.ascontiguousarray(pos, np.float64)
    out = np.empty((2 * len(arrays.hkl), N_FF_COLS))
    n = ff_spots_kernel(u, b_matrix(lattice), p, arrays, out)
    return out[:n].copy()


@njit(cache=True, nogil=True)
def residuals_kernel(u, bmat, pos, a, obs, hkl_index, out):
    """Residuals of observed spots against the grain's prediction of their reflection.

    ``obs`` (n, 3): observed (y px, z px, omega deg); ``hkl_index`` (n,) the reflection of
    each. Of the reflection's two omegas, the one nearer the observed omega is used.
    ``out`` (n, 3): (dy px, dz px, domega in frames) predicted - observed; a reflection
    that no longer diffracts gives 1e3 in every column.
    """
    omegas = np.empty(2)
    etas = np.empty(2)
    res = np.empty(6)
    step = abs(a.omega_step)
    for k in range(obs.shape[0]):
        h = hkl_index[k]
        g0 = bmat[0, 0] * a.hkl[h, 0] + bmat[0, 1] * a.hkl[h, 1] + bmat[0, 2] * a.hkl[h, 2]
        g1 = bmat[1, 0] * a.hkl[h, 0] + bmat[1, 1] * a.hkl[h, 1] + bmat[1, 2] * a.hkl[h, 2]
        g2 = bmat[2, 0] * a.hkl[h, 0] + bmat[2, 1] * a.hkl[h, 1] + bmat[2, 2] * a.hkl[h, 2]
        gx = u[0, 0] * g0 + u[0, 1] * g1 + u[0, 2] * g2
        gy = u[1, 0] * g0 + u[1, 1] * g1 + u[1, 2] * g2
        gz = u[2, 0] * g0 + u[2, 1] * g1 + u[2, 2] * g2
        gg = gx * gx + gy * gy + gz * gz
        nsol = calc_omega_kernel(gx, gy, gz, 0.5 * a.wavelength * gg, omegas, etas)
        best = -1
        bd = 1e30
        for i in range(nsol):
            d = omegas[i] - obs[k, 2]
            d -= 360.0 * math.floor(d / 360.0 + 0.5)
            if abs(d) < abs(bd):
                bd = d
                best = i
        ok = False
        if best >= 0:
            ome = omegas[best]
            co = math.cos(math.radians(ome))
            so = math.sin(math.radians(ome))
            ok = _ray(co * gx - so * gy, so * gx + co * gy, gz, co, so, pos, a, res)
        if ok:
            out[k, 0] = res[0] - obs[k, 0]
            out[k, 1] = res[1] - obs[k, 1]
            out[k, 2] = bd / step
        else:
            out[k, 0] = 1e3
            out[k, 1] = 1e3
            out[k, 2] = 1e3


@njit(cache=True, nogil=True)
def pixel_to_lab_kernel(y, z, a, out):
    """Lab points (um) of pixels ``(y[i], z[i])`` on the detector plane: ``out`` (n, 3)
    (MIDAS FF's ``Yc = -(y - ybc) px``, ``FitSetupParamsAllZarr.c`` 222-227)."""
    t = a.tilt
    for i in range(y.shape[0]):
        yy = -(y[i] - a.ybc) * a.px
        zz = (z[i] - a.zbc) * a.px
        out[i, 0] = a.lsd + t[0, 1] * yy + t[0, 2] * zz
        out[i, 1] = t[1, 1] * yy + t[1, 2] * zz
        out[i, 2] = t[2, 1] * yy + t[2, 2] * zz


def _direct(lattice) -> np.ndarray:
    """MIDAS's direct-lattice matrix ``A`` of ``CalcStrainTensorFableBeaudoin``."""
    a, b, c = lattice[:3]
    al, be, ga = np.radians(lattice[3:])
    cgp = (math.cos(al) * math.cos(be) - math.cos(ga)) / (math.sin(al) * math.sin(be))
    sgp = math.sin(math.acos(max(-1.0, min(1.0, cgp))))
    return np.array([[a * math.sin(be) * sgp, 0, 0],
                     [-a * math.sin(be) * cgp, b * math.sin(al), 0],
                     [a * math.cos(be), b * math.cos(al), c]])


def fable_strain(reference, lattice, u) -> np.ndarray:
    """Strain in the sample frame of a grain of ``lattice`` and orientation ``u`` against the
    unstrained ``reference`` lattice: MIDAS's ``CalcStrainTensorFableBeaudoin``
    (``eps_grain = sym(A A0^-1) - I``, ``eps = U eps_grain U^T``)."""
    a0 = _direct(np.asarray(reference, float))
    a1 = _direct(np.asarray(lattice, float))
    prod = a1 @ np.linalg.inv(a0)
    eg = 0.5 * (prod + prod.T) - np.eye(3)
    u = np.asarray(u, float)
    return u @ eg @ u.T


def lattice_from_strain(reference, eps_crystal) -> np.ndarray:
    """Lattice parameters of the reference lattice deformed by ``(I + eps_crystal)`` (a
    symmetric strain in the crystal frame): the six numbers a grain of that strain has."""
    ref = np.asarray(reference, float)
    al, be, ga = np.radians(ref[3:])
    va = ref[0] * np.array([1.0, 0, 0])
    vb = ref[1] * np.array([math.cos(ga), math.sin(ga), 0])
    cx = math.cos(be)
    cy = (math.cos(al) - math.cos(be) * math.cos(ga)) / math.sin(ga)
    vc = ref[2] * np.array([cx, cy, math.sqrt(max(0.0, 1 - cx * cx - cy * cy))])
    f = np.eye(3) + np.asarray(eps_crystal, float)
    va, vb, vc = f @ va, f @ vb, f @ vc

    def ang(p, q):
        return math.degrees(math.acos(np.dot(p, q) / (np.linalg.norm(p) * np.linalg.norm(q))))

    return np.array([np.linalg.norm(va), np.linalg.norm(vb), np.linalg.norm(vc),
                     ang(vb, vc), ang(va, vc), ang(va, vb)])


def lattice_rotation(u, lattice, reference) -> np.ndarray:
    """The orientation of a strained grain free of the setting of its cell: the rotation of
    the polar decomposition of ``U B(lattice) B(reference)^-1``.

    A strained cubic cell has 24 descriptions (the lattice map ``U B`` after each symmetry
    operation ``S``, refactored as an orientation times MIDAS's upper-triangular ``B`` of
    the permuted lattice) that give the same spots; their ``U`` differ beyond ``S`` by
    rotations as large as the shear, their lattice rotations by ``S`` exactly, so two fits
    of one grain agree under the crystal symmetry.
    """
    f = np.asarray(u, float) @ b_matrix(lattice) @ np.linalg.inv(b_matrix(reference))
    w, _, vt = np.linalg.svd(f)
    r = w @ vt
    if np.linalg.det(r) < 0:
        raise KernelArgumentError("lattice_rotation: the lattice map is not a proper rotation")
    return r
