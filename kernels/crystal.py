"""Orientations of cubic crystals: Euler angles, matrices, misorientation, seed grids.

Conventions (those of MIDAS, ``FF_HEDM/src/GetMisorientation.c``):

* An orientation is a rotation matrix ``U`` that maps **crystal** vectors to
  **sample** vectors: a reciprocal-lattice vector ``g`` (crystal frame)
  points along ``U @ g`` in the sample frame (MIDAS's ``CalcDiffrSpots``
  multiplies ``OrientMatrix * Ghkl``).
* Euler angles ``(phi1, Phi, phi2)`` are in **radians** (MIDAS's
  ``Euler2OrientMat`` takes radians and the ``.mic`` file stores radians) and
  ``U = Rz(phi1) @ Rx(Phi) @ Rz(phi2)`` with active rotation matrices; this
  is the transpose of Bunge's (passive, sample-to-crystal) ``g``, so the
  angles are Bunge's.  MIDAS's ``Euler2OrientMat`` additionally
  re-orthogonalises through a quaternion; our matrices are orthonormal to
  rounding already, so we skip it.
* Crystal symmetry acts on the crystal side: ``U`` and ``U @ S`` describe
  the same crystal for each of the 24 proper rotations ``S`` of the cube
  (point group 432, MIDAS's ``CubSym`` table for space groups 207-230; the
  Laue class m-3m).  The misorientation of ``U1`` and ``U2`` is the smallest
  rotation angle of ``U1.T @ U2 @ S`` over the 24 ``S`` (MIDAS's
  ``GetMisOrientationAngle``, which does the same with quaternions).

The seed grid (:func:`fundamental_zone_grid`) plays the role of MIDAS's
seed files (``GenerateSeedLookupTables.c`` keeps the points of a master
SO(3) list that lie in the fundamental zone): we build the master list from
the Hopf fibration (Yershova et al. 2010, "Generating uniform incremental
grids on SO(3) using the Hopf fibration"), with a Fibonacci lattice on the
sphere instead of HEALPix, and keep the points in the cubic fundamental
zone.  Area on the sphere times angle on the fibre is the invariant (Haar)
measure, so the grid is uniform.
"""
from __future__ import annotations

import math
from typing import Union

import numpy as np
from numba import njit

from .errors import KernelArgumentError

__all__ = [
    "CUBIC_SYMMETRY", "euler_to_matrix", "matrix_to_euler", "random_orientations",
    "misorientation", "rotation_matrix", "rotation_vector_matrix", "quaternion_to_matrix",
    "matrix_to_quaternion", "fundamental_zone_grid", "in_fundamental_zone",
    "euler_to_matrix_kernel", "matrix_to_euler_kernel", "misorientation_kernel",
]


def _cubic_symmetry() -> np.ndarray:
    """The 24 proper rotations of the cube: signed permutation matrices of det +1."""
    import itertools

    ops = []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            m = np.zeros((3, 3))
            for row, (col, s) in enumerate(zip(perm, signs)):
                m[row, col] = s
            if np.linalg.det(m) > 0:
                ops.append(m)
    ops.sort(key=lambda m: -np.trace(m))  # identity first
    return np.ascontiguousarray(ops)


#: (24, 3, 3) proper rotations of point group 432, identity first.
CUBIC_SYMMETRY = _cubic_symmetry()
CUBIC_SYMMETRY.setflags(write=False)


@njit(cache=True, nogil=True)
def euler_to_matrix_kernel(euler, out):
    """``out[i] = Rz(e0) Rx(e1) Rz(e2)`` for each row of ``euler`` (radians)."""
    for i in range(euler.shape[0]):
        c1 = math.cos(euler[i, 0])
        s1 = math.sin(euler[i, 0])
        c = math.cos(euler[i, 1])
        s = math.sin(euler[i, 1])
        c2 = math.cos(euler[i, 2])
        s2 = math.sin(euler[i, 2])
        out[i, 0, 0] = c2 * c1 - s2 * c * s1
        out[i, 0, 1] = -c2 * c * s1 - s2 * c1
        out[i, 0, 2] = s * s1
        out[i, 1, 0] = c2 * s1 + s2 * c * c1
        out[i, 1, 1] = c2 * c * c1 - s2 * s1
        out[i, 1, 2] = -s * c1
        out[i, 2, 0] = s2 * s
        out[i, 2, 1] = c2 * s
        out[i, 2, 2] = c


@njit(cache=True, nogil=True)
def matrix_to_euler_kernel(mats, out):
    """Inverse of :func:`euler_to_matrix_kernel`: phi1, phi2 in [0, 2pi), Phi in [0, pi].

    When ``Phi`` is 0 or pi only ``phi1 +- phi2`` is defined; then ``phi2 = 0``
    (MIDAS's ``OrientMat2Euler`` sets the first angle to 0 instead; both give
    the same matrix).
    """
    two_pi = 2.0 * math.pi
    for i in range(mats.shape[0]):
        m = mats[i]
        c = min(1.0, max(-1.0, m[2, 2]))
        s = math.hypot(m[0, 2], m[1, 2])
        big_phi = math.atan2(s, c)
        if s > 1e-10:
            phi1 = math.atan2(m[0, 2], -m[1, 2])
            phi2 = math.atan2(m[2, 0], m[2, 1])
        else:
            phi2 = 0.0
            # Rz(phi1) Rx(0 or pi): first column is (cos phi1, sin phi1, 0)
            phi1 = math.atan2(m[1, 0], m[0, 0])
        out[i, 0] = phi1 % two_pi
        out[i, 1] = big_phi
        out[i, 2] = phi2 % two_pi


@njit(cache=True, nogil=True)
def _rotation_angle(m):
    # Robust for small angles: atan2(|axial vector|, (trace - 1) / 2).
    sx = m[2, 1] - m[1, 2]
    sy = m[0, 2] - m[2, 0]
    sz = m[1, 0] - m[0, 1]
    sin_a = 0.5 * math.sqrt(sx * sx + sy * sy + sz * sz)
    cos_a = 0.5 * (m[0, 0] + m[1, 1] + m[2, 2] - 1.0)
    return math.atan2(sin_a, cos_a)


@njit(cache=True, nogil=True)
def misorientation_angle(u1, u2, sym, work):
    """Misorientation (radians) of two (3, 3) orientations; ``work`` is (2, 3, 3) scratch."""
    d = work[0]
    r = work[1]
    for a in range(3):
        for b in range(3):
            acc = 0.0
            for k in range(3):
                acc += u1[k, a] * u2[k, b]
            d[a, b] = acc
    best_tr = -10.0
    best = 0
    for s in range(sym.shape[0]):
        tr = 0.0
        for a in range(3):
            for k in range(3):
                tr += d[a, k] * sym[s, k, a]
        if tr > best_tr:
            best_tr = tr
            best = s
    for a in range(3):
        for b in range(3):
            acc = 0.0
            for k in range(3):
                acc += d[a, k] * sym[best, k, b]
            r[a, b] = acc
    return _rotation_angle(r)


@njit(cache=True, nogil=True)
def misorientation_kernel(u1, u2, sym, out):
    """``out[i]`` = misorientation (degrees) of ``u1[i]`` and ``u2[i]`` under ``sym``."""
    work = np.empty((2, 3, 3))
    for i in range(u1.shape[0]):
        out[i] = math.degrees(misorientation_angle(u1[i], u2[i], sym, work))


ArrayLike = Union[float, np.ndarray]


def euler_to_matrix(phi1: ArrayLike, Phi: ArrayLike, phi2: ArrayLike) -> np.ndarray:
    """Orientation matrix from Bunge Euler angles in radians (MIDAS's ``Euler2OrientMat``).

    Parameters
    ----------
    phi1, Phi, phi2 : float or arrays broadcastable to one shape ``S``
        Radians.

    Returns
    -------
    ``(*S, 3, 3)`` float64 ``U = Rz(phi1) Rx(Phi) Rz(phi2)`` (crystal -> sample).
    """
    e = np.stack(np.broadcast_arrays(*(np.asarray(a, dtype=np.float64)
                                       for a in (phi1, Phi, phi2))), axis=-1)
    if not np.all(np.isfinite(e)):
        raise KernelArgumentError("euler_to_matrix: Euler angles must be finite (radians)")
    flat = np.ascontiguousarray(e.reshape(-1, 3))
    out = np.empty((flat.shape[0], 3, 3))
    euler_to_matrix_kernel(flat, out)
    return out.reshape(e.shape[:-1] + (3, 3))


def _as_matrices(name: str, u) -> np.ndarray:
    u = np.asarray(u, dtype=np.float64)
    if u.ndim < 2 or u.shape[-2:] != (3, 3):
        raise KernelArgumentError(f"{name}: expected (..., 3, 3) rotation matrices, "
                                  f"got shape {u.shape}")
    if not np.all(np.isfinite(u)):
        raise KernelArgumentError(f"{name}: matrices must be finite")
    return u


def matrix_to_euler(u) -> np.ndarray:
    """Bunge Euler angles (radians) of orientation matrices; inverse of :func:`euler_to_matrix`.

    Returns
    -------
    (..., 3) float64 ``(phi1, Phi, phi2)`` with phi1, phi2 in [0, 2pi), Phi in [0, pi].
    """
    u = _as_matrices("matrix_to_euler", u)
    flat = np.ascontiguousarray(u.reshape(-1, 3, 3))
    out = np.empty((flat.shape[0], 3))
    matrix_to_euler_kernel(flat, out)
    return out.reshape(u.shape[:-2] + (3,))


def misorientation(u1, u2, symmetry: np.ndarray = CUBIC_SYMMETRY) -> Union[float, np.ndarray]:
    """Misorientation angle in degrees under the crystal ``symmetry`` (24 cubic operators).

    ``u1`` and ``u2`` are (..., 3, 3) orientation matrices that broadcast
    together; a pair of single matrices gives a float.
    """
    u1 = _as_matrices("u1", u1)
    u2 = _as_matrices("u2", u2)
    sym = _as_matrices("symmetry", symmetry)
    try:
        a, b = np.broadcast_arrays(u1, u2)
    except ValueError:
        raise KernelArgumentError(
            f"misorientation: shapes {u1.shape} and {u2.shape} do not broadcast") from None
    shape = a.shape[:-2]
    fa = np.ascontiguousarray(a.reshape(-1, 3, 3))
    fb = np.ascontiguousarray(b.reshape(-1, 3, 3))
    out = np.empty(fa.shape[0])
    misorientation_kernel(fa, fb, np.ascontiguousarray(sym.reshape(-1, 3, 3)), out)
    return float(out[0]) if shape == () else out.reshape(shape)


def quaternion_to_matrix(q) -> np.ndarray:
    """(..., 4) quaternions (w, x, y, z), normalised here -> (..., 3, 3) active rotations."""
    q = np.asarray(q, dtype=np.float64)
    if q.shape[-1:] != (4,):
        raise KernelArgumentError(f"expected (..., 4) quaternions, got shape {q.shape}")
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(norm == 0):
        raise KernelArgumentError("quaternion of norm 0")
    w, x, y, z = np.moveaxis(q / norm, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def matrix_to_quaternion(u) -> np.ndarray:
    """(..., 3, 3) rotations -> (..., 4) unit quaternions (w, x, y, z) with w >= 0."""
    u = _as_matrices("matrix_to_quaternion", u)
    flat = u.reshape(-1, 3, 3)
    q = np.empty((flat.shape[0], 4))
    for i, m in enumerate(flat):  # Shepperd's method: divide by the largest component
        tr = np.trace(m)
        cand = np.array([tr, m[0, 0], m[1, 1], m[2, 2]])
        k = int(np.argmax(cand))
        if k == 0:
            s = 2.0 * math.sqrt(1.0 + tr)
            q[i] = [s / 4, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s,
                    (m[1, 0] - m[0, 1]) / s]
        else:
            a, b, c = (k - 1), k % 3, (k + 1) % 3
            s = 2.0 * math.sqrt(max(1.0 + m[a, a] - m[b, b] - m[c, c], 0.0))
            v = np.empty(3)
            v[a] = s / 4
            v[b] = (m[b, a] + m[a, b]) / s
            v[c] = (m[c, a] + m[a, c]) / s
            q[i] = [(m[c, b] - m[b, c]) / s, v[0], v[1], v[2]]
    q *= np.where(q[:, :1] < 0, -1.0, 1.0)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q.reshape(u.shape[:-2] + (4,))


def rotation_matrix(axis, angle_deg: float) -> np.ndarray:
    """Active rotation by ``angle_deg`` degrees about ``axis`` (any non-zero 3-vector)."""
    axis = np.asarray(axis, dtype=np.float64)
    n = np.linalg.norm(axis)
    if axis.shape != (3,) or not n > 0:
        raise KernelArgumentError(f"axis must be a non-zero 3-vector, got {axis!r}")
    return rotation_vector_matrix(axis / n * math.radians(angle_deg))


def rotation_vector_matrix(w) -> np.ndarray:
    """Rotation matrix of a rotation vector ``w`` (radians; Rodrigues' formula)."""
    w = np.asarray(w, dtype=np.float64)
    theta = float(np.linalg.norm(w))
    k = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    if theta < 1e-12:
        return np.eye(3) + k
    return np.eye(3) + math.sin(theta) / theta * k + (1 - math.cos(theta)) / theta**2 * (k @ k)


def random_orientations(n: int, rng=None) -> np.ndarray:
    """``n`` orientations uniform in SO(3) (Shoemake's uniform quaternions), (n, 3, 3).

    ``rng`` is a ``numpy.random.Generator`` or a seed.  Plain NumPy: drawing
    orientations is never on a hot path.
    """
    if not (isinstance(n, (int, np.integer)) and n >= 0):
        raise KernelArgumentError(f"n must be an integer >= 0, got {n!r}")
    rng = np.random.default_rng(rng)
    u = rng.random((n, 3))
    a, b = np.sqrt(1 - u[:, 0]), np.sqrt(u[:, 0])
    q = np.stack([a * np.sin(2 * np.pi * u[:, 1]), a * np.cos(2 * np.pi * u[:, 1]),
                  b * np.sin(2 * np.pi * u[:, 2]), b * np.cos(2 * np.pi * u[:, 2])], -1)
    return quaternion_to_matrix(q)


def in_fundamental_zone(u, symmetry: np.ndarray = CUBIC_SYMMETRY, tol: float = 1e-9):
    """True where ``u`` is the smallest rotation among its symmetry equivalents ``u @ S``.

    That is MIDAS's fundamental-zone test (``BringDownToFundamentalRegionSym``
    picks the equivalent quaternion of largest w); boundary ties count as in.
    """
    u = _as_matrices("in_fundamental_zone", u)
    tr = np.einsum("...ij,sji->...s", u, np.asarray(symmetry))
    return np.trace(u, axis1=-2, axis2=-1) >= tr.max(axis=-1) - tol


def fundamental_zone_grid(step_deg: float, symmetry: np.ndarray = CUBIC_SYMMETRY) -> np.ndarray:
    """A uniform grid of orientations in the fundamental zone, spacing about ``step_deg``.

    Built on the Hopf fibration of SO(3) (module docstring): ``n_psi =
    ceil(360 / step)`` angles on the fibre times ``n_psi**2 / pi`` Fibonacci
    points on the sphere (equal spacing in both), then the points of the
    fundamental zone are kept (about 1/24 of them for cubic symmetry).

    Returns
    -------
    (n, 3, 3) float64 orientation matrices.
    """
    if not (isinstance(step_deg, (int, float, np.floating)) and 0.5 <= step_deg <= 90):
        raise KernelArgumentError(
            f"step_deg must be in [0.5, 90] degrees, got {step_deg!r} (0.5 deg would already "
            "give about 1.4 million cubic seeds)")
    n_psi = int(math.ceil(360.0 / step_deg))
    n_s2 = max(1, int(round(n_psi * n_psi / math.pi)))
    # Fibonacci lattice on the sphere: equal-area z bands, golden-angle longitudes.
    k = np.arange(n_s2) + 0.5
    cos_t = 1.0 - 2.0 * k / n_s2
    theta = np.arccos(cos_t)
    phi = (np.pi * (3.0 - math.sqrt(5.0)) * np.arange(n_s2)) % (2 * np.pi)
    psi = (np.arange(n_psi) + 0.5) * (2 * np.pi / n_psi)
    # every sphere point (theta[i], phi[i]) with every fibre angle
    t = np.repeat(theta, n_psi)
    p = np.repeat(phi, n_psi)
    s = np.tile(psi, n_s2)
    q = np.stack([np.cos(t / 2) * np.cos(s / 2), np.cos(t / 2) * np.sin(s / 2),
                  np.sin(t / 2) * np.cos(p + s / 2), np.sin(t / 2) * np.sin(p + s / 2)], -1)
    out = []
    for chunk in np.array_split(q, max(1, len(q) // 200_000)):
        m = quaternion_to_matrix(chunk)
        out.append(m[in_fundamental_zone(m, symmetry)])
    return np.ascontiguousarray(np.concatenate(out))
