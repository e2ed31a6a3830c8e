"""Grid, footprints, the confidence (CalcFracOverlap) and the painter
(SimulateDiffractionImage) against their NumPy references."""
import os

import numpy as np
import pytest

from kernels.crystal import random_orientations, rotation_matrix
from kernels.errors import KernelArgumentError
from kernels.microstructure import paint_grid
from kernels.nfconfidence import (FitWorkspace, confidence, pack_images, unpack_images)
from kernels.nfgeometry import NFGeometry
from kernels.nfgrid import (footprint, grid_vertices, hex_grid, read_grid, within_radius,
                            write_grid)
from tests.nf_reference import ref_confidence, ref_footprint, ref_paint, ref_triangle

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")


@pytest.fixture(scope="module")
def demo():
    return NFGeometry.from_params(os.path.join(DATA, "nf_demo_ps.txt"))


def test_hex_grid_tiles_the_hexagon():
    grid = hex_grid(2.0, 10.0)
    n_hex = int(np.ceil(2 * 10.0 / np.sqrt(3) / 2.0))
    assert len(grid) == 6 * n_hex ** 2                  # MIDAS's NrGridElements
    v = grid_vertices(grid)
    assert np.allclose(v.mean(axis=1), grid[:, 2:4])     # (xs, ys) is the centroid
    assert np.allclose(np.ptp(v[:, :, 0], axis=1), 2.0)  # edge = GridSize
    # every point of the disk lies in exactly one triangle
    rng = np.random.default_rng(0)
    pts = rng.uniform(-9.9, 9.9, (3000, 2))
    pts = pts[np.hypot(*pts.T) < 9.9]
    a, b, c = v[:, 0], v[:, 1], v[:, 2]

    def cross(p, q, r):
        return (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - \
               (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0])
    p = pts[:, None, :]
    s1, s2, s3 = cross(a, b, p), cross(b, c, p), cross(c, a, p)
    inside = ((s1 >= 0) & (s2 >= 0) & (s3 >= 0)) | ((s1 <= 0) & (s2 <= 0) & (s3 <= 0))
    assert np.all(inside.sum(axis=1) == 1)
    # up/down flags as MIDAS: y1 > y2 points down, apex below the centroid
    down = grid[:, 0] > grid[:, 1]
    assert np.all(v[down, 0, 1] < grid[down, 3]) and np.all(v[~down, 0, 1] > grid[~down, 3])


def test_grid_file_round_trip_and_errors(tmp_path):
    grid = within_radius(hex_grid(2.5, 20.0), 20.0)
    path = tmp_path / "grid.txt"
    write_grid(path, grid)
    assert np.allclose(read_grid(path), grid, atol=1e-6)
    path.write_text("3\n1 2 3 4 5\n1 2 3 4\n")
    with pytest.raises(KernelArgumentError, match="line 3: expected 5 numbers"):
        read_grid(path)
    path.write_text("3\n1 2 3 4 5\n")
    with pytest.raises(KernelArgumentError, match="announces 3 grid points, the file has 1"):
        read_grid(path)


def test_footprint_matches_reference():
    rng = np.random.default_rng(1)
    for _ in range(300):
        off = rng.uniform(-4, 4, (3, 2)) * rng.choice([0.3, 1.0, 2.0])
        for rasterize in (True, False):
            got = footprint(off, rasterize)
            want = ref_footprint(off, rasterize)
            assert sorted(map(tuple, got)) == sorted(map(tuple, want))
    # counter-clockwise: the 28 pixels of the closed triangle plus the 6 on x + y = 7,
    # within 0.99 px of the hypotenuse's line; clockwise only pixels near an edge line
    # count, which drops the 6 interior pixels with x, y >= 1 and x + y <= 4 (as MIDAS)
    ccw = footprint(np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]]))
    cw = footprint(np.array([[0.0, 0.0], [0.0, 6.0], [6.0, 0.0]]))
    assert (len(ccw), len(cw)) == (34, 28)


@pytest.fixture(scope="module")
def painted(demo):
    """A few grains painted by the kernel and by the reference."""
    grid = within_radius(hex_grid(5.0, 20.0), 20.0)
    u = random_orientations(3, 21)
    which = (np.arange(len(grid)) * 3) // len(grid)
    packed = paint_grid(grid, u[which], demo)
    ref = np.zeros((demo.n_distances, demo.n_frames, demo.n_pixels_z, demo.n_pixels_y), bool)
    for row, k in zip(grid, which):
        ref_paint(u[k], row, demo, ref)
    return grid, u, which, packed, ref


def test_paint_matches_reference(demo, painted):
    _, _, _, packed, ref = painted
    got = unpack_images(packed, demo.n_pixels_y)
    assert got.sum() > 1000
    assert np.array_equal(got, ref)
    assert np.array_equal(pack_images(ref), packed)


def test_confidence_matches_reference(demo, painted):
    grid, u, which, packed, ref = painted
    work = FitWorkspace(demo, grid[0, 4])
    rng = np.random.default_rng(2)
    seen = set()
    for i in rng.choice(len(grid), 25, replace=False):
        for v in (u[which[i]], u[(which[i] + 1) % 3],
                  rotation_matrix(rng.normal(size=3), 0.3) @ u[which[i]]):
            got = confidence(v, grid[i], demo, packed, work)
            assert got == ref_confidence(v, grid[i], demo, ref)
            seen.add(round(got, 3))
    assert max(seen) == 1.0 and min(seen) < 0.5     # the cases differ


def test_confidence_is_one_at_truth_and_needs_every_distance(demo, painted):
    grid, u, which, packed, ref = painted
    for i in range(0, len(grid), 7):
        assert confidence(u[which[i]], grid[i], demo, packed) == 1.0
    # clear the second distance: no pixel is set at every distance any more
    one = ref.copy()
    one[1] = False
    assert confidence(u[which[0]], grid[0], demo, pack_images(one)) == 0.0
    assert ref_confidence(u[which[0]], grid[0], demo, one) == 0.0


def test_confidence_rejects_bad_images(demo):
    row = hex_grid(5.0, 10.0)[0]
    with pytest.raises(KernelArgumentError, match="bit-packed uint8"):
        confidence(np.eye(3), row, demo, np.zeros((2, 360, 288, 512), bool))
    assert ref_triangle(row).shape == (3, 2)
