"""Frame sources every simulator streams: a synthetic 4D-STEM frame, an array, an HDF5
dataset; each a function of the frame index. :mod:`streams.simulate` (the native
producers) and each protocol's ``simulator`` module import them from here, beneath both."""
from __future__ import annotations

import threading
from typing import Callable, Tuple

import numpy as np

__all__ = ["synthetic_frame", "array_source", "hdf5_source"]


def synthetic_frame(index: int, shape: Tuple[int, int] = (64, 64),
                    scan_shape: Tuple[int, int] = (8, 8), dtype: str = "<u2",
                    seed: int = 0) -> np.ndarray:
    """One synthetic 4D-STEM frame, the same for the same arguments: a bright-field disk
    shifting with the scan position, sparse 80-160 count hits, a dark level of ~20."""
    rows, cols = shape
    ny, nx = scan_shape
    y, x = divmod(index, nx)
    rng = np.random.default_rng([seed, index])
    cy = rows / 2 + rows / 16 * np.sin(2 * np.pi * y / max(ny, 1))
    cx = cols / 2 + cols / 16 * np.cos(2 * np.pi * x / max(nx, 1))
    yy, xx = np.ogrid[:rows, :cols]
    disk = ((yy - cy) ** 2 + (xx - cx) ** 2) < (min(rows, cols) / 8) ** 2
    electrons = rng.poisson(0.01 + 0.3 * disk)
    gain = rng.integers(80, 160, size=shape)
    dark = rng.normal(20, 2, size=shape).clip(0)
    info = np.iinfo(np.dtype(dtype)) if np.dtype(dtype).kind in "ui" else None
    frame = dark + electrons * gain
    if info is not None:
        frame = frame.clip(info.min, info.max)
    return frame.astype(dtype)


def array_source(stack: np.ndarray) -> Callable[[int], np.ndarray]:
    """Frames from an array ``(frames, rows, cols)`` or ``(ny, nx, rows, cols)``."""
    flat = stack.reshape(-1, *stack.shape[-2:])
    return lambda i: flat[i]


def hdf5_source(path: str, dataset: str) -> Callable[[int], np.ndarray]:
    """Frames from an HDF5 dataset ``(frames, rows, cols)`` or ``(ny, nx, rows, cols)``,
    read one at a time (serial h5py, opened per call: safe from several threads)."""
    lock = threading.Lock()

    def read(i: int) -> np.ndarray:
        import h5py

        with lock, h5py.File(path, "r") as f:
            d = f[dataset]
            if d.ndim == 4:
                return d[divmod(i, d.shape[1])]
            return d[i]
    return read
