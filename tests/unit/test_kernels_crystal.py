"""Orientations: Euler angles (MIDAS's convention), misorientation under the 24 cubic
operators, uniform random orientations and the fundamental-zone seed grid."""
import math

import numpy as np
import pytest

from kernels.crystal import (CUBIC_SYMMETRY, euler_to_matrix, fundamental_zone_grid,
                             in_fundamental_zone, matrix_to_euler, matrix_to_quaternion,
                             misorientation, quaternion_to_matrix, random_orientations,
                             rotation_matrix)
from kernels.errors import KernelArgumentError
from tests.nf_reference import ref_misorientation


def rz(a):
    return np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])


def rx(a):
    return np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])


def test_euler_to_matrix_is_rz_rx_rz_of_radians():
    rng = np.random.default_rng(0)
    e = rng.uniform([0, 0, 0], [2 * np.pi, np.pi, 2 * np.pi], (50, 3))
    got = euler_to_matrix(e[:, 0], e[:, 1], e[:, 2])
    want = np.array([rz(a) @ rx(b) @ rz(c) for a, b, c in e])
    assert np.allclose(got, want, atol=1e-14)
    assert euler_to_matrix(0.1, 0.2, 0.3).shape == (3, 3)


def test_euler_matrix_maps_crystal_to_sample():
    # Phi = 90 deg about x after phi1 = 0: the crystal's [001] lies along sample -y
    u = euler_to_matrix(0.0, math.pi / 2, 0.0)
    assert np.allclose(u @ [0, 0, 1], [0, -1, 0])
    # MIDAS Euler2OrientMat, first row, written out for one triple
    psi, phi, th = 0.3, 1.1, 2.0
    m00 = math.cos(th) * math.cos(psi) - math.sin(th) * math.cos(phi) * math.sin(psi)
    assert euler_to_matrix(psi, phi, th)[0, 0] == pytest.approx(m00, abs=1e-15)


def test_matrix_to_euler_round_trip_including_phi_zero():
    u = random_orientations(200, 1)
    e = matrix_to_euler(u)
    assert np.all((e[:, 1] >= 0) & (e[:, 1] <= np.pi))
    assert np.all((e[:, [0, 2]] >= 0) & (e[:, [0, 2]] < 2 * np.pi))
    assert np.allclose(euler_to_matrix(*e.T), u, atol=1e-12)
    for special in (euler_to_matrix(0.7, 0.0, 0.4), euler_to_matrix(0.7, np.pi, 0.4)):
        assert np.allclose(euler_to_matrix(*matrix_to_euler(special)), special, atol=1e-12)


def test_cubic_symmetry_is_the_rotation_group_of_the_cube():
    s = CUBIC_SYMMETRY
    assert s.shape == (24, 3, 3) and np.allclose(s[0], np.eye(3))
    assert np.allclose(np.linalg.det(s), 1)
    keys = {tuple(np.rint(m).astype(int).ravel()) for m in s}
    assert len(keys) == 24
    for a in s[::5]:
        for b in s:
            assert tuple(np.rint(a @ b).astype(int).ravel()) in keys


def test_misorientation_zero_between_symmetry_equivalents():
    u = random_orientations(30, 2)
    for k, s in enumerate(CUBIC_SYMMETRY):
        assert np.all(misorientation(u, u @ s) < 1e-6), k
    # a symmetry operator applied on the sample side is NOT an equivalent orientation
    assert np.all(misorientation(u, CUBIC_SYMMETRY[5] @ u)[:10] > 1.0)


@pytest.mark.parametrize("angle", [0.01, 0.25, 3.0, 20.0])
def test_misorientation_equals_small_rotation_angle(angle):
    u = random_orientations(20, 3)
    rng = np.random.default_rng(4)
    for v in u:
        r = rotation_matrix(rng.normal(size=3), angle)
        assert misorientation(v, r @ v) == pytest.approx(angle, abs=1e-7)
        assert misorientation(v, v @ r) == pytest.approx(angle, abs=1e-7)


def test_misorientation_matches_reference_and_is_symmetric():
    a, b = random_orientations(300, 5), random_orientations(300, 6)
    got = misorientation(a, b)
    ref = [ref_misorientation(x, y, CUBIC_SYMMETRY) for x, y in zip(a, b)]
    assert np.allclose(got, ref, atol=1e-6)
    assert np.allclose(got, misorientation(b, a), atol=1e-9)
    assert got.max() <= 62.81      # the largest cubic misorientation is 62.8 deg
    assert got.max() > 50          # and random pairs come near it


def test_random_orientations_are_uniform():
    u = random_orientations(20000, 7)
    # Haar measure: E[U_ij] = 0 and E[trace] = 0; the rotation angle w has density
    # (1 - cos w) / pi, so P(w < 90 deg) = (pi/2 - 1) / pi.
    assert np.abs(u.mean(axis=0)).max() < 0.03
    w = np.degrees(np.arccos(np.clip((np.trace(u, axis1=1, axis2=2) - 1) / 2, -1, 1)))
    assert np.mean(w < 90) == pytest.approx((np.pi / 2 - 1) / np.pi, abs=0.015)


def test_quaternion_round_trip():
    u = random_orientations(100, 8)
    q = matrix_to_quaternion(u)
    assert np.all(q[:, 0] >= 0) and np.allclose(np.linalg.norm(q, axis=1), 1)
    assert np.allclose(quaternion_to_matrix(q), u, atol=1e-12)


def test_fundamental_zone_grid_covers_the_zone():
    step = 8.0
    g = fundamental_zone_grid(step)
    assert in_fundamental_zone(g).all()
    n_psi = math.ceil(360 / step)
    total = n_psi * round(n_psi * n_psi / math.pi)
    assert len(g) == pytest.approx(total / 24, rel=0.1)   # boundary points fluctuate
    # every orientation has a grid point closer than the step (covering radius)
    probe = random_orientations(150, 9)
    nearest = np.array([misorientation(p[None], g).min() for p in probe])
    assert nearest.max() < step
    assert nearest.mean() < 0.6 * step
    # and grid points are not piled up: none closer than a fifth of the step
    sub = g[::7]
    d = np.array([np.sort(misorientation(p[None], g))[1] for p in sub])
    assert d.min() > step / 5


def test_bad_input():
    with pytest.raises(KernelArgumentError, match="3, 3"):
        misorientation(np.eye(2), np.eye(3))
    with pytest.raises(KernelArgumentError, match="step_deg"):
        fundamental_zone_grid(0.1)
    with pytest.raises(KernelArgumentError, match="finite"):
        euler_to_matrix(np.nan, 0, 0)
