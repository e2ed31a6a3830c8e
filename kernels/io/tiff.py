"""TIFF series: one TIFF file per frame."""
from __future__ import annotations

import os
import re

import numpy as np

from ..errors import ReaderError, check_out
from .base import FrameSource

__all__ = ["TiffSeries"]


class TiffSeries(FrameSource):
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


