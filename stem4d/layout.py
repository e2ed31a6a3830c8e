"""The 4D-STEM output file, ``<scan>.h5`` (specified in ``docs/stream-protocol.md``, section 10).

The scan-shaped images, and the electron events in stempy's sparse layout
(``SparseArray.write_to_hdf5``, format version 3 of OpenChemistry/stempy), so
``stempy.io.SparseArray.from_hdf5`` reads the events of a file written here::

    /sum_image                        float64 (ny, nx)
    /virtual/bright_field             float64 (ny, nx)
    /virtual/annular_dark_field       float64 (ny, nx)
    /electron_counts                  int64   (ny, nx)
    /electron_events/frames           vlen uint32 (ny*nx,)  attrs Nx = rows, Ny = cols
    /electron_events/scan_positions   int32 (ny*nx,)         attrs Nx = nx, Ny = ny
    (root attribute version = 3)

plus ``/frames_complete`` and ``/frames_received`` written by the receiving job
(:mod:`stager.stream.output`). :func:`read_events` reads the events back.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from stager.stream.analysis import PerFrame
from stager.stream.protocol import ScanGeometry

__all__ = ["write_stem", "read_events", "STEMPY_VERSION"]

#: stempy's sparse format version this layout follows.
STEMPY_VERSION = 3


def write_stem(h5: Any, analysis: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
    """Write every dataset of the layout into the open file ``h5``."""
    import h5py

    g = geometry
    F = g.frames
    ny, nx = g.scan_shape
    rows, cols = g.shape
    imgs = analysis.images(partial, g)
    det = analysis.detector(g.shape)
    h5.create_dataset("sum_image", data=imgs["sum_image"])
    v = h5.create_group("virtual")
    bf = v.create_dataset("bright_field", data=imgs["bright_field"])
    bf.attrs.update({"center": det["center"], "r_inner": 0.0, "r_outer": det["bf_radius"]})
    adf = v.create_dataset("annular_dark_field", data=imgs["annular_dark_field"])
    adf.attrs.update({"center": det["center"], "r_inner": det["adf_inner"],
                      "r_outer": det["adf_outer"]})
    h5.create_dataset("electron_counts", data=imgs["electron_counts"])
    counts, flat = partial.ragged("events", F, np.uint32) if partial.chunks else \
        (np.zeros(F, np.int64), np.zeros(0, np.uint32))
    h5.attrs["version"] = STEMPY_VERSION
    grp = h5.create_group("electron_events")
    pos = grp.create_dataset("scan_positions", data=np.arange(F, dtype=np.int32))
    pos.attrs["Nx"] = nx
    pos.attrs["Ny"] = ny
    frames = grp.create_dataset("frames", (F,), dtype=h5py.vlen_dtype(np.uint32))
    frames.attrs["Nx"] = rows
    frames.attrs["Ny"] = cols
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    data = np.empty(F, dtype=object)
    for f in range(F):
        data[f] = flat[starts[f]:starts[f] + counts[f]]
    frames[...] = data
    p = analysis.params
    grp.attrs.update({"dark": p["dark"], "background_threshold": p["background_threshold"],
                      "xray_threshold": p["xray_threshold"],
                      "pixel_index": "row * cols + col"})


def read_events(path: str) -> Tuple[List[np.ndarray], Tuple[int, int], Tuple[int, int]]:
    """``(events per frame in frame order, scan_shape (ny, nx), frame_shape (rows, cols))``."""
    import h5py

    with h5py.File(path, "r") as f:
        fr = f["electron_events/frames"]
        pos = f["electron_events/scan_positions"]
        events: Dict[int, np.ndarray] = {int(p): np.asarray(e, np.uint32)
                                         for p, e in zip(pos[()], fr[()])}
        scan = (int(pos.attrs["Ny"]), int(pos.attrs["Nx"]))
        frame = (int(fr.attrs["Nx"]), int(fr.attrs["Ny"]))
    return [events.get(i, np.zeros(0, np.uint32)) for i in range(scan[0] * scan[1])], scan, frame
