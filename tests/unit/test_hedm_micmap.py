"""The microstructure map's pieces: edge neighbours of the triangular grid, grains by flood
fill, IPF colours, and the files (MIDAS's text .mic byte layout, HDF5, PNG)."""
import numpy as np
import pytest

from hedm.micmap import (MIC_COLUMNS, grain_ids, ipf_colors, neighbour_pairs, plot_map,
                         stem_paths, write_map_h5, write_mic)
from kernels import (FIT_DTYPE, euler_to_matrix, grid_vertices, hex_grid, matrix_to_euler,
                     misorientation, rotation_matrix, within_radius)
from tests.nf_reference import read_mic


@pytest.fixture(scope="module")
def grid():
    return within_radius(hex_grid(2.5, 15.0), 15.0)


def test_neighbours_share_an_edge(grid):
    pairs = neighbour_pairs(grid[:, 2:4])
    verts = grid_vertices(grid)
    for i, j in pairs:
        shared = sum(np.isclose(verts[i][:, None], verts[j][None]).all(-1).any(-1))
        assert shared == 2, (i, j)
    # every triangle has at most 3 edge neighbours, interior ones exactly 3
    counts = np.bincount(pairs.ravel(), minlength=len(grid))
    assert counts.max() == 3 and np.mean(counts == 3) > 0.8
    # and every pair of triangles sharing an edge is found (brute force on a few)
    for i in range(0, len(grid), 37):
        for j in range(len(grid)):
            if i != j and np.isclose(verts[i][:, None], verts[j][None]).all(-1).any(-1).sum() == 2:
                assert [min(i, j), max(i, j)] in pairs.tolist()


def two_grain_fit(grid, angle_deg=10.0):
    """Left half one orientation with a slow gradient (0.2 deg per um in x), right half
    another ``angle_deg`` away; a few points not fitted."""
    u0 = euler_to_matrix(0.3, 0.5, 0.7)
    fit = np.zeros(len(grid), FIT_DTYPE)
    fit["x"], fit["y"] = grid[:, 2], grid[:, 3]
    for k, (x, _) in enumerate(grid[:, 2:4]):
        if x < 0:
            fit["u"][k] = rotation_matrix([0, 0, 1], 0.2 * (x + 15)) @ u0
        else:
            fit["u"][k] = rotation_matrix([1, 1, 0], angle_deg) @ u0
    fit["confidence"] = 0.9
    fit["confidence"][::50] = 0.0
    fit["u"][::50] = np.nan
    fit["euler"] = matrix_to_euler(np.nan_to_num(fit["u"]))
    fit["ud"] = np.where(grid[:, 0] > grid[:, 1], -1, 1)
    fit["seed"] = 3
    fit["n_candidates"] = 2
    return fit


def test_flood_fill_grains(grid):
    fit = two_grain_fit(grid)
    pairs = neighbour_pairs(grid[:, 2:4])
    ids, mis = grain_ids(fit["u"], fit["confidence"], pairs, 5.0)
    fitted = fit["confidence"] > 0
    assert np.all(ids[~fitted] == 0) and np.all(ids[fitted] > 0)
    left, right = fitted & (grid[:, 2] < 0), fitted & (grid[:, 2] >= 0)
    # the gradient (6 deg across the left half, 0.2 deg per um between neighbours) is one grain
    assert len(set(ids[left])) == 1 and len(set(ids[right])) == 1
    assert set(ids[left]) != set(ids[right])
    assert ids[np.flatnonzero(fitted)[0]] == 1          # ids follow grid order
    # the pairs' misorientations are what kernels.misorientation says
    both = np.isfinite(mis)
    assert np.allclose(mis[both], misorientation(fit["u"][pairs[both, 0]],
                                                 fit["u"][pairs[both, 1]]))
    # a threshold above the boundary's misorientation joins the grains
    ids15, _ = grain_ids(fit["u"], fit["confidence"], pairs, 15.0)
    assert ids15.max() == 1


def test_ipf_colours_of_the_triangle_corners():
    z = np.array([0.0, 0.0, 1.0])

    def u_with(h):
        """An orientation that puts crystal direction h along sample z."""
        h = np.asarray(h, float) / np.linalg.norm(h)
        axis = np.cross(h, z)
        if np.linalg.norm(axis) < 1e-12:
            return np.eye(3)
        ang = np.degrees(np.arccos(np.clip(h @ z, -1, 1)))
        return rotation_matrix(axis, ang)

    rgb = ipf_colors(np.stack([u_with(h) for h in ([0, 0, 1], [0, 1, 1], [1, 1, 1],
                                                   [1, 0, 0], [-1, 1, -1], [1, 2, 3])]))
    assert np.allclose(rgb[0], [1, 0, 0], atol=1e-6)       # [001] red
    assert np.allclose(rgb[1], [0, 1, 0], atol=1e-6)       # [011] green
    assert np.allclose(rgb[2], [0, 0, 1], atol=1e-6)       # [111] blue
    assert np.allclose(rgb[3], rgb[0]) and np.allclose(rgb[4], rgb[2])  # symmetry equivalents
    assert rgb[5].max() == pytest.approx(1.0) and rgb[5].min() > 0     # inside: a mixture
    grey = ipf_colors(np.full((1, 3, 3), np.nan))
    assert np.allclose(grey, 0.5)


def test_mic_text_is_midas_parsemic_layout(grid, tmp_path):
    fit = two_grain_fit(grid)
    path = write_mic(str(tmp_path / "m.mic"), fit, gs=1.25, phase_nr=2, num_phases=1,
                     global_position=3.5)
    lines = open(path).read().splitlines()
    assert lines[:3] == ["%TriEdgeSize 2.500000", "%NumPhases 1", "%GlobalPosition 3.500000"]
    assert lines[3] == "%" + "\t".join(MIC_COLUMNS)
    rows = fit[fit["confidence"] > 0]
    assert len(lines) == 4 + len(rows)
    # C's fprintf("%lf\t") eleven times, then "%d\n" (ParseMic's WriteMicText)
    r = rows[0]
    vals = (r["seed"], r["n_candidates"], 0.0, r["x"], r["y"], 2.5, r["ud"], *r["euler"],
            r["confidence"])
    assert lines[4] == "".join("%lf\t" % v for v in vals) + "2"  # noqa: UP031 (C printf)
    header, table = read_mic(path)
    assert header == {"TriEdgeSize": 2.5, "NumPhases": 1.0, "GlobalPosition": 3.5}
    assert table.shape == (len(rows), 12)
    assert np.allclose(table[:, 3], rows["x"], atol=5e-7)
    assert np.allclose(table[:, 7:10], rows["euler"], atol=5e-7)
    # Euler angles in radians, MIDAS's convention: they give back the orientation
    assert np.allclose(euler_to_matrix(*table[0, 7:10]), rows["u"][0], atol=1e-5)


def test_h5_map_and_png(grid, tmp_path):
    import h5py

    fit = two_grain_fit(grid)
    ids, _ = grain_ids(fit["u"], fit["confidence"], neighbour_pairs(grid[:, 2:4]), 5.0)
    files = stem_paths(str(tmp_path), "layer1.mic")
    assert files == {"mic": str(tmp_path / "layer1.mic"), "h5": str(tmp_path / "layer1.h5"),
                     "png": str(tmp_path / "layer1.png")}
    write_map_h5(files["h5"], fit, grid, ids, fit["u"][:3], {"GBAngle": 5.0},
                 {"n_grains": int(ids.max())})
    with h5py.File(files["h5"]) as f:
        assert np.array_equal(f["position"][()], np.c_[grid[:, 2], grid[:, 3]])
        assert np.array_equal(f["orientation_matrix"][()], fit["u"], equal_nan=True)
        assert np.array_equal(f["grain_id"][()], ids) and f.attrs["n_grains"] == 2
        assert f["ipf_z"].shape == (len(grid), 3) and f["grid"].shape == grid.shape
        assert f.attrs["GBAngle"] == 5.0
    plot_map(files["png"], fit, grid, ids)
    with open(files["png"], "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
