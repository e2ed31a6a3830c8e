"""The 4D-STEM output file, ``<scan>.h5`` (``docs/stem4d-output.md``; the receiving
job's part in ``docs/stream-protocol.md``, section 10).

The scan-shaped images, and the electron events in stempy's sparse layout
(``SparseArray.write_to_hdf5``, format version 3 of OpenChemistry/stempy), so
``stempy.io.load_electron_counts`` reads the events of a file written here::

    /sum_image                        float64 (ny, nx)
    /virtual/<mask name>              float64 (ny, nx)   one per mask (attrs: geometry)
    /electron_counts                  int64   (ny, nx)                    (counting)
    /electron_events/frames           vlen uint32 (ny*nx*L,) attrs Nx = rows, Ny = cols
    /electron_events/scan_positions   int32 (ny*nx,)         attrs Nx = nx, Ny = ny
    /metadata/electron_counting       attrs: stempy's threshold metadata and ours
    (root attribute version = 3)

``L`` is 1 for events counted here (a pixel at most once a frame). A counting
detector's events (``events="detector"``: a pixel may hold several electrons) are
written as stempy writes several frames per scan position: entry ``p * L + j`` holds
the pixels of position p hit more than j times, so stempy's sums and dense frames
count every electron (:func:`_layers`). Plus ``/frames_complete`` and
``/frames_received`` written by the receiving job
(:mod:`analyses.output`). :func:`read_events` reads the events back, from
our files and from stempy's (several frames per scan position too).
"""
from __future__ import annotations

from typing import Any, List, Tuple, Union

import numpy as np

from analyses.contract import PerFrame
from streams.protocol import ScanGeometry
from stem4d.errors import Stem4DError

__all__ = ["write_stem", "read_events", "STEMPY_VERSION"]

#: stempy's sparse format version this layout follows.
STEMPY_VERSION = 3


def _ragged_objects(counts: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """Object array of per-frame arrays, filled element by element: ``np.array`` of
    equal-length pieces (no events at all, or equal counts) would make a 2-D array."""
    data = np.empty(len(counts), dtype=object)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    for f in range(len(counts)):
        data[f] = np.ascontiguousarray(flat[starts[f]:starts[f] + counts[f]], np.uint32)
    return data


def _layers(counts: np.ndarray, flat: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int]:
    """Per-frame events where a pixel may repeat as L frames each in which none does:
    (counts (F * L,), flat, L), entry ``f * L + j`` the pixels of frame f with more than
    j events, increasing. Unchanged when no pixel repeats (L = 1)."""
    F = len(counts)
    row = np.repeat(np.arange(F, dtype=np.int64), counts)
    key = row * (int(flat.max()) + 1 if len(flat) else 1) + flat
    order = np.argsort(key, kind="stable")
    key = key[order]
    at = np.arange(len(key))
    first = np.maximum.accumulate(np.where(np.r_[True, key[1:] != key[:-1]], at, 0))
    rank = at - first                       # the how-many-th event of its pixel
    L = int(rank.max()) + 1 if len(rank) else 1
    if L == 1:
        return counts, flat, 1
    slot = row[order] * L + rank
    again = np.argsort(slot, kind="stable")
    return np.bincount(slot, minlength=F * L), flat[order][again], L


def write_stem(h5: Any, analysis: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
    """Write every dataset of the layout into the open file ``h5``."""
    import h5py

    from stem4d.inputs import describe

    g = geometry
    F = g.frames
    ny, nx = g.scan_shape
    rows, cols = g.shape
    imgs = analysis.images(partial, g)
    h5.create_dataset("sum_image", data=imgs["sum_image"])
    if analysis.virtual:
        v = h5.create_group("virtual")
        for m in analysis.masks(g.shape):
            d = v.create_dataset(m.name, data=imgs[f"virtual/{m.name}"])
            d.attrs.update(m.attrs)
    if not analysis.counting:
        return
    h5.create_dataset("electron_counts", data=imgs["electron_counts"])
    counts, flat = partial.ragged("events", F, np.uint32) if partial.chunks else \
        (np.zeros(F, np.int64), np.zeros(0, np.uint32))
    detector = analysis.params["events"] == "detector"
    counts, flat, L = _layers(counts, flat) if detector else (counts, flat, 1)
    h5.attrs["version"] = STEMPY_VERSION
    grp = h5.create_group("electron_events")
    pos = grp.create_dataset("scan_positions", data=np.arange(F, dtype=np.int32))
    pos.attrs["Nx"] = nx
    pos.attrs["Ny"] = ny
    # given at creation: h5py's ``dset[...] = objects`` turns equal-length pieces
    # (a dark scan, equal counts) into a 2-D array and refuses to broadcast it
    frames = grp.create_dataset("frames", data=_ragged_objects(counts, flat),
                                dtype=h5py.vlen_dtype(np.uint32))
    frames.attrs["Nx"] = rows
    frames.attrs["Ny"] = cols
    meta = h5.require_group("metadata").require_group("electron_counting")
    if detector:
        said = {"events": "the detector's: a pixel's value is that many electrons (no dark, "
                          "gain or thresholds)", "frames_per_position": L,
                "pixel_index": "row * cols + col"}
        grp.attrs.update(said)
        meta.attrs.update({**said, "scan_shape": [ny, nx], "frame_shape": [rows, cols],
                           "frame_dtype": np.dtype(g.dtype).name})
        return
    p = analysis.params
    t = analysis.thresholds()
    grp.attrs.update({"dark": describe(p["dark"]),
                      "background_threshold": t.background_threshold,
                      "xray_threshold": t.x_ray_threshold,
                      "pixel_index": "row * cols + col"})
    meta.attrs.update(t.as_dict())          # stempy's names (electron_count's metadata)
    meta.attrs.update({"dark_reference": describe(p["dark"]), "gain": describe(p["gain"]),
                       "gain_meaning": "counted value = (frame - dark) / gain",
                       "rule": p["rule"], "thresholds": p["thresholds"],
                       "threshold_frames": describe(p["threshold_frames"]),
                       "scan_shape": [ny, nx], "frame_shape": [rows, cols],
                       "frame_dtype": np.dtype(g.dtype).name,
                       "pixel_index": "row * cols + col"})


def read_events(path: str, per_position: bool = False
                ) -> Tuple[List[Any], Tuple[int, int], Tuple[int, int]]:
    """The events of a file in stempy's sparse layout (ours or stempy's own).

    Parameters
    ----------
    path : str
    per_position : bool
        False: one array per scan position (a file with one frame per position);
        True: one list of arrays (its frames) per scan position, any layout.

    Returns
    -------
    (events, scan_shape (ny, nx), frame_shape (rows, cols)), events in position order.

    Raises
    ------
    Stem4DError
        Several frames per position without ``per_position=True``, or entries
        that fit no layout stempy writes.
    """
    import h5py

    with h5py.File(path, "r") as f:
        version = int(f.attrs.get("version", 1))
        fr = f["electron_events/frames"]
        pos = f["electron_events/scan_positions"]
        scan = (int(pos.attrs["Ny"]), int(pos.attrs["Nx"]))
        frame = (int(fr.attrs["Nx"]), int(fr.attrs["Ny"]))
        entries = fr[()]
        positions = pos[()]
    n = scan[0] * scan[1]
    per: List[List[np.ndarray]] = [[] for _ in range(n)]
    if len(entries) == len(positions):
        # one entry per scan position entry (ours, stempy's with one frame per position,
        # and stempy's older versions, where positions may repeat)
        for p, e in zip(positions.tolist(), entries):
            if not 0 <= p < n:
                raise Stem4DError(f"{path}: scan position {p} outside the scan {scan}")
            per[p].append(np.asarray(e, np.uint32))
    elif version >= 3 and n and len(entries) % n == 0:
        # stempy's version 3 with k frames per position: entries (positions, k) flattened
        k = len(entries) // n
        for j, e in enumerate(entries):
            per[j // k].append(np.asarray(e, np.uint32))
    else:
        raise Stem4DError(f"{path}: {len(entries)} event entries for {len(positions)} scan "
                          f"positions of a {scan[0]}x{scan[1]} scan (version {version}): no "
                          "layout stempy writes")
    if per_position:
        return per, scan, frame
    several = max((len(x) for x in per), default=0)
    if several > 1:
        raise Stem4DError(f"{path}: stempy layout with {several} frames per scan position "
                          f"({len(entries)} entries over {n} positions); call "
                          "read_events(path, per_position=True) for a list of frames per "
                          "position")
    out: List[Union[np.ndarray, Any]] = [x[0] if x else np.zeros(0, np.uint32) for x in per]
    return out, scan, frame
