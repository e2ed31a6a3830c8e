"""Choose the reader for a source."""
from __future__ import annotations

import os

from .base import FrameSource
from .ge import GEFile
from .hdf5 import HDF5Stack
from .tiff import TiffSeries

__all__ = ["open_frames"]


def open_frames(source: str, **options) -> FrameSource:
    """Pick the reader from the name: ``%d`` in it -> TIFF series; ``.h5/.hdf5/.nxs``
    -> HDF5; anything else -> GE raw.  ``options`` go to that reader."""
    source = os.fspath(source)
    if "%" in source:
        return TiffSeries(source, **options)
    if source.lower().endswith((".h5", ".hdf5", ".hdf", ".nxs", ".nx5")):
        return HDF5Stack(source, **options)
    return GEFile(source, **options)
