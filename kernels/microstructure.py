"""Ground truth for NF-HEDM: a synthetic microstructure, its binary images and raw frames.

* :func:`voronoi_microstructure`: Voronoi grains in a disk of radius
  ``Rsample`` (seed points uniform in the disk, at least ``min_sep`` of the
  mean spacing apart, so no grain is a sliver), each with a random
  orientation (:func:`kernels.crystal.random_orientations`).
* :func:`simulate_images`: the binary images, as MIDAS's ``simulateNF``
  makes them: every voxel of a triangular grid inside the disk (finer than
  the reconstruction grid by default, so the fit does not see its own
  voxels) is forward-projected with its grain's orientation and its
  footprint OR-ed into the images (:func:`kernels.nfconfidence.paint_kernel`).
  Options, applied in this order: dilation of every spot by
  ``dilate_z``/``dilate_y`` pixels (the illuminated layer's height and the
  detector's point spread widen real spots), the 3x3 median root
  (``smooth``), dropped pixels (a fraction of set pixels cleared) and
  spurious pixels (a fraction of all pixels set).
* :func:`render_raw_frame`: a raw uint16 detector frame from one binary image:
  the fixed background pattern of :func:`kernels.synth.background_pattern`
  plus ``amplitude`` on every set pixel plus Gaussian noise of variance
  ``gain * mean``, a pure function of ``(model, distance, frame)`` so
  frames can be rendered in any order by any process.  Stage 1
  (:func:`kernels.nf.reduce_frame` after :func:`kernels.nf.median_background`,
  with ``BlanketSubtraction`` about 6 noise sigmas) recovers the binary
  images from them when the images are made with ``smooth=True`` (stage 1's
  3x3 median would trim spot corners and lines thinner than 2 pixels) and
  no pixel carries a spot in half the frames or more (the per-pixel median
  is then background).  A pixel can still be lost where two spots meet in a
  concave corner: its LoG is about 0, so noise decides it (stage 1 iterated
  on noise-free frames instead of the median gives the very same images);
  the demo's figures are in ``docs/guide/hedm.md``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from .crystal import random_orientations, rotation_vector_matrix
from .errors import KernelArgumentError
from .nfconfidence import FitWorkspace, pack_images, paint_kernel, unpack_images
from .nfgeometry import NFGeometry
from .nfgrid import grid_vertices, hex_grid, within_radius

__all__ = ["Microstructure", "voronoi_microstructure", "simulate_images", "FrameModel",
           "render_raw_frame", "frame_background", "paint_grid", "ff_seeds",
           "median_root_kernel"]


@dataclass(frozen=True)
class Microstructure:
    """Grains as Voronoi cells of ``centres`` (n, 2) um inside a disk of radius ``rsample``."""

    centres: np.ndarray
    orientations: np.ndarray
    rsample: float

    def __post_init__(self):
        c = np.asarray(self.centres, dtype=np.float64)
        o = np.asarray(self.orientations, dtype=np.float64)
        if c.ndim != 2 or c.shape[1] != 2 or o.shape != (len(c), 3, 3) or len(c) == 0:
            raise KernelArgumentError(f"need (n, 2) centres and (n, 3, 3) orientations, got "
                                      f"{c.shape} and {o.shape}")
        if not self.rsample > 0:
            raise KernelArgumentError(f"rsample must be > 0, got {self.rsample}")

    @property
    def n_grains(self) -> int:
        return len(self.centres)

    def grain_at(self, xy) -> np.ndarray:
        """Grain index of each point (..., 2); -1 outside the disk."""
        xy = np.asarray(xy, dtype=np.float64)
        d2 = ((xy[..., None, :] - self.centres) ** 2).sum(-1)
        g = np.argmin(d2, axis=-1)
        return np.where(np.hypot(xy[..., 0], xy[..., 1]) <= self.rsample, g, -1)

    def orientation_at(self, xy) -> np.ndarray:
        """(..., 3, 3) orientation at each point; NaN outside the disk."""
        g = self.grain_at(xy)
        out = self.orientations[np.maximum(g, 0)].copy()
        out[g < 0] = np.nan
        return out

    def boundary_distance(self, xy) -> np.ndarray:
        """Distance (um) from each point to the nearest boundary between grains.

        For the point's cell ``i`` and every other centre ``j`` the distance
        to their bisector is ``(|p - c_j|^2 - |p - c_i|^2) / (2 |c_j - c_i|)``;
        the smallest is the distance to the cell's boundary (the sample's
        surface is not a grain boundary).
        """
        xy = np.asarray(xy, dtype=np.float64)
        d2 = ((xy[..., None, :] - self.centres) ** 2).sum(-1)
        i = np.argmin(d2, axis=-1)
        own = np.take_along_axis(d2, i[..., None], -1)
        sep = np.linalg.norm(self.centres[i][..., None, :] - self.centres, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            dist = (d2 - own) / (2.0 * sep)
        dist = np.where(sep > 0, dist, np.inf)
        return dist.min(-1) if self.n_grains > 1 else np.full(xy.shape[:-1], np.inf)


def voronoi_microstructure(n_grains: int, rsample: float, seed=0,
                           min_sep: float = 0.5) -> Microstructure:
    """``n_grains`` Voronoi grains in a disk of radius ``rsample`` um, random orientations.

    Centres are drawn uniformly in the disk and rejected closer than
    ``min_sep * rsample / sqrt(n_grains)`` to an earlier one.
    """
    if not (isinstance(n_grains, (int, np.integer)) and n_grains >= 1):
        raise KernelArgumentError(f"n_grains must be an integer >= 1, got {n_grains!r}")
    if not (isinstance(rsample, (int, float, np.number)) and rsample > 0):
        raise KernelArgumentError(f"rsample must be > 0 um, got {rsample!r}")
    rng = np.random.default_rng(seed)
    sep = min_sep * rsample / math.sqrt(n_grains)
    centres: list = []
    while len(centres) < n_grains:
        for _ in range(10_000):
            r = rsample * math.sqrt(rng.random())
            a = 2 * math.pi * rng.random()
            p = (r * math.cos(a), r * math.sin(a))
            if all(math.hypot(p[0] - q[0], p[1] - q[1]) >= sep for q in centres):
                centres.append(p)
                break
        else:
            raise KernelArgumentError(f"cannot place {n_grains} grains {sep:.3g} um apart in "
                                      f"a disk of radius {rsample}; lower min_sep")
    return Microstructure(np.array(centres), random_orientations(n_grains, rng),
                          float(rsample))


def ff_seeds(micro: Microstructure, error_deg: float = 0.5, n_spurious: int = 0,
             seed=0) -> np.ndarray:
    """Seed orientations as an FF-HEDM grain list would give them (MIDAS's
    ``-ffSeedOrientations 1`` route): every grain's orientation turned by
    ``error_deg`` about a random axis, then ``n_spurious`` random orientations
    (grains FF reports that the layer does not have).  (k, 3, 3).
    """
    if not (0 <= error_deg <= 30 and n_spurious >= 0):
        raise KernelArgumentError("need 0 <= error_deg <= 30 and n_spurious >= 0")
    rng = np.random.default_rng(seed)
    out = []
    for u in micro.orientations:
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        out.append(rotation_vector_matrix(axis * math.radians(error_deg)) @ u)
    spurious = random_orientations(int(n_spurious), rng)
    return np.ascontiguousarray(np.concatenate([np.array(out).reshape(-1, 3, 3), spurious]))


def paint_grid(grid: np.ndarray, orientations: np.ndarray, geometry: NFGeometry,
               images: np.ndarray | None = None) -> np.ndarray:
    """OR the footprints of grid rows with their (n, 3, 3) orientations into packed images."""
    grid = np.ascontiguousarray(grid, dtype=np.float64)
    m = geometry.arrays
    if images is None:
        images = np.zeros((m.lsd.shape[0], m.n_frames, m.n_pixels_z, (m.n_pixels_y + 7) // 8),
                          np.uint8)
    if len(grid) == 0:
        return images
    work = FitWorkspace(geometry, float(grid[0, 4]))
    verts = grid_vertices(grid)
    orientations = np.ascontiguousarray(orientations, dtype=np.float64)
    for v, u in zip(verts, orientations):
        paint_kernel(u, np.ascontiguousarray(v), work.rasterize, m, images, work.spots,
                     work.pix, work.base)
    return images


@njit(cache=True, nogil=True)
def median_root_kernel(img, work):
    """Repeat the binary 3x3 median (set where >= 5 of the 9 pixels are; edges
    repeated, as :func:`kernels.filters.median_filter_kernel`) on ``img`` (z, y)
    bool in place until it no longer changes; ``work`` is same-shape scratch.
    Rows with no set pixel within one row cannot change and are skipped.
    Returns the number of passes.
    """
    h, w = img.shape
    busy = np.zeros(h, np.bool_)
    for it in range(1, 1000):
        for r in range(h):
            busy[r] = False
            for c in range(w):
                if img[r, c]:
                    busy[r] = True
                    break
        changed = False
        for r in range(h):
            if not (busy[r] or (r > 0 and busy[r - 1]) or (r < h - 1 and busy[r + 1])):
                continue
            for c in range(w):
                n = 0
                for dr in range(-1, 2):
                    rr = min(h - 1, max(0, r + dr))
                    for dc in range(-1, 2):
                        cc = min(w - 1, max(0, c + dc))
                        if img[rr, cc]:
                            n += 1
                work[r, c] = n >= 5
        for r in range(h):
            if not (busy[r] or (r > 0 and busy[r - 1]) or (r < h - 1 and busy[r + 1])):
                continue
            for c in range(w):
                if work[r, c] != img[r, c]:
                    changed = True
                    img[r, c] = work[r, c]
        if not changed:
            return it
    return 1000


def simulate_images(micro: Microstructure, geometry: NFGeometry, grid_size: float | None = None,
                    dilate_z: int = 0, dilate_y: int = 0, smooth: bool = False,
                    drop: float = 0.0, spurious: float = 0.0, seed=0) -> np.ndarray:
    """Bit-packed binary images of ``micro`` (module docstring).

    Parameters
    ----------
    grid_size : edge of the simulation's triangles (um); default half the
        geometry's GridSize
    dilate_z, dilate_y : grow every spot by this many pixels up and down / left and right
    smooth : replace every image by its 3x3 median root (repeat the binary
        3x3 median, edges repeated, until nothing changes): spot corners that
        stage 1's median filter would trim are trimmed here, so the images are
        what stage 1 can recover
    drop : fraction of set pixels cleared at random
    spurious : fraction of all pixels set at random
    seed : seed of the random choices (orientations are the microstructure's)
    """
    if grid_size is None:
        geometry.require("grid_size", what="simulate_images without grid_size")
        assert geometry.grid_size is not None
        grid_size = geometry.grid_size / 2.0
    if not (0 <= drop < 1 and 0 <= spurious < 1 and dilate_z >= 0 and dilate_y >= 0):
        raise KernelArgumentError("need 0 <= drop, spurious < 1 and dilate_z, dilate_y >= 0")
    grid = within_radius(hex_grid(grid_size, micro.rsample), micro.rsample)
    images = paint_grid(grid, micro.orientation_at(grid[:, 2:4]), geometry)
    if not (dilate_z or dilate_y or smooth or drop or spurious):
        return images
    import scipy.ndimage as ndi

    binary = unpack_images(images, geometry.n_pixels_y)
    if dilate_z or dilate_y:
        st = np.zeros((1, 1, 2 * dilate_z + 1, 2 * dilate_y + 1), bool)
        st[0, 0, :, dilate_y] = True
        st[0, 0, dilate_z, :] = True
        binary = ndi.binary_dilation(binary, st)
    if smooth:
        binary = np.ascontiguousarray(binary)
        work = np.empty(binary.shape[2:], np.bool_)
        for d in range(binary.shape[0]):
            for f in range(binary.shape[1]):
                if binary[d, f].any():
                    median_root_kernel(binary[d, f], work)
    rng = np.random.default_rng(seed)
    if drop:
        binary &= rng.random(binary.shape) >= drop
    if spurious:
        binary |= rng.random(binary.shape) < spurious
    return pack_images(binary)


@dataclass(frozen=True)
class FrameModel:
    """Raw-frame rendering: background counts, pattern amplitude, noise gain, spot height."""

    background: float = 100.0
    pattern: float = 20.0
    gain: float = 1.0
    amplitude: float = 300.0
    n_hot: int = 10
    seed: int = 0

    def __post_init__(self):
        if not (self.background > self.pattern >= 0 and self.amplitude > 0 and self.gain >= 0):
            raise KernelArgumentError("need background > pattern >= 0, amplitude > 0, gain >= 0")


def frame_background(model: FrameModel, shape, distance: int) -> np.ndarray:
    """The mean background (float64, (z, y)) of every frame at ``distance``: hot pixels
    and a fixed pattern (:func:`kernels.synth.background_pattern`), no noise."""
    from .synth import DetectorModel, background_pattern

    det = DetectorModel(shape=tuple(shape), n_frames=3, frames_per_spot=1,
                        seed=model.seed * 1000 + distance,
                        background=model.background, pattern=model.pattern, gain=model.gain,
                        n_hot=model.n_hot, n_spots=0)
    return background_pattern(det)


def render_raw_frame(binary_frame: np.ndarray, model: FrameModel, distance: int, frame: int,
                     pattern: np.ndarray | None = None) -> np.ndarray:
    """Raw uint16 frame (rows z, columns y) showing the set pixels of ``binary_frame``.

    ``pattern`` (the distance's :func:`frame_background`) may be passed to skip
    recomputing it; the noise depends only on ``(model.seed, distance, frame)``.
    """
    binary_frame = np.asarray(binary_frame, dtype=bool)
    if binary_frame.ndim != 2:
        raise KernelArgumentError(f"binary_frame: expected (z, y), got {binary_frame.shape}")
    mean = frame_background(model, binary_frame.shape, distance) if pattern is None else pattern
    mean = mean + model.amplitude * binary_frame
    rng = np.random.default_rng([model.seed, 7, distance, frame])
    val = np.rint(mean + np.sqrt(model.gain * mean) * rng.standard_normal(mean.shape))
    return np.clip(val, 0, 65535).astype(np.uint16)
