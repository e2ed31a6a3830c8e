"""Result files of the HEDM workflows: HDF5 layouts, CSV tables, PNG figures.

Every writer writes under a temporary name and renames into place, so a
drain (or a user) never sees half a file. Detector axes follow NF/FF-HEDM
usage: ``z`` is the detector row (vertical), ``y`` the column (horizontal).

NF file (``<ReducedFileName>.h5``, or ``<scan>.h5`` of a stream: one layout,
:meth:`hedm.nfreduce.NFReduce.write` through :func:`analyses.output.write_scan`;
``distance`` is the detector distance index, ``frame`` counts from RawStartNr within
a distance)::

    /spots            table (distance, frame, y, z, intensity, label): every spot pixel
    /spot_centroids   table (distance, frame, label, y, z, n_pixels, intensity_sum,
                      intensity_max)
    /frames           table (distance, frame, n_pixels, n_spots)
    /background       (D, H, W) uint16 per-pixel median background of each distance
    /max_projection   (D, H, W) uint16 maximum over the frames of each distance (file
                      flow only: a stream cannot wait for the last frame)
    /binary_images    the array of ``<ReducedFileName>_binary.npy``, gzip-compressed
    /n_pixels_image, /n_spots_image   (D, F) per frame position
    /frames_complete, /frames_received   (D, F) bool: which frames were read / arrived
    attributes of /   every parameter, "workflow" ("hedm_nf"), and the scan's
                      (scan, frames, scan_shape, frame_shape, dtype, analysis, ...)

Beside it, ``<ReducedFileName>_binary.npy`` holds the same spot pixels as
bit-packed binary images, stage 2's input (``docs/nf-files.md``).

FF file (``<OutputFileName>.h5``, or ``<scan>.h5`` of a stream: one layout,
:meth:`hedm.ffpeaks.FFPeaks.write` through :func:`analyses.output.write_scan`)::

    /peaks            table of kernels.ff.PEAK_DTYPE (frame, peak, row, col, ...)
    /frames           table (frame, n_peaks)
    /dark             (H, W) float32 dark used
    /n_peaks_image    (1, F) peaks per frame position
    /frames_complete, /frames_received   (1, F) bool: which frames were read / arrived
    attributes of /   every parameter, "workflow" ("hedm_ff"), and the scan's
                      (scan, frames, scan_shape, frame_shape, dtype, analysis, ...)

Tables are HDF5 compound datasets: ``f["spots"]["frame"]`` reads one column.
Figures are drawn with matplotlib's object API on an Agg canvas (no pyplot
global state, safe in worker threads and without a display).
"""
from __future__ import annotations

import csv
import os
from typing import Any, Mapping, Optional

import numpy as np

from hedm.common import output_file
from core.outputs import mark

__all__ = ["NF_PIXEL_DTYPE", "NF_CENTROID_DTYPE", "NF_FRAME_DTYPE", "FF_FRAME_DTYPE",
           "write_h5", "write_csv", "save_png", "plot_nf", "plot_ff"]

NF_PIXEL_DTYPE = np.dtype([("distance", np.int16), ("frame", np.int32), ("y", np.int32),
                           ("z", np.int32), ("intensity", np.uint16), ("label", np.int32)])
NF_CENTROID_DTYPE = np.dtype([("distance", np.int16), ("frame", np.int32), ("label", np.int32),
                              ("y", np.float64), ("z", np.float64), ("n_pixels", np.int32),
                              ("intensity_sum", np.float64), ("intensity_max", np.uint16)])
NF_FRAME_DTYPE = np.dtype([("distance", np.int16), ("frame", np.int32), ("n_pixels", np.int32),
                           ("n_spots", np.int32)])
FF_FRAME_DTYPE = np.dtype([("frame", np.int32), ("n_peaks", np.int32)])


def _attr(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, np.number)) else str(value)


def write_h5(path: str, arrays: Mapping[str, np.ndarray], params: Mapping[str, Any],
             extra_attrs: Optional[Mapping[str, Any]] = None) -> str:
    """Write ``arrays`` as datasets and ``params`` (+ ``extra_attrs``) as root attributes,
    marked as this project's, with :func:`workflows.results.write_arrays`."""
    from workflows.results import write_arrays

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    attrs = {k: _attr(v) for k, v in params.items() if v is not None}
    attrs.update({k: _attr(v) for k, v in (extra_attrs or {}).items()})
    mark(attrs)         # ours: a later run may replace it, and the files named after it
    return write_arrays(path, arrays, file_attrs=attrs, mode="w")


def write_csv(path: str, table: np.ndarray, float_format: str = "%.6g") -> str:
    """Write a structured array as CSV with a header row (atomically)."""
    names = table.dtype.names or ()
    floats = [table.dtype[n].kind == "f" for n in names]
    with output_file(path) as fh:
        out = csv.writer(fh)
        out.writerow(names)
        for row in table.tolist():
            out.writerow([float_format % v if f else v for v, f in zip(row, floats)])
    return path


def save_png(fig: Any, path: str, dpi: int = 110) -> str:
    """Draw the matplotlib ``fig`` on an Agg canvas into the PNG ``path`` (atomically)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    with output_file(path, binary=True) as fh:
        fig.savefig(fh, dpi=dpi, format="png")
    return path


def plot_nf(path: str, max_projection: np.ndarray, background: np.ndarray,
            centroids: np.ndarray, n_frames: int, title: str = "NF-HEDM reduction") -> str:
    """PNG: max projection minus background with every detected spot's centroid circled,
    one panel per detector distance (``max_projection`` and ``background`` (D, H, W) or
    (H, W); ``centroids`` with a ``distance`` column when D > 1)."""
    from matplotlib.figure import Figure

    mp = np.asarray(max_projection)
    bg = np.asarray(background)
    if mp.ndim == 2:
        mp, bg = mp[None], bg[None]
    n_dist = mp.shape[0]
    h, w = mp.shape[1:]
    width = 7.2 if n_dist == 1 else min(16.0, 1.0 + 6.0 * n_dist * max(0.6, w / max(h, 1)) / 1.6)
    fig = Figure(figsize=(width, 6.4 if n_dist == 1 else 4.6))
    for d in range(n_dist):
        img = mp[d].astype(np.float64) - bg[d].astype(np.float64)
        lo, hi = np.percentile(img, [1.0, 99.9])
        lo, hi = float(lo), float(max(hi, lo + 1))
        ax = fig.add_subplot(1, n_dist, d + 1)
        shown = ax.imshow(img, cmap="gray", vmin=max(lo, 0.0), vmax=hi, origin="upper",
                          interpolation="nearest")
        mine = centroids
        if len(centroids) and "distance" in (centroids.dtype.names or ()):
            mine = centroids[centroids["distance"] == d]
        if len(mine):
            ax.scatter(mine["y"], mine["z"], s=28 if n_dist == 1 else 10, facecolors="none",
                       edgecolors="red", linewidths=0.7,
                       label=f"{len(mine)} spot detections over {n_frames} frames")
            ax.legend(loc="upper right", fontsize=8, framealpha=0.8)
        ax.set_xlabel("y (detector column, px)")
        ax.set_ylabel("z (detector row, px)")
        where = "" if n_dist == 1 else f"distance {d}: "
        ax.set_title(f"{title}: {where}max projection of {n_frames} frames minus background",
                     fontsize=10 if n_dist == 1 else 8)
        fig.colorbar(shown, ax=ax, fraction=0.046 * min(1.0, h / w), pad=0.04,
                     label="counts above background")
    fig.tight_layout()
    return save_png(fig, path)


def plot_ff(path: str, peaks: np.ndarray, shape: tuple, frames: np.ndarray,
            title: str = "FF-HEDM peak search") -> str:
    """PNG: peak positions on the detector coloured by frame, and peaks per frame."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 5.0))
    ax = fig.add_subplot(1, 2, 1)
    if len(peaks):
        pts = ax.scatter(peaks["col"], peaks["row"], c=peaks["frame"], s=10, cmap="viridis")
        fig.colorbar(pts, ax=ax, fraction=0.046, pad=0.04, label="frame")
    ax.set_xlim(-0.5, shape[1] - 0.5)
    ax.set_ylim(shape[0] - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xlabel("y (detector column, px)")
    ax.set_ylabel("z (detector row, px)")
    ax.set_title(f"{title}: {len(peaks)} peak centroids", fontsize=10)
    bx = fig.add_subplot(1, 2, 2)
    bx.bar(frames["frame"], frames["n_peaks"], width=0.8, color="tab:blue")
    bx.set_xlabel("frame")
    bx.set_ylabel("peaks found")
    bx.set_title("peaks per frame", fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)
