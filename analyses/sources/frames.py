"""The ``frames`` source: raw detector frames, one file holding every frame or a TIFF series.

Read with :func:`kernels.open_frames` (GE, HDF5, TIFF...): one file holds frame ``n``
at index ``n``; a TIFF series (``%d`` in the file name) holds frame ``n`` in
``path % n``. Position ``p`` of a ref is frame ``first + p``.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from analyses.sources import Frames, PartitionRef, Source

__all__ = ["FrameFiles", "is_series", "open_frame_file"]

_SERIES = re.compile(r"%0?\d*d")


def is_series(path: str) -> bool:
    """True if ``path`` names a TIFF series (a ``%d`` field in its file name)."""
    return bool(_SERIES.search(os.path.basename(path)))

def open_frame_file(path: str, shape: Sequence[int] = (), dtype: Optional[str] = None,
                    **options: Any) -> Any:
    """:func:`kernels.open_frames` of a detector file (or TIFF series): frames converted
    to ``dtype`` (values that do not fit are an error, never wrapped), ``shape`` (rows,
    cols) given to a GE raw file, which has no signature to say it."""
    from kernels import open_frames
    from kernels.io import sniff

    opts: Dict[str, Any] = {"dtype": dtype} if dtype else {}
    if shape and not is_series(path) and sniff(path) == "unknown":
        opts["shape"] = tuple(shape)
    return open_frames(path, **opts, **options)


@functools.lru_cache(maxsize=8)
def _series(pattern: str, first: int, dtype: Optional[str], _folder: Any = None) -> Any:
    """One reader per TIFF series and process (``_folder``: the folder's state, so files
    added or removed are counted again): opening a frame's file as a reader of its own
    reads it twice, once for its shape (``bench/results/offline_read.md``)."""
    return open_frame_file(pattern, (), dtype, first=first)


class FrameFiles(Source):
    """Frames of a detector file or a TIFF series (module docstring)."""

    def files(self, ref: PartitionRef) -> List[str]:
        """One file per frame of a TIFF series, else the one file."""
        if is_series(ref.path):
            folder, name = os.path.split(ref.path)   # %d in the name only: a %n may stay
            return [os.path.join(folder, name % (ref.first + p))
                    for p in range(ref.start, ref.stop)]
        return [ref.path]

    def read(self, ref: PartitionRef, files: Sequence[str]) -> Frames:
        positions = np.arange(ref.start, ref.stop, dtype=np.int64)
        return _read(self, ref, files), positions, np.ones(len(positions), bool)


def _read(source: FrameFiles, ref: PartitionRef, files: Sequence[str]) -> np.ndarray:
    if is_series(ref.path):
        folder = os.path.dirname(files[0])
        if not ref.shared and list(files) == [os.path.join(folder, os.path.basename(f))
                                              for f in source.files(ref)]:
            # the series' own files in one folder, all on this node (not scattered): its
            # reader (which counts the files from ``first`` there; a frame past them is
            # read on its own)
            from kernels.errors import ReaderError

            try:
                series = _series(os.path.join(folder, os.path.basename(ref.path)), ref.first,
                                 ref.dtype, os.stat(folder).st_mtime_ns)
            except ReaderError:     # no frame ``first`` here: each file on its own, below
                series = None
            if series is not None and ref.stop <= series.n_frames:
                return np.stack([series.read(p) for p in range(ref.start, ref.stop)])
        return np.stack([open_frame_file(f, (), ref.dtype).read(0) for f in files])
    reader = open_frame_file(files[0], ref.shape, ref.dtype)
    return np.stack([reader.read(ref.first + p) for p in range(ref.start, ref.stop)])
