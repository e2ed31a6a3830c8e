"""Arrays given as parameters: inline, or files a hook stages like any input.

A dark reference, a gain map or a mask stack is given as a number or nested list
(inline), or as a path: ``FILE.npy``, ``FILE.npz`` (masks: one entry per mask,
named by its key), ``FILE.h5:/dataset`` (HDF5; for masks also a group: one mask
per 2-D dataset in it, named by the dataset). Paths are plain paths, so a hook
spec stages them to node-local storage like the frames.
"""
from __future__ import annotations

import os
from typing import Any, List, Tuple

import numpy as np

from stem4d.errors import Stem4DError

__all__ = ["load_array", "load_masks", "describe"]


def _h5_split(spec: str) -> Tuple[str, str]:
    path, sep, dset = spec.rpartition(":")
    if sep and path and dset.startswith("/"):
        return path, dset
    return spec, ""


def describe(spec: Any) -> str:
    """How ``spec`` is recorded in the output file's metadata."""
    if spec is None:
        return "none"
    if isinstance(spec, str):
        return spec
    if np.ndim(spec) == 0:
        return f"constant {float(spec)!r}"
    return f"array {np.shape(spec)}"


def load_array(spec: Any, what: str) -> np.ndarray:
    """The array named by ``spec`` (see the module docstring), as it is stored.

    Raises
    ------
    Stem4DError
        A missing file, an unknown suffix, an HDF5 path without ``:/dataset``.
    """
    if not isinstance(spec, str):
        return np.asarray(spec)
    path, dset = _h5_split(spec)
    if not os.path.exists(path):
        raise Stem4DError(f"{what}: file {path} does not exist")
    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    if path.endswith((".h5", ".hdf5", ".hdf", ".nxs")):
        import h5py

        if not dset:
            raise Stem4DError(f"{what}: give the dataset of {path} as {path}:/DATASET")
        with h5py.File(path, "r") as f:
            if dset not in f or not isinstance(f[dset], h5py.Dataset):
                raise Stem4DError(f"{what}: {path} has no dataset {dset}")
            return f[dset][()]
    raise Stem4DError(f"{what}: {spec!r} is not FILE.npy or FILE.h5:/DATASET")


def load_masks(spec: str) -> List[Tuple[str, np.ndarray]]:
    """``[(name, 2-D mask)]`` from a mask file (see the module docstring).

    A 2-D array is one mask named after the file (or dataset); a 3-D array is a
    stack ``(m, rows, cols)`` named ``<name>_<i>``, or by its attribute ``names``
    (HDF5) when present.
    """
    path, dset = _h5_split(spec)
    if not os.path.exists(path):
        raise Stem4DError(f"mask_file: file {path} does not exist")
    base = os.path.splitext(os.path.basename(path))[0]
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            return [(k, np.asarray(z[k])) for k in z.files]
    names: Any = None
    if path.endswith((".h5", ".hdf5", ".hdf", ".nxs")):
        import h5py

        if not dset:
            raise Stem4DError(f"mask_file: give the dataset or group of {path} as "
                              f"{path}:/PATH")
        with h5py.File(path, "r") as f:
            if dset not in f:
                raise Stem4DError(f"mask_file: {path} has no {dset}")
            obj = f[dset]
            if isinstance(obj, h5py.Group):
                out = [(k, v[()]) for k, v in obj.items() if isinstance(v, h5py.Dataset)]
                if not out:
                    raise Stem4DError(f"mask_file: group {dset} of {path} holds no dataset")
                return out
            arr = obj[()]
            names = obj.attrs.get("names")
            base = dset.rstrip("/").rsplit("/", 1)[-1] or base
    else:
        arr = load_array(spec, "mask_file")
    if arr.ndim == 2:
        return [(base, arr)]
    if arr.ndim == 3:
        if names is not None:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
            if len(names) != len(arr):
                raise Stem4DError(f"mask_file {spec}: {len(names)} names for {len(arr)} masks")
            return list(zip(names, arr))
        return [(f"{base}_{i}", a) for i, a in enumerate(arr)]
    raise Stem4DError(f"mask_file {spec}: shape {arr.shape}; expected (rows, cols) or "
                      "(masks, rows, cols)")
