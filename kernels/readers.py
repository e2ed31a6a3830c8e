"""Detector-file readers: one frame (or a band of its rows) per call, never the whole file.

Three layouts, as the instruments write them:

* :class:`TiffSeries` -- one TIFF file per frame, named by a printf pattern
  such as ``/data/stem_%06d.tif`` (NF-HEDM);
* :class:`GEFile` -- GE raw: an ``header_bytes`` (8192) header, then
  little-endian uint16 frames of ``shape`` (2048x2048); the frame count
  follows from the file size;
* :class:`HDF5Stack` -- a ``(n, H, W)`` uint16 dataset, by default NeXus's
  ``/entry/data/data``, ideally one chunk per frame.

All are plain picklable objects (paths and small metadata; an open HDF5
handle is dropped on pickling), safe to ship to workflow tasks.  None uses
MPI: HDF5 is opened with the default (serial) driver, which Debian's MPI
build of h5py also supports.
"""
from __future__ import annotations

import os
import re

import numpy as np

from .errors import ReaderError, check_out

__all__ = ["GEFile", "TiffSeries", "HDF5Stack", "open_frames", "GE_HEADER_BYTES", "GE_SHAPE"]

GE_HEADER_BYTES = 8192
GE_SHAPE = (2048, 2048)


class _Source:
    n_frames: int
    shape: tuple

    def _check(self, index: int, r0: int = 0, r1: int | None = None):
        if not 0 <= index < self.n_frames:
            raise ReaderError(f"{self}: frame {index} outside 0..{self.n_frames - 1}")
        r1 = self.shape[0] if r1 is None else r1
        if not 0 <= r0 < r1 <= self.shape[0]:
            raise ReaderError(f"{self}: row band {r0}:{r1} outside 0:{self.shape[0]}")
        return r1

    def __len__(self) -> int:
        return self.n_frames

    def read(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frame ``index`` as a (H, W) uint16 array (into ``out`` if given)."""
        return self.read_rows(index, 0, self.shape[0], out)

    def read_rows(self, index, r0, r1, out=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self, 'path', getattr(self, 'pattern', ''))!r})"


class GEFile(_Source):
    """A GE raw file; ``read_rows`` reads only the bytes of the requested rows."""

    def __init__(self, path, shape=GE_SHAPE, header_bytes: int = GE_HEADER_BYTES):
        self.path = os.fspath(path)
        self.shape = tuple(int(s) for s in shape)
        self.header_bytes = int(header_bytes)
        try:
            size = os.stat(self.path).st_size
        except OSError as exc:
            raise ReaderError(f"GE file {self.path!r} cannot be opened: {exc.strerror}; "
                              "check the input path") from exc
        frame_bytes = 2 * self.shape[0] * self.shape[1]
        body = size - self.header_bytes
        if body < 0 or body % frame_bytes:
            raise ReaderError(
                f"GE file {self.path!r}: size {size} is not {self.header_bytes} header bytes "
                f"plus whole {self.shape} uint16 frames; check the frame shape and header size")
        self.n_frames = body // frame_bytes

    def read_rows(self, index, r0, r1, out=None):
        """Rows ``r0:r1`` of frame ``index`` (uint16, (r1-r0, W))."""
        r1 = self._check(index, r0, r1)
        w = self.shape[1]
        out = check_out("out", out, (r1 - r0, w), np.uint16)
        offset = self.header_bytes + 2 * (index * self.shape[0] * w + r0 * w)
        with open(self.path, "rb") as f:
            f.seek(offset)
            got = f.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise ReaderError(f"{self}: short read of frame {index} ({got} of {out.nbytes} bytes)")
        if not np.little_endian:  # GE files are little-endian
            out.byteswap(inplace=True)
        return out


class TiffSeries(_Source):
    """One single-page TIFF per frame, ``pattern % (first + index)``.

    ``n_frames`` defaults to the number of consecutive existing files from
    ``first``.  ``read_rows`` decodes the whole (small) file, then slices.
    """

    def __init__(self, pattern: str, first: int = 0, n_frames: int | None = None):
        self.pattern = os.fspath(pattern)
        if not re.search(r"%0?\d*d", self.pattern):
            raise ReaderError(f"TIFF pattern {self.pattern!r} needs a %d field, e.g. stem_%06d.tif")
        self.first = int(first)
        if n_frames is None:
            folder = os.path.dirname(self.pattern) or "."
            try:
                names = set(os.listdir(folder))
            except OSError as exc:
                raise ReaderError(
                    f"TIFF folder {folder!r} cannot be listed: {exc.strerror}") from exc
            n = 0
            while os.path.basename(self.pattern % (self.first + n)) in names:
                n += 1
            n_frames = n
        if n_frames < 1:
            raise ReaderError(f"no TIFF frame {self.pattern % self.first!r}; "
                              "check the pattern and first index")
        self.n_frames = int(n_frames)
        self.shape = tuple(self._decode(0).shape)

    def path_of(self, index: int) -> str:
        return self.pattern % (self.first + index)

    def _decode(self, index, out=None):
        import tifffile

        path = self.path_of(index)
        try:
            arr = tifffile.imread(path, out=out)
        except FileNotFoundError as exc:
            raise ReaderError(f"TIFF frame {path!r} is missing") from exc
        except Exception as exc:
            raise ReaderError(f"TIFF frame {path!r} cannot be decoded: {exc}") from exc
        if arr.dtype != np.uint16 or arr.ndim != 2:
            raise ReaderError(
                f"TIFF frame {path!r} is {arr.dtype} {arr.shape}, expected 2-D uint16")
        return arr

    def read_rows(self, index, r0, r1, out=None):
        r1 = self._check(index, r0, r1)
        if r0 == 0 and r1 == self.shape[0]:
            out = check_out("out", out, self.shape, np.uint16)
            return self._decode(index, out)
        band = self._decode(index)[r0:r1]
        out = check_out("out", out, band.shape, np.uint16)
        out[...] = band
        return out


class HDF5Stack(_Source):
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


def open_frames(source: str, **options) -> _Source:
    """Pick the reader from the name: ``%d`` in it -> TIFF series; ``.h5/.hdf5/.nxs``
    -> HDF5; anything else -> GE raw.  ``options`` go to that reader."""
    source = os.fspath(source)
    if "%" in source:
        return TiffSeries(source, **options)
    if source.lower().endswith((".h5", ".hdf5", ".hdf", ".nxs", ".nx5")):
        return HDF5Stack(source, **options)
    return GEFile(source, **options)
