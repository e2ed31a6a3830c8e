"""A synthetic NF-HEDM layer with ground truth, and scoring a map against it.

:func:`make_layer` writes one layer folder (as MIDAS keeps one per layer): raw
uint16 frames ``stem_%06d.tif`` (distance d's numbered from d * frames), the one
parameter file ``nf.params``, ``grid.txt`` (MakeHexGrid's layout, cut to the
disk), ``seeds.txt`` (SeedOrientations layout), ``truth.npz`` (grains and
bit-packed binary images, for scoring only) and ``layer.json`` (what was made: a
layer with the same settings is reused). ``kernels.microstructure`` makes it:
Voronoi grains in a disk -> forward-projected binary images -> raw frames with
background, hot pixels and noise that stage 1 reduces back.

**The demo geometry** (:data:`DEMO_GEOMETRY`) is MIDAS's gold example
(``NF_HEDM/Example/ps_au.txt``) scaled down to run in minutes on 2 cores: 512 x
288 px at 2000 and 2500 um, 1 deg frames, no tilts; the reasons line by line are
in ``tests/data/nf_demo_ps.txt``. ``frames``, ``rsample`` and ``grains`` change
the omega step and the sample, not the detector.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional

import numpy as np

__all__ = ["DEMO_GEOMETRY", "STAGE1_KEYS", "STAGE2_KEYS", "make_layer", "load_truth",
           "score_map", "score_images", "layer_geometry", "misorientation_from_truth",
           "plot_truth_comparison"]

#: The demo geometry (module docstring), MIDAS parameter-file text.
DEMO_GEOMETRY = """\
LatticeParameter 4.08 4.08 4.08 90 90 90
Wavelength 0.172979
SpaceGroup 225
nDistances 2
Lsd 2000
Lsd 2500
BC 256 16
BC 256 16
px 1.48
NrPixelsY 512
NrPixelsZ 288
MaxRingRad 300
tx 0
ty 0
tz 0
Wedge 0
OmegaStart 180
OmegaStep -1
OmegaRange -180 180
NrFilesPerDistance 360
Rsample 50
GridSize 2.5
EdgeLength 2.5
ExcludePoleAngle 6
BoxSize -370 370 30 400
OrientTol 1
MinFracAccept 0.1
"""

#: Stage-1 keys of the layer file: frames rendered with kernels.microstructure's default
#: FrameModel (background 100, noise sigma 10, spots +300); the offset is 6 noise sigmas.
STAGE1_KEYS: Dict[str, Any] = {
    "DataDirectory": ".", "InputPattern": "stem_%06d.tif", "RawStartNr": 0,
    "BlanketSubtraction": 60, "MedFiltRadius": 1, "GaussFiltRadius": 1.0, "LoGMaskRadius": 4,
    "BackgroundTasks": 0, "ReducedFileName": "nf_spots"}
#: Stage-2 keys of the layer file.
STAGE2_KEYS: Dict[str, Any] = {
    "GridFileName": "grid.txt", "SeedOrientations": "seeds.txt", "MicFileText": "nf_map.mic",
    "GBAngle": 5.0, "GridPointsPerTask": 0}


def layer_geometry(frames: int = 360, rsample: float = 50.0):
    """The demo geometry with ``frames`` frames per distance over 360 deg and a sample of
    radius ``rsample`` um."""
    from kernels import NFGeometry

    geo = NFGeometry.from_text(DEMO_GEOMETRY, "hedm.nfsynth.DEMO_GEOMETRY")
    if frames != geo.n_frames or rsample != geo.rsample:
        geo = geo.replace(n_frames=int(frames), omega_step=-360.0 / frames, rsample=float(rsample))
    return geo


def make_layer(folder: str, frames: int = 360, rsample: float = 50.0, grains: int = 15,
               seed: int = 1, seed_error_deg: float = 0.5, spurious_seeds: int = 10,
               raw_frames: bool = True, reuse: bool = True) -> Dict[str, Any]:
    """Write a synthetic layer into ``folder`` (module docstring; one made with the same
    settings is reused); return what was made. ``raw_frames=False`` skips the TIFFs
    (stage 2 then runs on the truth's ``nf_spots_binary.npy``)."""
    import time

    from kernels import (FrameModel, ff_seeds, frame_background, hex_grid, render_raw_frame,
                         simulate_images, unpack_images, voronoi_microstructure,
                         within_radius, write_grid, write_tiff_series)

    from hedm.common import output_file
    from hedm.nf import BINARY_SUFFIX
    from hedm.nffit import write_seeds

    settings = json.loads(json.dumps(dict(  # as layer.json holds them, to compare
        frames=frames, rsample=rsample, grains=grains, seed=seed, seed_error_deg=seed_error_deg,
        spurious_seeds=spurious_seeds, raw_frames=raw_frames, geometry=DEMO_GEOMETRY,
        stage1=STAGE1_KEYS, stage2=STAGE2_KEYS, version=1)))
    marker = os.path.join(folder, "layer.json")
    if reuse:
        try:
            with open(marker) as fh:
                old = json.load(fh)
            if old.get("settings") == settings:
                return dict(old, reused=True, seconds=0.0)
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    os.makedirs(folder, exist_ok=True)
    if os.path.exists(marker):
        os.unlink(marker)
    for name in os.listdir(folder):
        if name.startswith("stem_") and name.endswith(".tif"):
            os.unlink(os.path.join(folder, name))
    geo = layer_geometry(frames, rsample)
    micro = voronoi_microstructure(grains, geo.rsample, seed=seed)
    images = simulate_images(micro, geo, dilate_z=2, smooth=True)
    seeds = ff_seeds(micro, seed_error_deg, n_spurious=spurious_seeds, seed=seed + 1)
    assert geo.grid_size is not None and geo.rsample is not None
    grid = within_radius(hex_grid(geo.grid_size, geo.rsample), geo.rsample)
    t_truth = time.perf_counter() - t0

    write_grid(os.path.join(folder, "grid.txt"), grid)
    write_seeds(os.path.join(folder, "seeds.txt"), seeds)
    lines = ["# NF-HEDM layer written by hedm.nfsynth: one file for stage 1 (hedm/nf.py) and",
             "# stage 2 (hedm/nffit.py); the geometry is MIDAS's gold example scaled down",
             "# (hedm/nfsynth.py says how).", geo.to_params().rstrip()]
    lines += [f"{k} {v}" for k, v in STAGE1_KEYS.items()]
    lines += [f"{k} {v}" for k, v in STAGE2_KEYS.items()]
    lines += [f"NrOrientations {len(seeds)}"]
    with output_file(os.path.join(folder, "nf.params")) as params:
        params.write("\n".join(lines) + "\n")
    np.savez_compressed(os.path.join(folder, "truth.npz"), centres=micro.centres,
                        orientations=micro.orientations, rsample=micro.rsample, images=images)
    t1 = time.perf_counter()
    raw_bytes = 0
    if raw_frames:
        binary = unpack_images(images, geo.n_pixels_y)
        model = FrameModel()

        def rendered():
            for d in range(geo.n_distances):
                pattern = frame_background(model, binary.shape[2:], d)
                for f in range(geo.n_frames):
                    yield render_raw_frame(binary[d, f], model, d, f, pattern)

        paths = write_tiff_series(os.path.join(folder, str(STAGE1_KEYS["InputPattern"])),
                                  rendered(), first=int(STAGE1_KEYS["RawStartNr"]))
        raw_bytes = sum(os.path.getsize(p) for p in paths)
    else:
        np.save(os.path.join(folder, str(STAGE1_KEYS["ReducedFileName"]) + BINARY_SUFFIX), images)
    record = {"settings": settings, "folder": folder, "grains": grains,
              "grid_points": int(len(grid)), "seeds": int(len(seeds)),
              "frames_per_distance": geo.n_frames, "distances": geo.n_distances,
              "omega_step": geo.omega_step, "shape": [geo.n_pixels_z, geo.n_pixels_y],
              "raw_files": geo.n_distances * geo.n_frames if raw_frames else 0,
              "raw_bytes": raw_bytes, "image_pixels_set": int(np.unpackbits(images).sum()),
              "truth_seconds": round(t_truth, 3),
              "render_seconds": round(time.perf_counter() - t1, 3)}
    with open(marker, "w") as fh:
        json.dump(record, fh, indent=1)
    return dict(record, reused=False, seconds=time.perf_counter() - t0)


def load_truth(folder: str):
    """``(Microstructure, packed binary images)`` of a layer written by :func:`make_layer`."""
    from kernels import Microstructure

    with np.load(os.path.join(folder, "truth.npz")) as z:
        micro = Microstructure(z["centres"], z["orientations"], float(z["rsample"]))
        return micro, z["images"]


def score_images(found: np.ndarray, truth: np.ndarray) -> Dict[str, Any]:
    """Stage 1 against the truth: packed binary images compared pixel by pixel."""
    if found.shape != truth.shape:
        return {"equal": False, "shape": list(found.shape), "truth_shape": list(truth.shape)}
    f = np.unpackbits(found)
    t = np.unpackbits(truth)
    return {"equal": bool(np.array_equal(found, truth)), "pixels_set": int(t.sum()),
            "missing": int((t & ~f).sum()), "extra": int((f & ~t).sum())}


def score_map(micro, xy: np.ndarray, u: np.ndarray, grid_size: float,
              limit_deg: float = 0.25, grain_id: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """Misorientation of each fitted point from the truth at its centroid: the fractions
    within ``limit_deg`` of all points and of ``interior`` ones (two grid steps from a
    boundary; unfitted count as wrong), their counts, the median, and with
    ``grain_id`` the grains found against the truth's.
    """
    xy = np.asarray(xy, dtype=np.float64)
    mis = misorientation_from_truth(micro, xy, u)
    inner = micro.boundary_distance(xy) >= 2 * grid_size
    out: Dict[str, Any] = {
        "limit_deg": limit_deg, "points": int(len(xy)), "interior_points": int(inner.sum()),
        "within": int((mis < limit_deg).sum()),
        "interior_within": int((mis[inner] < limit_deg).sum()),
        "fraction": float(np.mean(mis < limit_deg)) if len(mis) else 0.0,
        "interior_fraction": float(np.mean(mis[inner] < limit_deg)) if inner.any() else 0.0,
        "median_deg": float(np.median(mis)) if len(mis) else None,
        "true_grains": int(micro.n_grains)}
    if grain_id is not None:
        out["grains_found"] = int(np.max(grain_id)) if len(grain_id) else 0
    return out


def misorientation_from_truth(micro, xy: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Per-point misorientation (deg) from the truth; 180 where not fitted."""
    from kernels import misorientation

    mis = misorientation(np.asarray(u, dtype=np.float64), micro.orientation_at(xy))
    return np.where(np.isfinite(mis), mis, 180.0)


def plot_truth_comparison(path: str, grid: np.ndarray, u: np.ndarray, micro,
                          mis: np.ndarray, accuracy: Mapping[str, Any]) -> str:
    """PNG: the truth's IPF map, the fitted one, and each point's misorientation from the truth."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from kernels import grid_vertices

    from hedm.micmap import ipf_colors
    from hedm.output import save_png

    verts = list(grid_vertices(grid))
    xy = np.asarray(grid)[:, 2:4]
    fig = Figure(figsize=(15.0, 4.9))
    titles = (f"truth: {micro.n_grains} grains (IPF z)", "fitted map (IPF z)",
              f"misorientation from the truth: {100 * accuracy['fraction']:.1f}% < "
              f"{accuracy['limit_deg']:g} deg")
    axes = [fig.add_subplot(1, 3, i + 1) for i in range(3)]
    axes[0].add_collection(PolyCollection(verts, facecolors=ipf_colors(micro.orientation_at(xy)),
                                          edgecolors="face", linewidths=0.2))
    axes[1].add_collection(PolyCollection(verts, facecolors=ipf_colors(u), edgecolors="face",
                                          linewidths=0.2))
    coll = PolyCollection(verts, array=np.clip(mis, 0.01, 10.0), cmap="magma_r",
                          norm=LogNorm(0.01, 10.0), edgecolors="face", linewidths=0.2)
    axes[2].add_collection(coll)
    fig.colorbar(coll, ax=axes[2], fraction=0.046, pad=0.04, label="deg (log scale)")
    corners = np.asarray(verts).reshape(-1, 2)
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    for ax, title in zip(axes, titles):
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("x (um)")
    axes[0].set_ylabel("y (um)")
    fig.tight_layout()
    return save_png(fig, path, dpi=100)
