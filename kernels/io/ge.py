"""GE raw detector files (GE 41RT and similar amorphous-silicon panels at APS).

Layout: an 8192-byte header (``header_bytes``), then little-endian uint16
frames of ``shape`` (2048x2048); the frame count follows from the file size.
APS blanked the header with zeros after a firmware update, so the header is
not parsed: ``shape`` and ``header_bytes`` are parameters.

Hand-written on purpose: fabio's ``GEimage`` covers GE
(:class:`~kernels.io.fabio_frames.FabioFrames` opens it too), but it re-reads
the header and a whole frame per ``getframe``, while NF-HEDM reads bands of
rows: ``read_rows`` seeks to the band and reads only its bytes, straight into
the caller's array: a 64-row band 54x faster than through fabio, a whole frame
1.8x (``bench/readers_bench.py``; figures in ``bench/results/readers.md``).
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import ReaderError
from .base import FrameSource

__all__ = ["GEFile", "GE_HEADER_BYTES", "GE_SHAPE"]

GE_HEADER_BYTES = 8192
GE_SHAPE = (2048, 2048)


class GEFile(FrameSource):
    """A GE raw file; ``read_rows`` reads only the bytes of the requested rows.

    Parameters
    ----------
    path : str
    shape : (rows, cols), default (2048, 2048)
    header_bytes : int, default 8192
    dtype, overflow : output dtype and overflow rule (:mod:`kernels.io.convert`)
    """

    def __init__(self, path, shape=GE_SHAPE, header_bytes: int = GE_HEADER_BYTES,
                 dtype=None, overflow: str = "error"):
        self.path = os.fspath(path)
        self.shape = tuple(int(s) for s in shape)
        self.header_bytes = int(header_bytes)
        self.file_dtype = np.dtype(np.uint16)
        self._set_output(dtype, overflow)
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
                f"plus whole {self.shape} uint16 frames (and it is not HDF5, TIFF, EDF or CBF "
                "by its first bytes); check the frame shape and header size")
        self.n_frames = body // frame_bytes

    def _read_band(self, index, r0, r1, out):
        w = self.shape[1]
        offset = self.header_bytes + 2 * (index * self.shape[0] * w + r0 * w)
        with open(self.path, "rb") as f:
            f.seek(offset)
            got = f.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise ReaderError(f"{self}: short read of frame {index} ({got} of {out.nbytes} bytes)")
        if not np.little_endian:  # GE files are little-endian
            out.byteswap(inplace=True)
