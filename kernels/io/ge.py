"""GE raw detector files."""
from __future__ import annotations

import os

import numpy as np

from ..errors import ReaderError, check_out
from .base import FrameSource

__all__ = ["GEFile", "GE_HEADER_BYTES", "GE_SHAPE"]

GE_HEADER_BYTES = 8192
GE_SHAPE = (2048, 2048)


class GEFile(FrameSource):
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


