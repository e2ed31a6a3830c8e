"""The ``dataset`` source: an HDF5 dataset of frames, ``(F, rows, cols)`` or
``(ny, nx, rows, cols)``."""
from __future__ import annotations

import functools
import os
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from analyses.errors import AnalysisError
from analyses.geometry import ScanGeometry
from analyses.sources import Frames, PartitionRef, Source, parse_source, partitions

__all__ = ["Dataset", "dataset_geometry", "frames_of"]


class Dataset(Source):
    """Positions ``start:stop`` of ``ref.dataset`` in ``ref.path``."""

    def read(self, ref: PartitionRef, files: Sequence[str]) -> Frames:
        return frames_of(files[0], ref.dataset, ref.start, ref.stop)

    def open(self, text: str, scan: Optional[str], scan_shape: Optional[Sequence[int]],
             k: int) -> Tuple[ScanGeometry, List[PartitionRef]]:
        """``FILE.h5:/DATASET`` (the scan named after the file unless ``scan``)."""
        path, dset = parse_source(text)
        g = dataset_geometry(path, dset, scan or os.path.splitext(os.path.basename(path))[0],
                             scan_shape)
        return g, partitions(path, g.frames, k, dataset=dset)


def frames_of(path: str, dataset: str, start: int, stop: int, row: int = 0) -> Frames:
    """Positions ``start:stop`` of a frames dataset whose first row is position ``row``."""
    st = os.stat(path)
    _, d, shape = _dataset(path, dataset, (os.getpid(), st.st_ino, st.st_mtime_ns, st.st_size))
    if len(shape) == 4:
        # one read of the scan rows that hold the frames (not one read per frame)
        nx = shape[1]
        y0, y1 = (start - row) // nx, (stop - row - 1) // nx + 1
        data = d[y0:y1].reshape(-1, *shape[2:])[start - row - y0 * nx:stop - row - y0 * nx]
    else:
        data = d[start - row:stop - row]
    positions = np.arange(start, stop, dtype=np.int64)
    return data, positions, np.ones(len(positions), bool)


@functools.lru_cache(maxsize=4)
def _dataset(path: str, name: str, _identity: Any) -> Tuple[Any, Any, Tuple[int, ...]]:
    """One open frames dataset per file and process: the file, the dataset and its shape
    (opening them for every partition costs more than a small partition's read,
    ``bench/results/offline_read.md``). ``_identity`` (this process, the file's inode,
    time and size) keeps a forked worker off its parent's handle and opens a replaced file
    anew; a file stays open in the worker until four others were opened after it, or the
    worker ends (HDF5 then refuses to truncate it, ``"w"``, in that process: write a new
    copy and rename it, as the stager does)."""
    import h5py

    f = h5py.File(path, "r")
    d = f[name]
    return f, d, tuple(d.shape)


def dataset_geometry(path: str, dataset: str, scan: str = "offline",
                     scan_shape: Optional[Sequence[int]] = None) -> ScanGeometry:
    """The scan geometry of a frames dataset (3-D needs ``scan_shape``, else (1, F))."""
    import h5py

    if not os.path.isfile(path):
        raise AnalysisError(f"--frames {path}:{dataset}: no such file {path}: give an existing "
                          "HDF5 file (FILE.h5:/DATASET)")
    try:
        with h5py.File(path, "r") as f:
            if not isinstance(f.get(dataset), h5py.Dataset):
                names: list = []
                f.visititems(lambda n, o: names.append("/" + n)
                             if isinstance(o, h5py.Dataset) and len(o.shape) in (3, 4)
                             else None)
                raise AnalysisError(f"--frames {path}:{dataset}: no such dataset in {path}; "
                                  "frames datasets there: " + (", ".join(names[:8]) or "none"))
            d = f[dataset]
            shape, dtype = d.shape, d.dtype
    except OSError as e:
        raise AnalysisError(f"--frames {path}: cannot read it as HDF5 ({e}): give an HDF5 "
                          "file of frames (FILE.h5:/DATASET)") from e
    if len(shape) == 4:
        ss: Tuple[int, int] = (int(shape[0]), int(shape[1]))
    elif len(shape) == 3:
        ss = (int(scan_shape[0]), int(scan_shape[1])) if scan_shape else (1, int(shape[0]))
    else:
        raise AnalysisError(f"{path}:{dataset} has shape {shape}: expected frames "
                          "(F, rows, cols) or (ny, nx, rows, cols)")
    return ScanGeometry(scan, 1, ss[0] * ss[1], 1, (int(shape[-2]), int(shape[-1])),
                        np.dtype(dtype).str, ss)
