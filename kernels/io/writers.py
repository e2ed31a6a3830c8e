"""Writers for the detector layouts :mod:`kernels.io` reads.

Each file is written under a temporary name and renamed into place, so a
reader never sees a half-written file.  Frames come from any iterable (e.g.
:func:`kernels.synth.frames`), one at a time, so memory stays one frame.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable

import numpy as np

from ..errors import KernelArgumentError
from .ge import GE_HEADER_BYTES

__all__ = ["write_tiff_series", "write_ge", "write_hdf5"]


@contextmanager
def _atomic(path: str):
    """Yield a temporary name next to ``path``; rename on success, remove on error."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        yield tmp
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)


def _frame(arr, shape=None) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype != np.uint16 or arr.ndim != 2 or (shape is not None and arr.shape != shape):
        raise KernelArgumentError(
            f"frames must be 2-D uint16 of one shape{'' if shape is None else ' ' + str(shape)}; "
            f"got {arr.dtype} {arr.shape}")
    return arr


def write_tiff_series(pattern: str, frames: Iterable[np.ndarray], first: int = 0) -> list[str]:
    """Write ``pattern % (first + i)`` (e.g. ``dir/stem_%06d.tif``) per frame; return the paths."""
    import tifffile

    paths = []
    for i, fr in enumerate(frames):
        path = pattern % (first + i)
        with _atomic(path) as tmp:
            tifffile.imwrite(tmp, _frame(fr), photometric="minisblack")
        paths.append(path)
    return paths


def write_ge(path: str, frames: Iterable[np.ndarray], header: bytes = b"",
             header_bytes: int = GE_HEADER_BYTES) -> int:
    """Write a GE raw file: ``header`` padded with zeros to ``header_bytes``, then the
    frames as little-endian uint16.  Returns the number of frames."""
    if len(header) > header_bytes:
        raise KernelArgumentError(f"header of {len(header)} bytes exceeds {header_bytes}")
    n = 0
    shape = None
    with _atomic(path) as tmp, open(tmp, "wb") as f:
        f.write(header.ljust(header_bytes, b"\0"))
        for fr in frames:
            fr = _frame(fr, shape)
            shape = fr.shape
            f.write(np.ascontiguousarray(fr, dtype="<u2").tobytes())
            n += 1
    return n


def write_hdf5(path: str, frames: Iterable[np.ndarray], n_frames: int, shape,
               dataset: str = "/entry/data/data", compression: str | None = None) -> None:
    """Write a NeXus-style stack: ``dataset`` of (n_frames, H, W) uint16, one chunk
    per frame, optional ``compression="gzip"``; NXentry/NXdata classes set."""
    import h5py

    shape = tuple(int(s) for s in shape)
    with _atomic(path) as tmp, h5py.File(tmp, "w") as f:
        dset = f.create_dataset(dataset, (n_frames, *shape), dtype=np.uint16,
                                chunks=(1, *shape), compression=compression)
        dset.attrs["interpretation"] = np.bytes_("image")   # NeXus: frames along axis 0
        parent = dset.parent
        if parent.name != "/":
            parent.attrs["NX_class"] = "NXdata"
            parent.attrs["signal"] = dset.name.rsplit("/", 1)[-1]
            if parent.parent.name != "/":
                parent.parent.attrs["NX_class"] = "NXentry"
        k = 0
        for k, fr in enumerate(frames, 1):
            if k > n_frames:
                raise KernelArgumentError(f"more than n_frames={n_frames} frames given")
            dset[k - 1] = _frame(fr, shape)
        if k != n_frames:
            raise KernelArgumentError(f"{k} frames given, n_frames={n_frames} declared")
