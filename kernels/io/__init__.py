"""Detector-file readers and writers: one frame (or a band of its rows) per call.

Readers (all :class:`~kernels.io.base.FrameSource`, picklable, no MPI):

* :class:`TiffSeries` -- one TIFF per frame (tifffile);
* :class:`GEFile` -- GE raw (hand-written: row bands without reading the frame);
* :class:`HDF5Stack` -- HDF5/NeXus stacks (h5py);
* :func:`open_frames` -- picks one for a source.

Writers (:mod:`kernels.io.writers`) write the same layouts atomically.

Like :mod:`kernels`, this package loads its modules on first use, and none of
them imports numba, h5py or tifffile at import time.
"""
from __future__ import annotations

import lazy_loader

_EXPORTS = {
    "FrameSource": "base",
    "GEFile": "ge", "GE_HEADER_BYTES": "ge", "GE_SHAPE": "ge",
    "TiffSeries": "tiff",
    "HDF5Stack": "hdf5", "TiffStack": "tiff",
    "FabioFrames": "fabio_frames", "RsciioFrames": "rsciio_frames",
    "sniff": "signatures", "SUPPORTED": "convert",
    "open_frames": "detect",
    "write_tiff_series": "writers", "write_ge": "writers", "write_hdf5": "writers",
}

__all__ = list(_EXPORTS)


# loaded on first use (lazy_loader, scientific-python's PEP 562 helper)
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    m: [n for n, k in _EXPORTS.items() if k == m] for m in set(_EXPORTS.values())})
