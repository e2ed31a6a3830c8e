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
           "empad": "empad", "hspy": "hspy"}
EXTRA_HINT = ("install the optional reader RosettaSciIO: pip install -c constraints.txt "
              "rosettasciio (without its hdf5 extra)")


def _image_axes(sig) -> list | None:
    """The signal axes of a RosettaSciIO signal if they are the last two (frames), else None."""
    nd = len(sig["data"].shape)
    image = [i for i, ax in enumerate(sig["axes"]) if not ax.get("navigate", False)]
    return image if image == [nd - 2, nd - 1] else None


class RsciioFrames(FrameSource):
    """Frames of an electron-microscopy file read by RosettaSciIO.

    Parameters
    ----------
    path : str
    kind : str, optional
        Plugin key of :data:`PLUGINS`; default from the file's bytes or name.
    signal : int, optional
        Which of the file's signals (a file may hold several: a Velox EMD holds
        one per detector, HAADF, BF, ...).  Default: the only signal that holds
        frames (two signal axes, last); several are a ``ReaderError`` listing
        them (index, title, shape), never a guess.
    dtype, overflow : output dtype and overflow rule (:mod:`kernels.io.convert`)
    """

    def __init__(self, path, kind: str | None = None, signal: int | None = None, dtype=None,
                 overflow: str = "error"):
        self.path = os.fspath(path)
        self.kind = kind or self._kind()
        self.signal = None if signal is None else int(signal)
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
            hint = (" (an HDF5 file: pass dataset= and frame_axis= to read one of its "
                    "datasets with the HDF5 reader)" if self.kind in ("emd", "hspy") else "")
            raise ReaderError(f"{self.path!r} cannot be read by RosettaSciIO "
                              f"({self.kind}): {exc}{hint}") from exc
        if self.signal is None:
            frames = [i for i, s in enumerate(signals) if _image_axes(s) is not None]
            listed = "; ".join(
                f"signal={i}: {s.get('metadata', {}).get('General', {}).get('title', '?')} "
                f"{tuple(s['data'].shape)}" for i, s in enumerate(signals)) or "no signal"
            if len(frames) > 1:
                raise ReaderError(f"{self.path!r} holds {len(frames)} signals of frames "
                                  f"({listed}); pass signal=N")
            if not frames:
                hint = (": pass dataset= and frame_axis= to read one of its datasets with the "
                        "HDF5 reader" if self.kind in ("emd", "hspy") else "")
                raise ReaderError(f"{self.path!r}: none of its signals ({listed}) has frames "
                                  "(two signal axes, the last two, as RosettaSciIO reads "
                                  f"it){hint}")
            self.signal = frames[0]
        if not 0 <= self.signal < len(signals):
            raise ReaderError(f"{self.path!r} has {len(signals)} signals; signal={self.signal}")
        sig = signals[self.signal]
        data = sig["data"]
        image = _image_axes(sig)
        if image is None:
            image = [i for i, ax in enumerate(sig["axes"]) if not ax.get("navigate", False)]
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
