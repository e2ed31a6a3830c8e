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

__all__ = ["sniff", "hdf5_flavour", "HDF5_SIGNATURE"]

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


def _json_format(dset) -> str | None:
    """The ``format`` of a Velox ``/Version`` dataset (JSON text in its first element)."""
    import json

    try:
        raw = dset[0] if dset.shape else dset[()]
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        value = json.loads(text.rstrip("\x00"))
    except (ValueError, TypeError, IndexError, OSError, AttributeError):
        return None
    return value.get("format") if isinstance(value, dict) else None


def hdf5_flavour(path: str) -> str:
    """Which program's layout an HDF5 file has: ``emd`` (Thermo Fisher Velox EMD, or
    Berkeley/NCEM EMD), ``hspy`` (HyperSpy), else ``hdf5`` (NeXus or plain HDF5, read by
    :class:`~kernels.io.hdf5.HDF5Stack`).

    From what the file says about itself, as RosettaSciIO decides: Velox writes a
    ``/Version`` dataset whose JSON ``format`` is ``Velox`` (or ``DevelopersKit``)
    and keeps its images in ``/Data/Image/<uuid>/Data``; Berkeley EMD marks the
    root or a top-level group with ``version_major``/``version_minor`` attributes;
    HyperSpy writes ``@file_format = "HyperSpy"``.  A file with any NeXus
    ``NX_class`` at its root or top level, a root ``@default``, or an ``/entry``
    stays ``hdf5``, as does one that cannot be opened (the HDF5 reader says why).
    """
    import h5py

    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError):
        return "hdf5"
    with f:
        def nx(obj) -> bool:
            return "NX_class" in obj.attrs

        tops = [f[k] for k in f.keys() if f.get(k, getlink=True).__class__ is h5py.HardLink]
        if nx(f) or "default" in f.attrs or "entry" in f or any(nx(g) for g in tops):
            return "hdf5"
        version = f.get("Version")
        if isinstance(version, h5py.Dataset) and _json_format(version) in ("Velox",
                                                                           "DevelopersKit"):
            return "emd"
        if any("version_major" in g.attrs for g in [f] + [g for g in tops
                                                          if isinstance(g, h5py.Group)]):
            return "emd"
        fmt = f.attrs.get("file_format")
        if (fmt.decode() if isinstance(fmt, bytes) else fmt) == "HyperSpy":
            return "hspy"
    return "hdf5"
