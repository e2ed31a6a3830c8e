"""HDF5 frame stacks."""
from __future__ import annotations

import os

import numpy as np

from ..errors import ReaderError, check_out
from .base import FrameSource

__all__ = ["HDF5Stack"]


class HDF5Stack(FrameSource):
    """A (n, H, W) uint16 HDF5 dataset; each read is one hyperslab (one chunk)."""

    def __init__(self, path, dataset: str = "/entry/data/data"):
        self.path = os.fspath(path)
        self.dataset = dataset
        self._file = None
        dset = self._dset()
        if dset.ndim != 3 or dset.dtype != np.uint16:
            raise ReaderError(f"{self.path}:{dataset} is {dset.dtype} {dset.shape}, "
                              "expected a 3-D uint16 (frames, rows, cols) dataset")
        self.n_frames = int(dset.shape[0])
        self.shape = tuple(int(s) for s in dset.shape[1:])

    def _dset(self):
        import h5py

        if self._file is None:
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as exc:
                raise ReaderError(f"HDF5 file {self.path!r} cannot be opened: {exc}") from exc
        try:
            return self._file[self.dataset]
        except KeyError as exc:
            raise ReaderError(f"HDF5 file {self.path!r} has no dataset {self.dataset!r}") from exc

    def read_rows(self, index, r0, r1, out=None):
        r1 = self._check(index, r0, r1)
        out = check_out("out", out, (r1 - r0, self.shape[1]), np.uint16)
        self._dset().read_direct(out, np.s_[index, r0:r1, :])
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_file"] = None
        return state


