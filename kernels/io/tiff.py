"""TIFF frames (tifffile): a series of one file per frame, or the pages of one file.

tifffile reads classic TIFF (``II*\\0``/``MM\\0*``) and BigTIFF, either byte
order; frames come back in the file's dtype (any of
:data:`kernels.io.convert.SUPPORTED`), byte order made native.
"""
from __future__ import annotations

import os
import re

import numpy as np

from ..errors import ReaderError
from .base import FrameSource

__all__ = ["TiffSeries", "TiffStack"]


def _imread(path, key=None):
    import tifffile

    try:
        arr = tifffile.imread(path, key=key)
    except FileNotFoundError as exc:
        raise ReaderError(f"TIFF frame {path!r} is missing") from exc
    except Exception as exc:
        raise ReaderError(f"TIFF {path!r} cannot be decoded: {exc}") from exc
    if arr.ndim != 2:
        raise ReaderError(f"TIFF {path!r} page is {arr.dtype} {arr.shape}, expected a 2-D "
                          "frame (RGB and multi-sample pages are not detector frames)")
    return arr


class TiffSeries(FrameSource):
    """One single-page TIFF per frame, ``pattern % (first + index)``.

    ``n_frames`` defaults to the number of consecutive existing files from
    ``first``.  ``read_rows`` decodes the whole (small) file, then slices.
    """

    def __init__(self, pattern: str, first: int = 0, n_frames: int | None = None,
                 dtype=None, overflow: str = "error"):
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
        first_frame = _imread(self.path_of(0))
        self.shape = tuple(first_frame.shape)
        self.file_dtype = first_frame.dtype
        self._set_output(dtype, overflow)

    def path_of(self, index: int) -> str:
        return self.pattern % (self.first + index)

    def _read_band(self, index, r0, r1, out):
        arr = _imread(self.path_of(index))
        if arr.shape != self.shape or arr.dtype.newbyteorder("=") != self.file_dtype:
            raise ReaderError(f"TIFF frame {self.path_of(index)!r} is {arr.dtype} {arr.shape}, "
                              f"the series' first is {self.file_dtype} {self.shape}")
        out[...] = arr[r0:r1]


class TiffStack(FrameSource):
    """The pages of one TIFF or BigTIFF file as frames (one page: one frame)."""

    def __init__(self, path, dtype=None, overflow: str = "error"):
        import tifffile

        self.path = os.fspath(path)
        try:
            with tifffile.TiffFile(self.path) as tif:
                pages = len(tif.pages)
                page = tif.pages[0]
                shape, file_dtype = page.shape, page.dtype
        except FileNotFoundError as exc:
            raise ReaderError(f"TIFF {self.path!r} is missing") from exc
        except Exception as exc:
            raise ReaderError(f"TIFF {self.path!r} cannot be read: {exc}") from exc
        if len(shape) != 2:
            raise ReaderError(f"TIFF {self.path!r} pages are {shape}, expected 2-D frames")
        self.n_frames = pages
        self.shape = tuple(int(s) for s in shape)
        self.file_dtype = np.dtype(file_dtype)
        self._set_output(dtype, overflow)

    def _read_band(self, index, r0, r1, out):
        arr = _imread(self.path, key=index)
        if arr.shape != self.shape:
            raise ReaderError(f"{self}: page {index} is {arr.shape}, page 0 is {self.shape}")
        out[...] = arr[r0:r1]
