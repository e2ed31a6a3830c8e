"""X-ray detector formats through fabio (optional): EDF, CBF, GE, Eiger, and the rest
fabio knows.

fabio is the ESRF's well-kept reader of 2-D X-ray detector images; this adapter
gives its frames the :class:`~kernels.io.base.FrameSource` interface (file
dtype by default, the :mod:`kernels.io.convert` rule when ``dtype=`` is asked).
fabio is an optional extra: install it with ``pip install --no-deps fabio``
(it declares ``h5py`` and ``hdf5plugin``, which must not replace Debian's MPI
h5py; its other declared dependencies, lxml, pillow and filelock, are not needed
for EDF, CBF, GE or Eiger: checked in a fresh venv without them).
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import ReaderError
from .base import FrameSource

__all__ = ["FabioFrames"]

EXTRA_HINT = ("install the optional reader fabio without replacing the MPI h5py: "
              "pip install --no-deps fabio hdf5plugin")


def _fabio():
    try:
        import fabio
    except ImportError as exc:
        raise ReaderError(f"reading this format needs fabio, which is not installed; "
                          f"{EXTRA_HINT}") from exc
    return fabio


class FabioFrames(FrameSource):
    """The frames of any file fabio opens (``nframes`` frames of one shape)."""

    def __init__(self, path, dtype=None, overflow: str = "error"):
        self.path = os.fspath(path)
        self._img = None
        img = self._image()
        data = img.data
        if data is None or data.ndim != 2:
            raise ReaderError(f"{self}: fabio returned {getattr(data, 'shape', None)}, not a "
                              "2-D frame")
        self.n_frames = int(img.nframes)
        self.shape = tuple(int(s) for s in data.shape)
        self.file_dtype = data.dtype
        self._set_output(dtype, overflow)

    def _image(self):
        if self._img is None:
            fabio = _fabio()
            try:
                self._img = fabio.open(self.path)
            except Exception as exc:
                raise ReaderError(f"{self.path!r} cannot be read by fabio: {exc}") from exc
        return self._img

    def _read_band(self, index, r0, r1, out):
        img = self._image()
        try:
            frame = img if img.currentframe == index else img.getframe(index)
        except Exception as exc:
            raise ReaderError(f"{self} frame {index} cannot be read by fabio: {exc}") from exc
        data = np.asarray(frame.data)
        if data.shape != self.shape:
            raise ReaderError(f"{self} frame {index} is {data.shape}, frame 0 is {self.shape}")
        out[...] = data[r0:r1]

    def close(self) -> None:
        img, self._img = self._img, None
        if img is not None and hasattr(img, "close"):
            img.close()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_img"] = None
        return state
