"""The NF forward model: predict_spots against its NumPy reference (MIDAS's
quadratic omega solution), and physics the model must obey."""
import math
import os

import numpy as np
import pytest

from kernels.crystal import random_orientations
from kernels.errors import KernelArgumentError
from kernels.nfgeometry import NFGeometry
from kernels.nfmodel import predict_spots
from tests.nf_reference import ref_predict, rot_z

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")


@pytest.fixture(scope="module")
def ps_au():
    return NFGeometry.from_params(os.path.join(DATA, "midas_ps_au.txt"))


@pytest.fixture(scope="module")
def demo():
    return NFGeometry.from_params(os.path.join(DATA, "nf_demo_ps.txt"))


def as_table(spots):
    return np.stack([spots[n].astype(np.float64) for n in spots.dtype.names], -1)


def sort_rows(t):
    return t[np.lexsort((t[:, 5], t[:, 0], t[:, 7]))]


@pytest.mark.parametrize("pos", [(0.0, 0.0), (31.5, -12.25), (-49.0, 40.0)])
def test_predict_spots_matches_reference(ps_au, demo, pos):
    for geo in (ps_au, demo):
        for u in random_orientations(4, 11):
            got = sort_rows(as_table(predict_spots(u, pos, geo)))
            want = sort_rows(ref_predict(u, pos, geo))
            assert got.shape == want.shape and len(got) > 10
            # frame, distance, ring, hkl and the pixel (floor) equal; positions to rounding
            assert np.array_equal(got[:, 4:], want[:, 4:])
            assert np.array_equal(np.floor(got[:, 2:4]), np.floor(want[:, 2:4]))
            assert np.allclose(got[:, :4], want[:, :4], atol=1e-8)


def test_each_spot_satisfies_bragg(demo):
    """Re-derive every spot from (y, z, omega) alone: the diffracted ray from the
    voxel to the pixel gives 2theta, and lambda = 2 d sin(theta) for its ring; the
    scattering vector k_out - k_in equals Rz(omega) U g."""
    h = demo.hkls
    lam = demo.wavelength
    for u in random_orientations(5, 12):
        for pos in ((0.0, 0.0), (35.0, -20.0)):
            spots = predict_spots(u, pos, demo)
            assert len(spots) > 20
            for s in spots:
                d = s["distance"]
                xa, ya, _ = rot_z(s["omega"]) @ np.array([pos[0], pos[1], 0.0])
                ray = np.array([demo.lsd[d] - xa, (s["y"] - demo.ybc[d]) * demo.px - ya,
                                (s["z"] - demo.zbc[d]) * demo.px])
                two_theta = math.atan2(math.hypot(ray[1], ray[2]), ray[0])
                assert 2 * h.d[s["hkl"]] * math.sin(two_theta / 2) == pytest.approx(lam, rel=1e-9)
                k_out = ray / np.linalg.norm(ray) / lam
                g_lab = rot_z(s["omega"]) @ u @ h.g[s["hkl"]]
                assert np.allclose(k_out - [1 / lam, 0, 0], g_lab, atol=1e-9)


def test_two_theta_of_voxel_at_origin_is_its_rings(demo):
    rings = demo.hkls.ring_table()
    for u in random_orientations(5, 13):
        s = predict_spots(u, (0.0, 0.0), demo)
        lsd = np.take(demo.lsd, s["distance"])
        ybc, zbc = np.take(demo.ybc, s["distance"]), np.take(demo.zbc, s["distance"])
        r = np.hypot(s["y"] - ybc, s["z"] - zbc) * demo.px
        two_theta = np.degrees(np.arctan(r / lsd))
        assert np.allclose(two_theta, rings["two_theta"][s["ring"] - 1], atol=1e-9)
        eta = np.degrees(np.arctan2(-(s["y"] - ybc), s["z"] - zbc))
        assert np.allclose(eta, s["eta"], atol=1e-9)


def test_frames_filters_and_negative_step(demo):
    u = random_orientations(30, 14)
    all_spots = np.concatenate([predict_spots(v, (10.0, 5.0), demo) for v in u])
    # frame f covers omega in (start + (f + 1) step, start + f step] for step < 0
    lo = demo.omega_start + (all_spots["frame"] + 1) * demo.omega_step
    hi = demo.omega_start + all_spots["frame"] * demo.omega_step
    assert np.all((lo < all_spots["omega"]) & (all_spots["omega"] <= hi))
    assert np.all((0 <= all_spots["frame"]) & (all_spots["frame"] < demo.n_frames))
    # the pole exclusion removes spots (ExcludePoleAngle 6): none within 6 deg of 0 or 180
    ae = np.abs(all_spots["eta"])
    assert np.all((ae >= 6) & (180 - ae >= 6))
    wide = demo.replace(exclude_pole_angle=0.0)
    we = np.abs(np.concatenate([predict_spots(v, (10.0, 5.0), wide) for v in u])["eta"])
    assert np.any((we < 6) | (180 - we < 6))
    # the box: only spots above z = 30 um on the first detector
    z0 = all_spots[all_spots["distance"] == 0]
    assert np.all((z0["z"] - demo.zbc[0]) * demo.px > 30 - 1e-6)
    # a positive step counts the other way: same spots, frames mirrored
    pos = demo.replace(omega_start=-180.0, omega_step=1.0)
    for v in u[:5]:
        a, b = predict_spots(v, (0.0, 0.0), demo), predict_spots(v, (0.0, 0.0), pos)
        assert np.array_equal(np.sort(a["omega"]), np.sort(b["omega"]))
        inner = (a["omega"] % 1.0 != 0)
        assert np.array_equal(np.sort(a["frame"][inner]), np.sort(359 - b["frame"][inner]))


def test_omega_range_restricts(demo):
    half = demo.replace(omega_ranges=((-90.0, 90.0),))
    for v in random_orientations(10, 15):
        s = predict_spots(v, (0.0, 0.0), half)
        assert np.all(np.abs(s["omega"]) < 90)
        full = predict_spots(v, (0.0, 0.0), demo)
        assert len(s) == np.sum(np.abs(full["omega"]) < 90)


def test_second_distance_scales_about_the_beam_centre(demo):
    u = random_orientations(1, 16)[0]
    s = predict_spots(u, (0.0, 0.0), demo)
    d0, d1 = s[s["distance"] == 0], s[s["distance"] == 1]
    both = np.intersect1d(d0["omega"], d1["omega"])
    a = d0[np.isin(d0["omega"], both)]
    b = d1[np.isin(d1["omega"], both)]
    ratio = demo.lsd[1] / demo.lsd[0]
    assert np.allclose((b["y"] - demo.ybc[1]), (a["y"] - demo.ybc[0]) * ratio)
    assert np.array_equal(a["frame"], b["frame"])


def test_bad_arguments(demo):
    with pytest.raises(KernelArgumentError, match="not a rotation"):
        predict_spots(np.eye(3) * 2, (0, 0), demo)
    with pytest.raises(KernelArgumentError, match="position"):
        predict_spots(np.eye(3), (0, 0, 0), demo)
