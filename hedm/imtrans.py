"""Raw-frame orientation: ``ImTransOpt``, the transforms that bring a detector's raw
frames into the (y, z) frame of the NF forward model (``frame[z, y]``).

MIDAS's FF key and codes (0 none, 1 flip y, 2 flip z, 3 transpose, in order),
applied to each raw frame as read; MIDAS's NF chain always flips y and z, so its
frames need ``ImTransOpt 1`` and ``2`` (``docs/nf-files.md``, "Frame orientation").
``NrPixelsY``/``NrPixelsZ`` describe the frame after the transforms.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

__all__ = ["CODES", "check_codes", "raw_shape", "apply", "OrientedFrames", "describe"]

#: ``ImTransOpt`` codes (MIDAS's FF codes): what each does to a raw frame ``a[row, col]``.
CODES = {0: "none", 1: "flip y (columns)", 2: "flip z (rows)", 3: "transpose"}


def check_codes(codes: Sequence[int]) -> Tuple[int, ...]:
    """``codes`` as a tuple, each one of :data:`CODES`; ValueError naming a bad one."""
    out = tuple(int(c) for c in codes)
    bad = [c for c in out if c not in CODES]
    if bad:
        raise ValueError(f"ImTransOpt {bad[0]} is not one of "
                         + ", ".join(f"{k} ({v})" for k, v in CODES.items()))
    return out


def _transposed(codes: Sequence[int]) -> bool:
    return sum(1 for c in codes if c == 3) % 2 == 1


def raw_shape(shape: Tuple[int, int], codes: Sequence[int]) -> Tuple[int, int]:
    """The raw frame's ``(rows, cols)`` for a transformed frame of ``shape`` (Z, Y)."""
    z, y = int(shape[0]), int(shape[1])
    return (y, z) if _transposed(codes) else (z, y)


def apply(raw: np.ndarray, codes: Sequence[int]) -> np.ndarray:
    """The transformed frame: each code applied in order to ``raw`` (a new C-contiguous array
    unless no code changes anything)."""
    a = raw
    for c in codes:
        if c == 1:
            a = a[:, ::-1]
        elif c == 2:
            a = a[::-1, :]
        elif c == 3:
            a = a.T
    return a if a is raw else np.ascontiguousarray(a)


def describe(codes: Sequence[int]) -> str:
    """``ImTransOpt 1, 2 (flip y (columns), flip z (rows))`` or ``no ImTransOpt (raw frames as
    they are)``."""
    codes = tuple(codes)
    if not any(codes):
        return "no ImTransOpt (raw frames as they are)"
    return (f"ImTransOpt {', '.join(map(str, codes))} ("
            + ", ".join(CODES[c] for c in codes) + ")")


class OrientedFrames:
    """A :class:`kernels.io.FrameSource` seen through ``ImTransOpt`` codes: without a
    transpose a band of rows is a band of raw rows; with one, whole raw frames are read."""

    def __init__(self, reader, codes: Sequence[int]):
        self.reader = reader
        self.codes = check_codes(codes)
        self.shape = raw_shape(tuple(reader.shape), self.codes)  # raw (r, c) -> (Z, Y)
        self.n_frames = reader.n_frames
        self.dtype = reader.dtype

    def read(self, index: int) -> np.ndarray:
        return apply(self.reader.read(index), self.codes)

    def read_rows(self, index: int, r0: int, r1: int, out: np.ndarray | None = None):
        if _transposed(self.codes):
            band = self.read(index)[r0:r1]
        else:
            flip_z = sum(1 for c in self.codes if c == 2) % 2 == 1
            flip_y = sum(1 for c in self.codes if c == 1) % 2 == 1
            n = self.shape[0]
            a, b = (n - r1, n - r0) if flip_z else (r0, r1)
            band = self.reader.read_rows(index, a, b)
            if flip_z:
                band = band[::-1]
            if flip_y:
                band = band[:, ::-1]
        if out is None:
            return np.ascontiguousarray(band)
        out[...] = band
        return out
