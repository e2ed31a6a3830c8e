"""What a file is, from its first bytes: :func:`sniff`.

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

Its own module (not :mod:`kernels.io.detect`, which re-exports it) so that the
readers that sniff a file themselves (:mod:`kernels.io.rsciio_frames`) and the
reader chooser both depend on it without depending on each other.  Not named
``sniff.py``: a submodule of that name would shadow the lazily exported
function ``kernels.io.sniff``.
"""
from __future__ import annotations

import os

from ..errors import ReaderError

__all__ = ["sniff", "HDF5_SIGNATURE"]

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
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
