"""kernels.ffmodel / kernels.ffindex: the FF forward model against a NumPy reference of the
same physics written another way, residuals, strains, the setting-free orientation, and
the fibre search finding a grain from one of its spots."""
from __future__ import annotations

import math

import numpy as np
import pytest

GEOMETRY = """\
LatticeConstant 4.08 4.08 4.08 90 90 90
Wavelength 0.172979
Lsd 120000
BC 96.3 95.7
px 200
tx 0.4
ty -0.3
tz 0.7
RhoD 18500
OmegaStart 180
OmegaStep -1
MinEta 6
"""


@pytest.fixture(scope="module")
def setup():
    from hedm.ffparams import GRAINS_SCHEMA, ff_arrays, grains_params
    from hedm.params import parse_params

    p = grains_params(parse_params(GEOMETRY, GRAINS_SCHEMA))
    return p, ff_arrays(p, 360, (192, 192))


def reference_spots(u, lattice, pos, p, shape, n_frames):
    """NumPy reference: Bragg angle solved as R cos(omega + phi) = v, the ray intersected
    with the tilted plane by a linear solve, every filter applied to the whole table."""
    from kernels.ffmodel import b_matrix
    from kernels.hkl import hkl_list
    from kernels.geometry import ff_tilt_matrix
    from hedm.ffparams import ring_cutoff

    h = hkl_list(4.08, p["Wavelength"], p["Lsd"], ring_cutoff(p, shape), 225)
    g = (u @ b_matrix(lattice) @ h.hkl.T.astype(float)).T
    lam = p["Wavelength"]
    v = lam * (g ** 2).sum(1) / 2
    rho = np.hypot(g[:, 0], g[:, 1])
    phi = np.arctan2(-g[:, 1], -g[:, 0])
    t = ff_tilt_matrix(p["tx"], p["ty"], p["tz"])
    rows = []
    for k in range(len(g)):
        if rho[k] < v[k]:
            continue
        for sgn in (1, -1):
            w = sgn * math.acos(v[k] / rho[k]) - phi[k]
            w = (w + math.pi) % (2 * math.pi) - math.pi
            rz = np.array([[math.cos(w), -math.sin(w), 0], [math.sin(w), math.cos(w), 0],
                           [0, 0, 1]])
            gl = rz @ g[k]
            kout = np.array([1 / lam, 0, 0]) + gl
            assert abs(np.linalg.norm(kout) - 1 / lam) < 1e-9 / lam   # on the Ewald sphere
            kout /= np.linalg.norm(kout)
            r0 = rz @ pos
            # r0 + s k = Lsd x + T (0, Y, Z): three equations in s, Y, Z
            a = np.c_[kout, -t[:, 1], -t[:, 2]]
            s, yy, zz = np.linalg.solve(a, np.array([p["Lsd"], 0, 0]) - r0)
            hit = r0 + s * kout
            eta = math.degrees(math.atan2(-hit[1], hit[2]))
            tth = math.degrees(math.atan2(math.hypot(hit[1], hit[2]), hit[0]))
            y, z = p["BC"][0] - yy / p["px"], zz / p["px"] + p["BC"][1]
            f = ((math.degrees(w) - p["OmegaStart"]) / p["OmegaStep"] + 0.5) % 360 - 0.5
            if (abs(eta) < p["MinEta"] or 180 - abs(eta) < p["MinEta"] or not 0 <= y < shape[1]
                    or not 0 <= z < shape[0] or f >= n_frames - 0.5):
                continue
            rows.append((math.degrees(w), eta, tth, y, z, f, h.ring[k], k))
    rows = np.array(rows)
    return rows[np.lexsort((rows[:, 0], rows[:, 7]))]


def test_forward_model_equals_numpy_reference(setup):
    from kernels.crystal import random_orientations
    from kernels.ffmodel import ff_spots

    p, arrays = setup
    lattice = np.array([4.081, 4.0795, 4.0802, 90.02, 89.99, 90.01])
    for i, u in enumerate(random_orientations(4, rng=3)):
        pos = np.array([60.0, -40.0, 25.0]) * (i - 1)
        got = ff_spots(u, lattice, pos, arrays)
        got = got[np.lexsort((got[:, 0], got[:, 7]))]
        want = reference_spots(u, lattice, pos, p, (192, 192), 360)
        assert len(got) > 60 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


def test_residuals_vanish_at_the_truth_and_see_a_rotation(setup):
    from kernels.crystal import random_orientations, rotation_matrix
    from kernels.ffmodel import b_matrix, ff_spots, residuals_kernel

    _, arrays = setup
    u = random_orientations(1, rng=5)[0]
    lat = np.array([4.082, 4.079, 4.08, 90.0, 90.01, 89.98])
    pos = np.array([30.0, 10.0, -20.0])
    s = ff_spots(u, lat, pos, arrays)
    obs = np.ascontiguousarray(s[:, [3, 4, 0]])
    out = np.empty((len(s), 3))
    residuals_kernel(u, b_matrix(lat), pos, arrays, obs, s[:, 7].astype(np.int64), out)
    assert np.abs(out).max() < 1e-8
    residuals_kernel(rotation_matrix([0, 0, 1], 0.1) @ u, b_matrix(lat), pos, arrays, obs,
                     s[:, 7].astype(np.int64), out)
    np.testing.assert_allclose(out[:, 2], -0.1 / abs(arrays.omega_step), atol=1e-9)


def test_cubic_b_matrix_and_strains():
    from kernels.crystal import random_orientations
    from kernels.ffmodel import b_matrix, fable_strain, lattice_from_strain

    np.testing.assert_allclose(b_matrix([4.08, 4.08, 4.08, 90, 90, 90]), np.eye(3) / 4.08,
                               atol=1e-15)
    ref = np.array([4.08, 4.08, 4.08, 90, 90, 90])
    eps = np.array([[4e-4, 1e-4, -2e-4], [1e-4, -3e-4, 0.5e-4], [-2e-4, 0.5e-4, 2e-4]])
    lat = lattice_from_strain(ref, eps)
    u = random_orientations(1, rng=2)[0]
    # MIDAS's definition gives the crystal strain back, rotated into the sample frame (to
    # first order: the setting of the strained cell differs by rotations of order eps^2)
    np.testing.assert_allclose(fable_strain(ref, lat, u), u @ eps @ u.T, atol=2e-7)
    np.testing.assert_allclose(fable_strain(ref, ref, u), 0, atol=1e-15)


def test_lattice_rotation_is_free_of_the_cells_setting(setup):
    """A strained cubic cell described after a symmetry operation S of the cube: the same
    lattice map U B, refactored (QR) into an orientation and MIDAS's upper-triangular B of
    the permuted lattice. Same spots; the two U differ by more than S, their lattice
    rotations by S exactly."""
    from kernels.crystal import CUBIC_SYMMETRY, misorientation, random_orientations
    from kernels.ffmodel import b_matrix, ff_spots, lattice_rotation

    _, arrays = setup
    ref = [4.08] * 3 + [90.0] * 3
    u = random_orientations(1, rng=9)[0]
    lat = np.array([4.081, 4.079, 4.0805, 90.03, 89.98, 90.02])
    m = u @ b_matrix(lat) @ CUBIC_SYMMETRY[5].T       # hkl' = S hkl: the same G vectors
    q, r = np.linalg.qr(m)
    d = np.sign(np.diag(r))
    u2, b2 = q * d, d[:, None] * r
    g = np.linalg.inv(b2.T @ b2)                       # direct metric of the other setting
    abc = np.sqrt(np.diag(g))
    ang = np.degrees(np.arccos([g[1, 2] / (abc[1] * abc[2]), g[0, 2] / (abc[0] * abc[2]),
                                g[0, 1] / (abc[0] * abc[1])]))
    lat2 = np.r_[abc, ang]
    np.testing.assert_allclose(b_matrix(lat2), b2, atol=1e-12)   # MIDAS's form again
    a = ff_spots(u, lat, np.zeros(3), arrays)
    b = ff_spots(u2, lat2, np.zeros(3), arrays)
    np.testing.assert_allclose(a[np.lexsort((a[:, 0],))][:, :6],
                               b[np.lexsort((b[:, 0],))][:, :6], atol=1e-7)
    assert misorientation(u, u2) > 5e-3
    assert misorientation(lattice_rotation(u, lat, ref), lattice_rotation(u2, lat2, ref)) < 1e-6


def test_fibre_search_finds_a_grain_from_one_spot(setup):
    from kernels.crystal import misorientation, random_orientations
    from kernels.ffindex import fibre_search_kernel
    from kernels.ffmodel import b_matrix, ff_spots, pixel_to_lab_kernel

    from hedm.ffindex import Observed, scattering_direction
    from hedm.ffspots import SPOT_DTYPE

    p, arrays = setup
    us = random_orientations(3, rng=11)
    lat = np.array([4.08] * 3 + [90.0] * 3)
    rows = np.concatenate([ff_spots(u, lat, np.zeros(3), arrays) for u in us])
    sp = np.zeros(len(rows), SPOT_DTYPE)
    sp["id"] = np.arange(len(rows))
    sp["omega"], sp["eta"], sp["two_theta"], sp["y"], sp["z"] = rows[:, :5].T
    sp["ring"] = rows[:, 6]
    sp["radius"] = p["Lsd"] * np.tan(np.radians(sp["two_theta"]))
    lab = np.empty((len(rows), 3))
    pixel_to_lab_kernel(rows[:, 3].copy(), rows[:, 4].copy(), arrays, lab)
    sp["lab_x"], sp["lab_y"], sp["lab_z"] = lab.T
    obs = Observed.from_spots(sp, int(arrays.ring.max()))
    seed = obs.ring_start[1]              # a {111} spot
    hk = arrays.hkl[arrays.ring == 1]
    cdirs = np.ascontiguousarray(hk / np.linalg.norm(hk, axis=1, keepdims=True))
    best = np.empty((3, 3))
    s = scattering_direction(obs.lab[seed], obs.omega[seed], np.zeros(3))
    k, n = fibre_search_kernel(cdirs, s, 360, b_matrix(lat), np.zeros(3), arrays,
                               obs.ring_start, obs.omega, obs.eta, obs.radius, 1.0, 300.0,
                               300.0, best)
    assert n > 50 and k == n                       # every predicted spot found
    assert min(misorientation(best, u) for u in us) < 0.5   # within half a fibre step


def test_kernels_equal_the_vectorised_reference(setup):
    """The NumPy reference bench/ff_grains_bench.py times gives the kernels' numbers."""
    from kernels.crystal import random_orientations, rotation_matrix
    from kernels.ffindex import match_kernel
    from kernels.ffmodel import b_matrix, ff_spots, residuals_kernel

    from tests.ff_reference import ref_match, ref_residuals, ref_spots

    _, arrays = setup
    lat = np.array([4.081, 4.0795, 4.0802, 90.02, 89.99, 90.01])
    b = b_matrix(lat)
    us = random_orientations(3, rng=4)
    pos = np.array([20.0, -35.0, 12.0])
    obs = np.concatenate([ff_spots(u, lat, pos, arrays) for u in us])
    obs = obs[np.lexsort((obs[:, 0], obs[:, 6]))]
    start = np.searchsorted(obs[:, 6], np.arange(int(arrays.ring.max()) + 2))
    rad = arrays.lsd * np.tan(np.radians(obs[:, 2]))
    for u in us:
        got = ff_spots(u, lat, pos, arrays)
        want = ref_spots(u, b, pos, arrays)
        np.testing.assert_allclose(got[np.lexsort((got[:, 0], got[:, 7]))],
                                   want[np.lexsort((want[:, 0], want[:, 7]))], atol=1e-7)
        off = rotation_matrix([1, 1, 0], 0.3) @ u
        pred = ff_spots(off, lat, pos, arrays)
        ids, dist = np.empty(len(pred), np.int64), np.empty(1)
        k = match_kernel(pred, len(pred), arrays.lsd, start, obs[:, 0].copy(),
                         obs[:, 1].copy(), rad, 1.0, 300.0, 300.0, ids, dist)
        ref = ref_match(pred, arrays.lsd, start, obs[:, 0], obs[:, 1], rad, 1.0, 300.0, 300.0)
        assert k > len(pred) // 2 and np.array_equal(ids, ref)
        yzo = np.ascontiguousarray(got[:, [3, 4, 0]] + 0.01)
        out = np.empty((len(got), 3))
        residuals_kernel(off, b, pos, arrays, yzo, got[:, 7].astype(np.int64), out)
        np.testing.assert_allclose(out, ref_residuals(off, b, pos, arrays, yzo,
                                                      got[:, 7].astype(np.int64)), atol=1e-7)
