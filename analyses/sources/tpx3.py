"""The ``tpx3`` source: a recorded ASI CheeTah TPX3 stream (``streams.simulate --dump``, what
LiberTEM-live's ``TpxCameraSim`` replays), read by :func:`kernels.io.tpx3.read_stream_file`
into partitions of CSR frames (:class:`analyses.sparse.CSRFrames`), as the live receiver
delivers them: scan and frame shape from the acquisition start."""
from __future__ import annotations

import functools
import os
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from analyses.errors import AnalysisError
from analyses.geometry import ScanGeometry
from analyses.sources import Frames, PartitionRef, Source, partitions

__all__ = ["Tpx3File"]


@functools.lru_cache(maxsize=2)
def _read(path: str, _mtime: int) -> Any:
    """The file's acquisition, read once per worker (not once per partition)."""
    from kernels.errors import ReaderError
    from kernels.io.tpx3 import read_stream_file

    try:
        return read_stream_file(path)
    except ReaderError as e:
        raise AnalysisError(str(e)) from None


class Tpx3File(Source):
    """Positions ``start:stop`` of a recorded TPX3 stream, as CSR."""

    def read(self, ref: PartitionRef, files: Sequence[str]) -> Frames:
        from analyses.sparse import CSRFrames

        acq, indptr, indices, values = _read(files[0], os.stat(files[0]).st_mtime_ns)
        a, b = int(indptr[ref.start]), int(indptr[ref.stop])
        k = ref.stop - ref.start
        data: Any = CSRFrames(   # where dense frames stand (analyses.sparse)
            indptr[ref.start:ref.stop + 1] - a, indices[a:b], values[a:b],
            (k, *acq.sig_shape))
        return data, np.arange(ref.start, ref.stop, dtype=np.int64), np.ones(k, bool)

    def open(self, text: str, scan: Optional[str], scan_shape: Optional[Sequence[int]],
             k: int) -> Tuple[ScanGeometry, List[PartitionRef]]:
        """The file ``text``'s first acquisition (``scan``: the output's name, default the
        file's stem); ``scan_shape``, when given, must be its nav shape."""
        path = os.path.abspath(text)
        acq = _read(path, os.stat(path).st_mtime_ns)[0]
        if scan_shape is not None and tuple(scan_shape) != acq.nav_shape:
            raise AnalysisError(f"{text}: --scan-shape {scan_shape[0]} {scan_shape[1]}, but "
                                f"the stream's acquisition start says {acq.nav_shape[0]} "
                                f"{acq.nav_shape[1]}; give that or none")
        name = scan or os.path.splitext(os.path.basename(path))[0]
        frames = acq.nav_shape[0] * acq.nav_shape[1]
        g = ScanGeometry(name, 1, frames, 1, acq.sig_shape, "<u4", acq.nav_shape)
        return g, partitions(path, frames, k, kind="tpx3")
