"""A synthetic 4D-STEM scan as an HDF5 file: the frames the detector simulator streams.

``write_scan_file(path, scan_shape, shape)`` writes ``/frames`` (ny, nx, rows,
cols) uint16 with :func:`streams.simulate.synthetic_frame` -- the same
frames ``python -m streams.simulate`` sends by default, so a streamed scan
and the file processed offline can be compared bit for bit.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

__all__ = ["write_scan_file"]


def write_scan_file(path: str, scan_shape: Tuple[int, int] = (16, 16),
                    shape: Tuple[int, int] = (128, 128), seed: int = 0) -> str:
    """Write the synthetic scan to ``path`` (dataset ``/frames``); return ``path``."""
    import h5py

    from streams.simulate import synthetic_frame

    ny, nx = scan_shape
    with h5py.File(path, "w") as f:
        d = f.create_dataset("frames", (ny, nx, *shape), dtype="<u2",
                             chunks=(1, 1, *shape))
        for i in range(ny * nx):
            d[divmod(i, nx)] = synthetic_frame(i, shape, scan_shape, "<u2", seed)
        f.attrs["source"] = "streams.simulate.synthetic_frame"
        f.attrs["seed"] = seed
    return path


def frames_array(scan_shape: Tuple[int, int], shape: Tuple[int, int], seed: int = 0
                 ) -> np.ndarray:
    """The same frames in memory, (ny*nx, rows, cols)."""
    from streams.simulate import synthetic_frame

    return np.stack([synthetic_frame(i, shape, scan_shape, "<u2", seed)
                     for i in range(scan_shape[0] * scan_shape[1])])
