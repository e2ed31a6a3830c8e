"""Choose the reader for a source by its content, not its name.

The first bytes say what a file is (:func:`~kernels.io.signatures.sniff`, which
lists the signatures; re-exported here as ``kernels.io.detect.sniff``); extensions
do not.  Each kind maps to a reader: hdf5 and tiff to ours, cbf and edf to fabio,
mib, dm and ser to RosettaSciIO.  An HDF5 file is ours (NeXus, Eiger, plain HDF5)
unless it says it is another program's layout that RosettaSciIO reads
(:func:`~kernels.io.signatures.hdf5_flavour`: Thermo Fisher Velox EMD, Berkeley
EMD, HyperSpy); then, when no ``dataset=``/``frame_axis=`` asks for one of its
datasets, RosettaSciIO reads it, frames oriented as it returns them.

A ``%d`` field in the name is a TIFF series (one file per frame).  Anything
else is read as GE raw (no signature: its size must fit the frame shape).
"""
from __future__ import annotations

import os
from typing import Callable

from ..errors import ReaderError
from .base import FrameSource
from .signatures import sniff

__all__ = ["open_frames", "sniff", "FORMATS"]

FORMATS = ("hdf5", "tiff", "tiff-series", "ge", "fabio", "rsciio")


def open_frames(source: str, format: str | None = None, **options) -> FrameSource:
    """Open ``source`` with the reader its content calls for.

    Parameters
    ----------
    source : str
        A file, or a printf pattern (``stem_%06d.tif``) for a TIFF series.
    format : str, optional
        Force a reader: one of :data:`FORMATS`.
    **options
        For the reader: ``dtype``/``overflow`` (all), ``dataset``/``frame_axis``
        (HDF5), ``shape``/``header_bytes`` (GE), ``first``/``n_frames`` (series).

    Raises
    ------
    ReaderError
        Unknown format, a missing optional package (names the extra), or the
        reader's own errors.
    """
    from .ge import GEFile
    from .hdf5 import HDF5Stack
    from .tiff import TiffSeries, TiffStack

    source = os.fspath(source)
    if format is None:
        if "%" in os.path.basename(source):
            format = "tiff-series"
        else:
            kind = sniff(source)
            format = {"hdf5": "hdf5", "tiff": "tiff", "cbf": "fabio", "edf": "fabio",
                      "mib": "rsciio", "dm": "rsciio", "ser": "rsciio"}.get(kind, "ge")
            if kind == "hdf5" and not {"dataset", "frame_axis"} & set(options):
                from .signatures import hdf5_flavour

                flavour = hdf5_flavour(source)
                if flavour != "hdf5":
                    format = "rsciio"
                    options.setdefault("kind", flavour)
    reader: Callable[..., FrameSource]
    if format == "fabio":
        from .fabio_frames import FabioFrames

        reader = FabioFrames
    elif format == "rsciio":
        from .rsciio_frames import RsciioFrames

        reader = RsciioFrames
    elif format in ("hdf5", "tiff", "tiff-series", "ge"):
        reader = {"hdf5": HDF5Stack, "tiff": TiffStack, "tiff-series": TiffSeries,
                  "ge": GEFile}[format]
    else:
        raise ReaderError(f"format {format!r} is not one of {FORMATS}")
    try:
        return reader(source, **options)
    except TypeError as exc:
        if "unexpected keyword" not in str(exc):
            raise
        raise ReaderError(f"{source!r} is read as {format} ({reader.__name__}), which takes "
                          f"no such option: {exc}") from exc
