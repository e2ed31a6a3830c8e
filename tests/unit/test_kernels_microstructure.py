"""Ground truth: Voronoi microstructure, simulated binary images, and raw frames from
which the existing stage-1 reduction (kernels.nf) recovers those images exactly."""
import os

import numpy as np
import pytest

from kernels.crystal import misorientation
from kernels.errors import KernelArgumentError
from kernels.microstructure import (FrameModel, frame_background, ff_seeds, render_raw_frame,
                                    simulate_images, voronoi_microstructure)
from kernels.nf import NFParams, NFWorkspace, median_background, reduce_frame
from kernels.nfconfidence import FitWorkspace, confidence, unpack_images
from kernels.nfgeometry import NFGeometry
from kernels.nfgrid import hex_grid, within_radius

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")
DEMO = os.path.join(DATA, "nf_demo_ps.txt")


def stage1_params(path):
    """The stage-1 keys of a parameter file, as workflows/hedm_nf.py reads them."""
    keys = {}
    for line in open(path):
        tok = line.split("#")[0].split()
        if len(tok) >= 2 and tok[0] in ("BlanketSubtraction", "MedFiltRadius",
                                        "GaussFiltRadius", "LoGMaskRadius"):
            keys[tok[0]] = float(tok[1])
    return NFParams(offset=int(keys["BlanketSubtraction"]),
                    median_size=2 * int(keys["MedFiltRadius"]) + 1,
                    log_sigma=keys["GaussFiltRadius"], log_radius=int(keys["LoGMaskRadius"]))


@pytest.fixture(scope="module")
def small():
    """The demo geometry over 90 frames (omega 180 -> 90) and a 30 um sample."""
    geo = NFGeometry.from_params(DEMO).replace(n_frames=90)
    return geo, voronoi_microstructure(6, 30.0, seed=3)


def test_voronoi_grains_and_boundary_distance():
    micro = voronoi_microstructure(12, 50.0, seed=1)
    assert micro.n_grains == 12 and np.all(np.hypot(*micro.centres.T) <= 50)
    rng = np.random.default_rng(0)
    pts = rng.uniform(-50, 50, (400, 2))
    g = micro.grain_at(pts)
    assert np.all((g == -1) == (np.hypot(*pts.T) > 50))
    # brute force: distance to the nearest point of another grain on a fine lattice
    lat = np.stack(np.meshgrid(np.arange(-60, 60, 0.25), np.arange(-60, 60, 0.25)), -1)
    lat = lat.reshape(-1, 2)
    lg = np.argmin(((lat[:, None] - micro.centres) ** 2).sum(-1), axis=1)
    inside = pts[g >= 0][:40]
    bd = micro.boundary_distance(inside)
    for p, d, k in zip(inside, bd, micro.grain_at(inside)):
        other = lat[lg != k]
        brute = np.hypot(*(other - p).T).min()
        assert abs(brute - d) < 0.25
    # the seeds keep their distance
    c = micro.centres
    sep = np.hypot(*(c[:, None] - c[None]).transpose(2, 0, 1))[np.triu_indices(12, 1)]
    assert sep.min() >= 0.5 * 50 / np.sqrt(12)


def test_ff_seeds_are_near_the_grains():
    micro = voronoi_microstructure(5, 30.0, seed=2)
    s = ff_seeds(micro, 0.7, n_spurious=3, seed=1)
    assert s.shape == (8, 3, 3)
    assert np.allclose(misorientation(s[:5], micro.orientations), 0.7, atol=1e-6)


def test_truth_has_full_confidence_at_interior_grid_points(small):
    geo, micro = small
    images = simulate_images(micro, geo)
    grid = within_radius(hex_grid(geo.grid_size, micro.rsample), micro.rsample)
    interior = micro.boundary_distance(grid[:, 2:4]) >= 2 * geo.grid_size
    work = FitWorkspace(geo, grid[0, 4])
    u = micro.orientation_at(grid[:, 2:4])
    conf = np.array([confidence(u[i], grid[i], geo, images, work)
                     for i in np.flatnonzero(interior)])
    # the simulation's voxels are half the size: their rounded footprints cover the
    # fit's footprints nearly, not exactly
    assert conf.mean() > 0.98 and conf.min() > 0.75
    # every other grain's orientation fits worse, everywhere
    g = micro.grain_at(grid[:, 2:4])
    for k in range(1, micro.n_grains):
        other = micro.orientations[(g + k) % micro.n_grains]
        wrong = np.array([confidence(other[i], grid[i], geo, images, work)
                          for i in np.flatnonzero(interior)])
        assert np.all(wrong < conf) and wrong.mean() < 0.3


def test_dilation_drop_and_spurious(small):
    geo, micro = small
    base = unpack_images(simulate_images(micro, geo), geo.n_pixels_y)
    tall = unpack_images(simulate_images(micro, geo, dilate_z=2), geo.n_pixels_y)
    assert np.all(tall >= base) and tall.sum() > 1.5 * base.sum()
    dropped = unpack_images(simulate_images(micro, geo, dilate_z=2, drop=0.2, seed=1),
                            geo.n_pixels_y)
    assert np.all(dropped <= tall)
    assert dropped.sum() / tall.sum() == pytest.approx(0.8, abs=0.02)
    noisy = unpack_images(simulate_images(micro, geo, spurious=1e-4, seed=1), geo.n_pixels_y)
    extra = (noisy & ~base).sum() / base.size
    assert extra == pytest.approx(1e-4, rel=0.1)
    with pytest.raises(KernelArgumentError):
        simulate_images(micro, geo, drop=1.0)


def test_stage1_recovers_the_binary_images(small):
    """Render raw frames (background pattern, hot pixels, noise) and run the existing
    stage-1 reduction with the demo file's parameters: the filled spot masks equal the
    binary images, frame by frame, at both distances (noise may flip a pixel where two
    spots meet in a concave corner: 1 in 178,000 on the whole demo; none here)."""
    geo, micro = small
    images = simulate_images(micro, geo, dilate_z=2, smooth=True)
    binary = unpack_images(images, geo.n_pixels_y)
    assert binary.sum() > 5000
    model = FrameModel()
    params = stage1_params(DEMO)
    differ = 0
    for d in range(geo.n_distances):
        pattern = frame_background(model, binary.shape[2:], d)
        stack = np.stack([render_raw_frame(binary[d, f], model, d, f, pattern)
                          for f in range(geo.n_frames)])
        assert stack.dtype == np.uint16 and stack.max() > 4000          # hot pixels
        background = median_background(stack)
        work = NFWorkspace(background.shape)
        for f in range(geo.n_frames):
            spots = reduce_frame(stack[f], background, params, work)
            got = np.zeros(background.shape, bool)
            got[spots.rows, spots.cols] = True
            differ += int((got != binary[d, f]).sum())
    assert differ <= binary.sum() // 10_000


def test_render_frame_is_a_pure_function():
    b = np.zeros((20, 30), bool)
    b[5:8, 10:20] = True
    m = FrameModel(seed=4)
    a1 = render_raw_frame(b, m, 1, 7)
    assert np.array_equal(a1, render_raw_frame(b, m, 1, 7))
    assert not np.array_equal(a1, render_raw_frame(b, m, 1, 8))
    assert a1[6, 15] > a1[15, 5] + 150
