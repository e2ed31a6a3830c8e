"""The frame-source base class every detector reader derives from.

A reader exposes ``n_frames`` frames of ``shape`` (rows, cols) and returns
them one at a time (``read``) or as a band of rows (``read_rows``), as
``dtype``: the file's dtype by default, or the one asked with ``dtype=`` under
the rule of :mod:`kernels.io.convert` (no silent overflow).  Subclasses
implement ``_read_band(index, r0, r1, out)`` filling ``out`` (file dtype,
native byte order) and set ``file_dtype``; ``_where(index)`` names the frame in
messages.
"""
from __future__ import annotations

import numpy as np

from ..errors import ReaderError, check_out
from .convert import OVERFLOW, check_dtype, convert_into

__all__ = ["FrameSource"]


class FrameSource:
    """Base class of the readers: frames of one shape and dtype, read one at a time."""

    n_frames: int
    shape: tuple
    file_dtype: np.dtype
    dtype: np.dtype
    overflow: str = "error"

    def _set_output(self, dtype=None, overflow: str = "error") -> None:
        """Resolve the output dtype (after ``file_dtype`` is known)."""
        self.file_dtype = check_dtype(self.file_dtype, f"{self}")
        self.dtype = self.file_dtype if dtype is None else check_dtype(dtype, f"{self}: dtype")
        if overflow not in OVERFLOW:
            raise ReaderError(f"{self}: overflow must be one of {OVERFLOW}, got {overflow!r}")
        self.overflow = overflow

    def _check(self, index: int, r0: int = 0, r1: int | None = None) -> int:
        if not 0 <= index < self.n_frames:
            raise ReaderError(f"{self}: frame {index} outside 0..{self.n_frames - 1}")
        r1 = self.shape[0] if r1 is None else r1
        if not 0 <= r0 < r1 <= self.shape[0]:
            raise ReaderError(f"{self}: row band {r0}:{r1} outside 0:{self.shape[0]}")
        return r1

    def __len__(self) -> int:
        return self.n_frames

    def read(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frame ``index`` as a (H, W) array of ``dtype`` (into ``out`` if given)."""
        return self.read_rows(index, 0, self.shape[0], out)

    def read_rows(self, index: int, r0: int, r1: int, out: np.ndarray | None = None):
        """Rows ``r0:r1`` of frame ``index`` as a (r1-r0, W) array of ``dtype``.

        Raises
        ------
        ReaderError
            Index or band out of range, the frame cannot be read or decoded, or a
            value does not fit ``dtype`` (see :mod:`kernels.io.convert`).
        """
        r1 = self._check(index, r0, r1)
        out = check_out("out", out, (r1 - r0, self.shape[1]), self.dtype)
        if self.dtype == self.file_dtype:
            self._read_band(index, r0, r1, out)
            return out
        band = np.empty((r1 - r0, self.shape[1]), self.file_dtype)
        self._read_band(index, r0, r1, band)
        return convert_into(band, out, self.overflow, self._where(index))

    def _read_band(self, index: int, r0: int, r1: int, out: np.ndarray) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _where(self, index: int) -> str:
        return f"{self} frame {index}"

    def close(self) -> None:
        """Release open handles (readers re-open on the next read)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self, 'path', getattr(self, 'pattern', ''))!r})"
