"""Our hkl list, forward model and confidence against values computed by MIDAS's own
C code (GetHKLList, CalcDiffractionSpots, CalcFracOverlap), stored in
tests/data/midas_nf_golden/ (its README says how they were made): tilted detector, two
distances, a bit pattern on every frame, 30 orientations at 30 grid points."""
import json
import os

import numpy as np
import pytest

from kernels.nfconfidence import FitWorkspace, confidence, pack_images
from kernels.nfgeometry import NFGeometry
from kernels.nfmodel import N_SPOT_COLS, theoretical_spots_kernel

GOLDEN = os.path.join(os.path.dirname(__file__), os.pardir, "data", "midas_nf_golden",
                      "golden.json")


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN) as fh:
        data = json.load(fh)
    geo = NFGeometry.from_text(data["geometry"], "golden geometry")
    assert geo.tilts != (0.0, 0.0, 0.0) and geo.n_distances == 2
    d, f, z, y = np.ogrid[:geo.n_distances, :geo.n_frames, :geo.n_pixels_z, :geo.n_pixels_y]
    assert data["image_formula"] == "(7 * y + 3 * z + 5 * frame + 11 * distance) % 13 < 6"
    images = pack_images((7 * y + 3 * z + 5 * f + 11 * d) % 13 < 6)
    return geo, images, data["cases"]


def test_spots_equal_midas(golden):
    geo, _, cases = golden
    buf = np.empty((2 * len(geo.hkls), N_SPOT_COLS))
    for case in cases:
        n = theoretical_spots_kernel(np.array(case["u"]).reshape(3, 3), geo.arrays, buf)
        mine = buf[:n, :3]
        theirs = np.array(case["spots"]).reshape(-1, 3)        # yl, zl, omega
        assert n == len(theirs) > 20
        order_m = np.lexsort(mine.T[::-1])
        order_t = np.lexsort(theirs.T[::-1])
        assert np.allclose(mine[order_m], theirs[order_t], rtol=0, atol=1e-9)


def test_confidence_bit_equal_to_midas(golden):
    geo, images, cases = golden
    work = FitWorkspace(geo, cases[0]["row"][4])
    got = [confidence(np.array(c["u"]).reshape(3, 3), c["row"], geo, images, work)
           for c in cases]
    want = [c["frac"] for c in cases]
    assert got == want
    assert len(set(want)) > 20          # the cases differ from one another


@pytest.mark.parametrize("name, args", [
    ("hkls_ps_au.csv", (4.08, 0.172979, 8289.154576, 2800.0, 225)),
    ("hkls_bcc229.csv", (2.87, 0.172979, 2000.0, 300.0, 229)),
])
def test_hkl_list_equals_midas_gethkllist(name, args):
    """MIDAS's hkls.csv (h k l d ring g1 g2 g3 theta 2theta radius) from GetHKLList."""
    from kernels.hkl import hkl_list

    path = os.path.join(os.path.dirname(GOLDEN), name)
    with open(path) as fh:
        assert fh.readline().split() == ["h", "k", "l", "D-spacing", "RingNr", "g1", "g2",
                                         "g3", "Theta", "2Theta", "Radius"]
        theirs = np.loadtxt(fh)
    mine = hkl_list(*args)
    assert len(mine) == len(theirs)
    index = {tuple(h): i for i, h in enumerate(mine.hkl)}
    k = np.array([index[tuple(int(v) for v in row[:3])] for row in theirs])
    assert np.array_equal(mine.ring[k], theirs[:, 4].astype(int))
    assert np.allclose(mine.d[k], theirs[:, 3], rtol=1e-13)
    # MIDAS builds g through B with cos(90 deg) = 6e-17 terms: equal to 1e-15
    assert np.allclose(mine.g[k], theirs[:, 5:8], rtol=1e-12, atol=1e-15)
    assert np.allclose(mine.theta[k], theirs[:, 8], rtol=1e-12)
    assert np.allclose(mine.radius[k], theirs[:, 10], rtol=1e-12)
    # same order of d (MIDAS's order within a ring is qsort's, ours is fixed)
    assert np.allclose(mine.d, theirs[:, 3], rtol=1e-13)
