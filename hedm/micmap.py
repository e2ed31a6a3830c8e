"""The NF-HEDM microstructure map: grains by flood fill, inverse-pole-figure colours, and
the map's files (HDF5, MIDAS's text ``.mic``, PNG).

Input is what stage 2 (:mod:`hedm.nffit`) merges: one :data:`kernels.nffit.FIT_DTYPE`
row per grid point in grid order, and the grid rows ``(y1, y2, xs, ys, gs)``.

**HDF5** (``<stem>.h5``), one row per grid point, grid order::

    /position            (n, 2) float64  x, y of the triangle's centroid (um)
    /up_down             (n,) int8       +1 triangle pointing up, -1 down (MIDAS's UD)
    /grid                (n, 5) float64  the grid rows y1 y2 xs ys gs (grid.txt)
    /euler               (n, 3) float64  Bunge Euler angles (rad), MIDAS's; NaN if not fitted
    /orientation_matrix  (n, 3, 3)       U (crystal -> sample), NaN if not fitted
    /confidence          (n,) float64    fraction of footprint pixels set (0: not fitted)
    /grain_id            (n,) int32      1, 2, ... by flood fill (below); 0: not fitted
    /n_candidates        (n,) int32      seeds at or above MinFracAccept
    /seed                (n,) int32      row of the seed refined to the result (-1: none)
    /n_evals             (n,) int32      confidence evaluations spent
    /ipf_z               (n, 3) float32  inverse-pole-figure colour of sample z (RGB 0..1)
    /seeds               (k, 3, 3)       the seed orientations
    attributes of /      every parameter, plus workflow, n_grains, gb_angle_deg

**Text** (``<stem>.mic``): MIDAS's ``ParseMic`` layout (``docs/nf-files.md``), so
MIDAS's tools read it: ``OrientationRowNr`` is the seed refined, ``OrientationID``
the number of candidates, ``TriEdgeSize`` ``2 gs``, ``RunTime`` 0 (a task fits a
block in one call, as MIDAS's GPU path writes), all ``%lf``.

**Grains**: MIDAS's flood fill on the triangles themselves (not a 1 um raster):
fitted triangles sharing an edge are one grain when misoriented by at most
``GBAngle`` (5 deg); ids count from 1 in grid order. **IPF colour** of sample z,
``h = U^T z`` sorted into m-3m's standard triangle (``h0 <= h1 <= h2``): red
``h2 - h1``, green ``h1 - h0``, blue ``h0``, scaled so the largest is 1.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from hedm.common import output_file

__all__ = ["neighbour_pairs", "grain_ids", "ipf_colors", "write_map_h5", "write_mic",
           "plot_map", "MIC_COLUMNS"]

#: The column names of MIDAS's text ``.mic`` (its header line, without the ``%``).
MIC_COLUMNS = ("OrientationRowNr", "OrientationID", "RunTime", "X", "Y", "TriEdgeSize",
               "UpDown", "Eul1", "Eul2", "Eul3", "Confidence", "PhaseNr")


def neighbour_pairs(xy: np.ndarray) -> np.ndarray:
    """(m, 2) index pairs ``i < j`` of grid triangles sharing an edge: centroids closer
    than 1.3 times the smallest spacing (edge neighbours are ``GridSize / sqrt(3)``
    apart, the next ``GridSize``), whatever EdgeLength draws."""
    from scipy.spatial import cKDTree

    xy = np.asarray(xy, dtype=np.float64)
    if len(xy) < 2:
        return np.empty((0, 2), np.int64)
    tree = cKDTree(xy)
    dist, _ = tree.query(xy, k=2)
    spacing = float(np.min(dist[:, 1]))
    if not spacing > 0:
        raise ValueError("grid: two grid points at the same position")
    pairs = tree.query_pairs(1.3 * spacing, output_type="ndarray")
    return np.asarray(pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))], dtype=np.int64)


def grain_ids(u: np.ndarray, confidence: np.ndarray, pairs: np.ndarray,
              gb_angle_deg: float) -> Tuple[np.ndarray, np.ndarray]:
    """Flood fill: grain id per point (0 where not fitted), ids in grid order of each
    grain's first point, and each pair's misorientation."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from kernels import misorientation

    n = len(u)
    fitted = (np.asarray(confidence) > 0) & np.isfinite(u).all(axis=(1, 2))
    mis = np.full(len(pairs), np.inf)
    if len(pairs):
        both = fitted[pairs[:, 0]] & fitted[pairs[:, 1]]
        if both.any():
            mis[both] = misorientation(u[pairs[both, 0]], u[pairs[both, 1]])
    keep = pairs[mis <= gb_angle_deg]
    graph = coo_matrix((np.ones(len(keep)), (keep[:, 0], keep[:, 1])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    idx = np.flatnonzero(fitted)
    _, first, inverse = np.unique(labels[idx], return_index=True, return_inverse=True)
    number = np.empty(len(first), np.int32)     # 1, 2, ... in order of first appearance
    number[np.argsort(first)] = np.arange(1, len(first) + 1)
    ids = np.zeros(n, np.int32)
    ids[idx] = number[inverse.reshape(-1)]
    return ids, mis


def ipf_colors(u: np.ndarray, direction=(0.0, 0.0, 1.0)) -> np.ndarray:
    """(n, 3) float32 RGB in 0..1: the IPF colour of sample ``direction`` (module docstring);
    grey (0.5) where ``u`` is NaN."""
    u = np.asarray(u, dtype=np.float64).reshape(-1, 3, 3)
    v = np.asarray(direction, dtype=np.float64)
    v = v / np.linalg.norm(v)
    h = np.einsum("nji,j->ni", u, v)            # U^T v: the direction in crystal axes
    h = np.sort(np.abs(h), axis=1)
    rgb = np.stack([h[:, 2] - h[:, 1], h[:, 1] - h[:, 0], h[:, 0]], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rgb = rgb / rgb.max(axis=1, keepdims=True)
    rgb[~np.isfinite(rgb).all(axis=1)] = 0.5
    return np.clip(rgb, 0.0, 1.0).astype(np.float32)


def write_map_h5(path: str, fit: np.ndarray, grid: np.ndarray, grains: np.ndarray,
                 seeds: np.ndarray, params: Mapping[str, Any],
                 extra_attrs: Optional[Mapping[str, Any]] = None) -> str:
    """Write the HDF5 map (module docstring); atomically (temp file, rename)."""
    from hedm.output import write_h5

    arrays = {"position": np.stack([fit["x"], fit["y"]], axis=1),
              "up_down": fit["ud"].astype(np.int8), "grid": np.asarray(grid, np.float64),
              "euler": fit["euler"], "orientation_matrix": fit["u"],
              "confidence": fit["confidence"], "grain_id": grains.astype(np.int32),
              "n_candidates": fit["n_candidates"].astype(np.int32),
              "seed": fit["seed"].astype(np.int32), "n_evals": fit["n_evals"].astype(np.int32),
              "ipf_z": ipf_colors(fit["u"]), "seeds": np.asarray(seeds, np.float64)}
    return write_h5(path, arrays, params, extra_attrs)


def write_mic(path: str, fit: np.ndarray, gs: float, phase_nr: int = 1, num_phases: int = 1,
              global_position: float = 0.0) -> str:
    """Write MIDAS's text ``.mic`` (rows with confidence > 0); ``gs``: the half edge (um)."""
    rows = fit[fit["confidence"] > 0]
    edge = 2.0 * float(gs)
    with output_file(path) as fh:
        fh.write(f"%TriEdgeSize {edge:f}\n%NumPhases {int(num_phases)}\n"
                 f"%GlobalPosition {global_position:f}\n")
        fh.write("%" + "\t".join(MIC_COLUMNS) + "\n")
        for r in rows:
            vals = (r["seed"], r["n_candidates"], 0.0, r["x"], r["y"], edge, r["ud"],
                    r["euler"][0], r["euler"][1], r["euler"][2], r["confidence"])
            fh.write("".join(f"{float(v):f}\t" for v in vals) + f"{int(phase_nr)}\n")
    return path


def _ipf_key(ax: Any) -> None:
    """Draw the colour key: the standard triangle [001]-[011]-[111] in stereographic projection."""
    n = 60
    pts, cols = [], []
    for i in range(n + 1):
        for j in range(i + 1):
            # h = (h0, h1, h2) with 0 <= h0 <= h1 <= h2: the standard triangle
            h = np.array([j / n, i / n, 1.0])
            h = h / np.linalg.norm(h)
            x, y = h[1] / (1 + h[2]), h[0] / (1 + h[2])
            pts.append((x, y))
            s = np.sort(h)
            rgb = np.array([s[2] - s[1], s[1] - s[0], s[0]])
            cols.append(rgb / rgb.max())
    p = np.array(pts)
    ax.scatter(p[:, 0], p[:, 1], c=np.array(cols), s=6, marker="s", linewidths=0)
    for label, corner in (("001", (0, 0, 1)), ("011", (0, 1, 1)), ("111", (1, 1, 1))):
        h = np.array(corner, float) / np.linalg.norm(corner)
        ax.annotate(label, (h[1] / (1 + h[2]), h[0] / (1 + h[2])), fontsize=7,
                    ha="center", va="top" if label != "111" else "bottom")
    ax.set_aspect("equal")
    ax.axis("off")


def plot_map(path: str, fit: np.ndarray, grid: np.ndarray, grains: np.ndarray,
             title: str = "NF-HEDM orientation map") -> str:
    """PNG: the IPF-z coloured map (with its colour key) beside the confidence map."""
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    from kernels.nfgrid import grid_vertices

    from hedm.output import save_png

    verts = list(grid_vertices(grid))
    fig = Figure(figsize=(12.0, 5.2))
    spec = fig.add_gridspec(2, 3, width_ratios=(1.0, 0.2, 1.1), height_ratios=(1.0, 0.35))
    colors = ipf_colors(fit["u"])
    n_grains = int(grains.max()) if len(grains) else 0
    ax = fig.add_subplot(spec[:, 0])
    ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="face",
                                     linewidths=0.2))
    ax.set_title(f"{title}\nIPF colour of sample z; {n_grains} grains", fontsize=10)
    bx = fig.add_subplot(spec[:, 2])
    coll = PolyCollection(verts, array=fit["confidence"], cmap="viridis", edgecolors="face",
                          linewidths=0.2)
    coll.set_clim(0.0, 1.0)
    bx.add_collection(coll)
    fig.colorbar(coll, ax=bx, fraction=0.046, pad=0.04, label="confidence")
    bx.set_title(f"confidence (mean {float(np.mean(fit['confidence'])):.3f}, "
                 f"{len(fit)} grid points)", fontsize=10)
    corners = np.asarray(verts).reshape(-1, 2)
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    for a in (ax, bx):
        a.set_xlim(lo[0], hi[0])
        a.set_ylim(lo[1], hi[1])
        a.set_aspect("equal")
        a.set_xlabel("x (um, along the beam at omega 0)")
        a.set_ylabel("y (um)")
    _ipf_key(fig.add_subplot(spec[1, 1]))
    fig.tight_layout()
    return save_png(fig, path)


def map_summary(fit: np.ndarray, grains: np.ndarray) -> Dict[str, Any]:
    """Counts for run records: points, fitted, grains, confidence statistics."""
    conf = fit["confidence"]
    fitted = conf > 0
    return {"points": int(len(fit)), "fitted": int(fitted.sum()),
            "grains": int(grains.max()) if len(grains) else 0,
            "confidence_mean": float(conf.mean()) if len(conf) else 0.0,
            "confidence_median_fitted": float(np.median(conf[fitted])) if fitted.any() else 0.0}


def stem_paths(out_dir: str, mic_name: str) -> Dict[str, str]:
    """``{"mic", "h5", "png"}`` paths in ``out_dir`` for the ``.mic`` name ``mic_name``."""
    stem = os.path.splitext(mic_name)[0] if mic_name.endswith(".mic") else mic_name
    return {"mic": os.path.join(out_dir, stem + ".mic"), "h5": os.path.join(out_dir, stem + ".h5"),
            "png": os.path.join(out_dir, stem + ".png")}
