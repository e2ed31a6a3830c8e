"""Electron-microscopy formats through RosettaSciIO (optional): MIB, SER/EMI, DM3/DM4,
EMPAD, EMD.

RosettaSciIO is HyperSpy's well-kept reader collection.  Its readers return a
signal as ``{"data", "axes"}`` where each axis says whether it ``navigate``\\ s
(scan positions) or is a signal axis (the detector image).  This adapter takes
a signal with exactly two signal axes, the last two, and numbers its frames by
the navigation axes in C order (a 4D-STEM scan (sy, sx, ky, kx) gives sy*sx
frames of (ky, kx)); anything else is a ``ReaderError``.  Data are opened
lazily (dask), one frame computed per read.  Frames are oriented as RosettaSciIO
returns them (e.g. it flips Merlin MIB frames vertically: row 0 of a frame is
the last row stored in the file).

Install: ``pip install -c constraints.txt rosettasciio`` -- its core needs no
h5py (its ``hdf5`` extra would pull a PyPI h5py over Debian's MPI build: do not
ask for it; the EMD reader uses whichever h5py is installed).
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import ReaderError
from .base import FrameSource

__all__ = ["RsciioFrames", "PLUGINS"]

# sniffed kind -> RosettaSciIO plugin module
PLUGINS = {"mib": "quantumdetector", "dm": "digitalmicrograph", "ser": "tia", "emd": "emd",
           "empad": "empad"}
EXTRA_HINT = ("install the optional reader RosettaSciIO: pip install -c constraints.txt "
              "rosettasciio (without its hdf5 extra)")


class RsciioFrames(FrameSource):
    """Frames of an electron-microscopy file read by RosettaSciIO.

    Parameters
    ----------
    path : str
    kind : str, optional
        Plugin key of :data:`PLUGINS`; default from the file's bytes or name.
    signal : int
        Which of the file's signals (a file may hold several), default 0.
    dtype, overflow : output dtype and overflow rule (:mod:`kernels.io.convert`)
    """

    def __init__(self, path, kind: str | None = None, signal: int = 0, dtype=None,
                 overflow: str = "error"):
        self.path = os.fspath(path)
        self.kind = kind or self._kind()
        self.signal = int(signal)
        self._data = None
        data = self._frames()
        self.n_frames = int(data.shape[0])
        self.shape = tuple(int(s) for s in data.shape[1:])
        self.file_dtype = np.dtype(data.dtype)
        self._set_output(dtype, overflow)

    def _kind(self) -> str:
        from .signatures import sniff

        kind = sniff(self.path)
        if kind in PLUGINS:
            return kind
        ext = os.path.splitext(self.path)[1].lower().lstrip(".")
        for k in PLUGINS:
            if ext in (k, {"ser": "emi", "dm": "dm4"}.get(k)):
                return k
        raise ReaderError(f"{self.path!r}: not a format RosettaSciIO is used for here "
                          f"({sorted(PLUGINS)}); pass kind=")

    def _frames(self):
        if self._data is not None:
            return self._data
        import importlib

        try:
            plugin = importlib.import_module(f"rsciio.{PLUGINS[self.kind]}")
        except ImportError as exc:
            raise ReaderError(f"reading {self.path!r} ({self.kind}) needs RosettaSciIO, which "
                              f"is not installed or incomplete ({exc}); {EXTRA_HINT}") from exc
        try:
            signals = plugin.file_reader(self.path, lazy=True)
        except Exception as exc:
            raise ReaderError(f"{self.path!r} cannot be read by RosettaSciIO "
                              f"({self.kind}): {exc}") from exc
        if not 0 <= self.signal < len(signals):
            raise ReaderError(f"{self.path!r} has {len(signals)} signals; signal={self.signal}")
        sig = signals[self.signal]
        data, axes = sig["data"], sig["axes"]
        image = [i for i, ax in enumerate(axes) if not ax.get("navigate", False)]
        nd = len(data.shape)
        if image != [nd - 2, nd - 1]:
            raise ReaderError(f"{self.path!r} signal {self.signal} has signal axes {image} of "
                              f"shape {tuple(data.shape)}; frames need the last two")
        n = int(np.prod(data.shape[:-2], dtype=np.int64))
        self._data = data.reshape((n, *data.shape[-2:]))
        return self._data

    def _read_band(self, index, r0, r1, out):
        try:
            out[...] = np.asarray(self._frames()[index, r0:r1])
        except ReaderError:
            raise
        except Exception as exc:
            raise ReaderError(f"{self} frame {index} cannot be read: {exc}") from exc

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_data"] = None
        return state
