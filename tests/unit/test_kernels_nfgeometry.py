"""The hkl list (MIDAS's GetHKLList) and NFGeometry read from MIDAS parameter files,
including MIDAS's own gold example (tests/data/midas_ps_au.txt)."""
import math
import os

import numpy as np
import pytest

from kernels.errors import KernelArgumentError
from kernels.hkl import hkl_list, lattice_centring
from kernels.nfgeometry import NFGeometry, ParamFileError

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")
PS_AU = os.path.join(DATA, "midas_ps_au.txt")
DEMO = os.path.join(DATA, "nf_demo_ps.txt")


def test_ps_au_is_read_as_midas_reads_it():
    g = NFGeometry.from_params(PS_AU)
    assert g.lsd == (8289.154576, 10290.724494)
    assert g.ybc == (985.415831, 985.161497) and g.zbc == (17.510494, 24.511210)
    assert (g.n_pixels_y, g.n_pixels_z) == (2048, 2048)       # from NrPixels
    assert g.n_frames == 1440 and g.omega_step == -0.25 and g.omega_start == 180
    assert g.omega_ranges == ((-180.0, 180.0),)
    assert g.box_sizes == ((-1200.0, 1200.0, 100.0, 2500.0),)
    assert g.tilts == (0.536238, 0.557035, 0.474936)
    assert (g.orient_tol, g.min_frac_accept, g.exclude_pole_angle) == (2, 0.04, 6)
    assert (g.grid_size, g.edge_length, g.rsample) == (2.5, 1, 50)


def test_ps_au_ring_radii_in_pixels():
    # The figures for {111}, {200}, {220}, {311}, {222} (a = 4.08 A,
    # lambda = 0.172979 A, Lsd 8289 um, px 1.48 um).
    g = NFGeometry.from_params(PS_AU)
    rings = g.hkls.ring_table()
    assert np.allclose(rings["radius"][:5] / g.px, [412, 476, 675, 793, 829], atol=1.0)
    assert list(rings["multiplicity"][:5]) == [8, 6, 12, 24, 8]
    h = g.hkls
    first = {tuple(sorted(np.abs(x))) for x, r in zip(h.hkl, h.ring) if r <= 5}
    assert first == {(1, 1, 1), (0, 0, 2), (0, 2, 2), (1, 1, 3), (2, 2, 2)}
    # MaxRingRad 2800 um at the first distance is the cut-off
    assert h.radius.max() <= 2800 and h.radius.max() > 2700


def test_hkl_list_bcc_fcc_sc_and_friedel_pairs():
    bcc = hkl_list(3.0, 0.2, 1000.0, 300.0, 229)
    assert list(bcc.ring_table()["multiplicity"][:3]) == [12, 6, 24]   # {110} {200} {211}
    assert np.all(bcc.hkl.sum(1) % 2 == 0)
    fcc = hkl_list(4.0, 0.2, 1000.0, 300.0, 225)
    assert all(len({x % 2 for x in row}) == 1 for row in fcc.hkl)
    sc = hkl_list(4.0, 0.2, 1000.0, 300.0, 221)
    assert sc.ring_table()["multiplicity"][0] == 6                    # {100}
    for h in (bcc, fcc, sc):
        keys = {tuple(x) for x in h.hkl}
        assert all(tuple(-x) in keys for x in h.hkl)                # hkl and -h-k-l
        assert np.all(np.diff(h.d) <= 1e-12)                        # d descending
        assert np.all(np.diff(h.ring) >= 0) and h.ring[0] == 1
        assert np.allclose(h.wavelength, 2 * h.d * np.sin(np.radians(h.theta)))
        assert np.allclose(h.radius, 1000.0 * np.tan(np.radians(h.two_theta)))
        assert np.allclose(np.linalg.norm(h.g, axis=1), 1 / h.d)
    # the cut keeps exactly the reflections whose ring radius is within MaxRingRad
    big = hkl_list(4.0, 0.2, 1000.0, 1000.0, 225)
    assert len(big) > len(fcc)
    assert {tuple(x) for x in fcc.hkl} == {tuple(x) for x, r in zip(big.hkl, big.radius)
                                            if r <= 300.0}


def test_unsupported_space_groups_are_refused():
    assert lattice_centring(225) == "F" and lattice_centring(229) == "I"
    with pytest.raises(KernelArgumentError, match="non-symmorphic"):
        lattice_centring(227)          # diamond: 200 absent, which sginfo knows and we not
    with pytest.raises(KernelArgumentError, match="not cubic"):
        lattice_centring(194)


def test_demo_geometry_round_trips_through_to_params():
    g = NFGeometry.from_params(DEMO)
    again = NFGeometry.from_text(g.to_params(), "round-trip")
    assert again == g
    assert again.hkls.n_rings == 5


BASE = """\
LatticeParameter 4.08 4.08 4.08 90 90 90
Wavelength 0.172979
SpaceGroup 225
Lsd 2000
BC 256 16
px 1.48
NrPixelsY 512
NrPixelsZ 288
OmegaStart 180
OmegaStep -1
NrFilesPerDistance 360
OmegaRange -180 180
BoxSize -370 370 30 400
"""


def test_minimal_file_and_defaults():
    g = NFGeometry.from_text(BASE, "base")
    assert g.n_distances == 1 and g.tilts == (0.0, 0.0, 0.0) and g.orient_tol is None
    corner = 1.48 * math.hypot(256, 288 - 16)
    assert g.ring_cutoff == pytest.approx(corner)
    with pytest.raises(ParamFileError, match="OrientTol, MinFracAccept"):
        g.require("orient_tol", "min_frac_accept", what="fitting")


@pytest.mark.parametrize("text, pattern", [
    (BASE.replace("Wavelength 0.172979\n", ""), r"missing required key Wavelength"),
    (BASE.replace("BC 256 16", "BC 256"), r"line 5, BC: expected 2 value\(s\), got 1"),
    (BASE.replace("px 1.48", "px one"), r"line 6, px: expected 1 float value\(s\), got 'one'"),
    (BASE.replace("NrPixelsY 512", "NrPixelsY 51.5"), r"line 7, NrPixelsY"),
    (BASE + "Lsd 2500\n", r"line 5, BC: 1 BC lines for 2 Lsd lines"),
    (BASE + "nDistances 2\n", r"line 14, nDistances: says 2 distances but the file has 1"),
    (BASE + "px 1.5\n", r"line 14, px: px is given twice \(first on line 6\)"),
    (BASE + "Wedge 0.5\n", r"line 14, Wedge: Wedge 0.5 is not modelled"),
    (BASE + "BoxSize -1 1 0 1\n", r"one BoxSize per OmegaRange"),
    (BASE + "StartNr 0\nEndNr 99\n",
     r"NrFilesPerDistance: 360 frames but StartNr..EndNr covers 100"),
    (BASE.replace("SpaceGroup 225", "SpaceGroup 227"), r"non-symmorphic"),
    (BASE.replace("4.08 4.08 4.08", "4.08 4.08 5.0"), r"only cubic lattices"),
    (BASE.replace("OmegaStep -1", "OmegaStep 0"), r"OmegaStep must be a non-zero"),
    (BASE + "RingsToUse 99\n", r"RingsToUse \[99\] outside the \d+ rings"),
])
def test_bad_files_name_file_line_and_key(tmp_path, text, pattern):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ParamFileError, match=pattern) as exc:
        NFGeometry.from_params(path)
    assert str(path) in str(exc.value)


def test_missing_file():
    with pytest.raises(ParamFileError, match="cannot read parameter file .*nope.txt"):
        NFGeometry.from_params("/nonexistent/nope.txt")


def test_comments_unknown_keys_and_rings_to_use():
    text = BASE + "# a comment line\nFooBar 1 2 3\nRingsToUse 1\nRingsToUse 3 # trailing\n"
    g = NFGeometry.from_text(text)
    assert set(g.hkls.ring) == {1, 3}
