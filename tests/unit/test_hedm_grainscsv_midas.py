"""Grains.csv against one MIDAS wrote (``tests/data/midas_grains_sim.csv``, MIDAS's FF
example grains; provenance in ``tests/data/midas_grains_sim.md``): our reader takes it,
our writer's header and column line are MIDAS's, and our orientation conventions give
MIDAS's numbers from MIDAS's orientation matrices and lattice parameters (Euler angles,
eFab)."""
from __future__ import annotations

import os

import numpy as np

MIDAS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                     "midas_grains_sim.csv")


def test_a_midas_grains_csv_is_read():
    from hedm.grainscsv import COLUMNS, read_grains_csv, seed_orientations

    g = read_grains_csv(MIDAS)
    assert g["rows"].shape == (3, len(COLUMNS))
    assert g["header"]["NumGrains"] == "3" and float(g["header"]["BeamThickness"]) == 100.0
    assert list(g["rows"][:, 0]) == [64, 65, 70]
    u = seed_orientations(MIDAS)
    np.testing.assert_allclose(u @ np.swapaxes(u, 1, 2), np.tile(np.eye(3), (3, 1, 1)),
                               atol=2e-5)


def test_our_header_and_column_line_are_midas(tmp_path):
    from hedm.grainscsv import read_grains_csv, write_grains_csv

    rows = read_grains_csv(MIDAS)["rows"]
    p = {"LatticeConstant": (4.08, 4.08, 4.08, 90, 90, 90), "BeamThickness": 100.0,
         "GlobalPosition": 0.0, "NumPhases": 1, "SpaceGroup": 225}
    ours = write_grains_csv(str(tmp_path / "Grains.csv"), rows, p)
    theirs = open(MIDAS).read().splitlines()
    mine = open(ours).read().splitlines()
    # every header line but the beam centre (ours: from GrainRadius as MIDAS computes it)
    assert [t for t in mine[:9] if not t.startswith("%BeamCenter")] == \
        [t for t in theirs[:9] if not t.startswith("%BeamCenter")]
    np.testing.assert_allclose(read_grains_csv(ours)["rows"], rows, atol=1e-6)


def test_euler_angles_are_midas_convention():
    """MIDAS's Eul0..2 of its O matrices (this file printed degrees; MIDAS's
    ProcessGrainsZarr prints radians, as our Grains.csv does) are our Bunge angles."""
    from hedm.grainscsv import read_grains_csv
    from kernels.crystal import euler_to_matrix, matrix_to_euler

    rows = read_grains_csv(MIDAS)["rows"]
    u = rows[:, 1:10].reshape(-1, 3, 3)
    np.testing.assert_allclose(np.degrees(matrix_to_euler(u)), rows[:, 44:47], atol=2e-3)
    np.testing.assert_allclose(euler_to_matrix(*np.radians(rows[:, 44:47]).T), u, atol=2e-5)


def test_efab_is_midas_strain_of_its_lattice():
    """MIDAS's eFab (x 10^6) is our :func:`kernels.ffmodel.fable_strain` of its lattice
    parameters: with the grain's orientation in the lattice's setting, which is the
    written O times one cubic symmetry operation (the file's O is brought into the
    fundamental zone, its lattice parameters are not permuted with it)."""
    from hedm.grainscsv import read_grains_csv
    from kernels.crystal import CUBIC_SYMMETRY
    from kernels.ffmodel import fable_strain

    rows = read_grains_csv(MIDAS)["rows"]
    ref = (4.08, 4.08, 4.08, 90.0, 90.0, 90.0)
    for row in rows:
        o, lat, efab = row[1:10].reshape(3, 3), row[13:19], row[24:33].reshape(3, 3)
        err = [np.abs(1e6 * fable_strain(ref, lat, o @ s) - efab).max() for s in CUBIC_SYMMETRY]
        assert min(err) < 0.2, sorted(err)[:2]          # O is printed to 6 decimals
        assert sorted(err)[1] > 100                     # and only one setting gives it


def test_seeds_cli_goes_through_the_output_rule(tmp_path, capsys):
    """``python -m hedm.grainscsv`` replaces no file it cannot tell it wrote (issue 41 item
    2's rule, core.outputs), nor its input, without --overwrite."""
    import os

    from hedm.grainscsv import main

    grains = os.path.join(os.path.dirname(__file__), "..", "data", "midas_grains_sim.csv")
    seeds = tmp_path / "seeds.txt"
    assert main([grains, "--seeds", str(seeds)]) == 0
    first = seeds.read_text()
    seeds.write_text("a user's seeds\n")
    assert main([grains, "--seeds", str(seeds)]) == 2
    assert "not written by mpistage" in capsys.readouterr().out
    assert seeds.read_text() == "a user's seeds\n"
    assert main([grains, "--seeds", str(seeds), "--overwrite"]) == 0
    assert seeds.read_text() == first
    assert main([grains, "--seeds", grains, "--overwrite"]) == 2     # never over the input
