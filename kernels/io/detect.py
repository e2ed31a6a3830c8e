"""Choose the reader for a source by its content, not its name.

The first bytes say what a file is; extensions do not (Velox writes HDF5 as
``.emd``, NeXus uses ``.nxs``, ``.h5``, ``.hdf5``, ``.cxi``...):

=============  ============================================================
HDF5           ``\\x89HDF\\r\\n\\x1a\\n`` at offset 0, 512, 1024, 2048, ...
TIFF/BigTIFF   ``II*\\0``, ``MM\\0*``, ``II+\\0``, ``MM\\0+``
CBF            ``###CBF`` / ``###_CBF`` (fabio)
EDF            ``{`` then an ESRF header (``EDF_``/``HeaderID``/``ByteOrder``) (fabio)
MIB            ``MQ1,`` (Quantum Detectors Merlin; RosettaSciIO)
DM3 / DM4      big-endian version 3 or 4 in the first 4 bytes (RosettaSciIO)
SER            ``II`` then series id 0x0197 (FEI/TIA; RosettaSciIO)
=============  ============================================================

A ``%d`` field in the name is a TIFF series (one file per frame).  Anything
else is read as GE raw (no signature: its size must fit the frame shape).
"""
from __future__ import annotations

import os
from typing import Callable

from ..errors import ReaderError
from .base import FrameSource

__all__ = ["open_frames", "sniff", "FORMATS"]

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
FORMATS = ("hdf5", "tiff", "tiff-series", "ge", "fabio", "rsciio")
_TIFF = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")


def _hdf5_at(f, size: int) -> bool:
    offset = 0
    while offset + 8 <= size:
        f.seek(offset)
        if f.read(8) == HDF5_SIGNATURE:
            return True
        offset = 512 if offset == 0 else offset * 2
    return False


def sniff(path: str) -> str:
    """The format of ``path`` from its bytes: hdf5, tiff, cbf, edf, mib, dm, ser or unknown.

    Raises
    ------
    ReaderError
        If the file cannot be opened.
    """
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(512)
            if _hdf5_at(f, size):
                return "hdf5"
    except OSError as exc:
        raise ReaderError(f"{path!r} cannot be opened: {exc.strerror}; check the path") from exc
    if head[:4] in _TIFF:
        return "tiff"
    if head.startswith((b"###CBF", b"###_CBF")):
        return "cbf"
    if head[:1] == b"{" and any(k in head for k in (b"EDF_", b"HeaderID", b"ByteOrder")):
        return "edf"
    if head.startswith(b"MQ1,"):
        return "mib"
    if len(head) >= 4 and int.from_bytes(head[:4], "big") in (3, 4) and path[-4:].lower() in (
            ".dm3", ".dm4"):
        return "dm"
    if head[:2] == b"II" and int.from_bytes(head[2:4], "little") == 0x0197:
        return "ser"
    return "unknown"


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
