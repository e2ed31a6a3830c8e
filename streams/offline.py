"""The offline path: the same partitions read from files, for the same analysis.

A stream delivers partitions of K frames; a staged dataset (an HDF5 file of
frames ``(F, rows, cols)`` or ``(ny, nx, rows, cols)``) or the partitions a
receiving job spilled give the same ``(frames, positions, complete)`` triples, so
an analysis written once runs on both. A :class:`PartitionRef` is plain data
(picklable: it travels to the workflow's workers, which open the file on their
node); :func:`read_partition` reads it; :func:`offline_report` is the accounting
of frames read from files (present = complete), so the offline output file has
the same layout as the streamed one (:func:`streams.job.output.write_scan`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from streams.accounting import ScanReport
from streams.errors import StreamError
from streams.protocol import ScanGeometry

__all__ = ["PartitionRef", "dataset_partitions", "spill_partitions", "read_partition",
           "dataset_geometry", "offline_report", "parse_source", "source_partitions",
           "read_frames"]


@dataclass(frozen=True)
class PartitionRef:
    """Frames ``start:stop`` of ``dataset`` in ``path`` (``kind='dataset'``), or one
    spilled partition file (``kind='spill'``: the whole file)."""

    path: str
    dataset: str = "/frames"
    start: int = 0
    stop: int = 0
    kind: str = "dataset"


def parse_source(text: str) -> Tuple[str, str]:
    """``FILE.h5:/dataset`` -> (file, dataset)."""
    path, sep, dset = text.rpartition(":")
    if not sep or not path or not dset.startswith("/"):
        raise StreamError(f"{text!r}: expected FILE.h5:/dataset")
    return path, dset


def dataset_geometry(path: str, dataset: str, scan: str = "offline",
                     scan_shape: Optional[Sequence[int]] = None) -> ScanGeometry:
    """The scan geometry of a frames dataset (3-D needs ``scan_shape``, else (1, F))."""
    import h5py

    with h5py.File(path, "r") as f:
        d = f[dataset]
        shape, dtype = d.shape, d.dtype
    if len(shape) == 4:
        ss: Tuple[int, int] = (int(shape[0]), int(shape[1]))
    elif len(shape) == 3:
        ss = (int(scan_shape[0]), int(scan_shape[1])) if scan_shape else (1, int(shape[0]))
    else:
        raise StreamError(f"{path}:{dataset} has shape {shape}: expected frames "
                          "(F, rows, cols) or (ny, nx, rows, cols)")
    return ScanGeometry(scan, 1, ss[0] * ss[1], 1, (int(shape[-2]), int(shape[-1])),
                        np.dtype(dtype).str, ss)


def dataset_partitions(path: str, dataset: str, frames: int, k: int) -> List[PartitionRef]:
    """Partitions of ``k`` consecutive frames over a dataset of ``frames`` frames."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [PartitionRef(path, dataset, s, min(s + k, frames)) for s in range(0, frames, k)]


def spill_partitions(paths: Sequence[str]) -> List[PartitionRef]:
    return [PartitionRef(p, kind="spill") for p in paths]


def read_partition(ref: PartitionRef) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(frames (k, rows, cols), positions (k,), complete (k,))`` of one partition."""
    import h5py

    if ref.kind == "spill":
        from streams.job.spill import read_partition_file

        data, index, complete, _ = read_partition_file(ref.path)
        return data, index, complete
    with h5py.File(ref.path, "r") as f:
        d = f[ref.dataset]
        if d.ndim == 4:
            # one read of the scan rows that hold the frames (not one read per frame)
            nx = d.shape[1]
            if ref.stop > ref.start:
                y0, y1 = ref.start // nx, (ref.stop - 1) // nx + 1
                rows = d[y0:y1].reshape(-1, *d.shape[2:])
                data = rows[ref.start - y0 * nx:ref.stop - y0 * nx]
            else:
                data = np.zeros((0, *d.shape[2:]), d.dtype)
        else:
            data = d[ref.start:ref.stop]
    k = ref.stop - ref.start
    return data, np.arange(ref.start, ref.stop, dtype=np.int64), np.ones(k, bool)


def read_frames(refs: Sequence[PartitionRef], indices: Sequence[int]) -> np.ndarray:
    """The frames at flat ``indices`` (k, rows, cols), in index order, from ``refs``
    (a dataset partition that holds none of them is not read)."""
    want = set(int(i) for i in indices)
    got = {}
    for ref in refs:
        if ref.kind == "dataset" and not any(ref.start <= i < ref.stop for i in want):
            continue
        data, positions, _ = read_partition(ref)
        for j, p in enumerate(positions.tolist()):
            if p in want:
                got[p] = data[j]
    missing = sorted(want - set(got))
    if missing:
        raise StreamError(f"frames {missing[:5]} asked for are not in the source")
    return np.stack([got[i] for i in sorted(got)])


def offline_report(geometry: ScanGeometry, complete: np.ndarray,
                   received: Optional[np.ndarray] = None) -> ScanReport:
    """Accounting of a scan read from files: ``complete`` frames (bool, frames) are
    complete; frames in ``received`` but not complete count as incomplete."""
    rep = ScanReport.empty(geometry)
    complete = np.asarray(complete, bool)
    rep.got[complete] = True
    if received is not None:
        rep.got[np.asarray(received, bool) & ~complete, 0] = True
    rep.ended_by = "end"
    return rep


def source_partitions(frames: Optional[str], spilled: Optional[str], scan: Optional[str],
                      scan_shape: Optional[Sequence[int]], k: int
                      ) -> Tuple[ScanGeometry, List[PartitionRef]]:
    """The geometry and partitions of an offline run's source: ``FILE.h5:/DATASET``
    (``frames``) or a receiving job's spill directory (``spilled`` with ``scan``)."""
    if frames:
        path, dset = parse_source(frames)
        g = dataset_geometry(path, dset, scan or os.path.splitext(os.path.basename(path))[0],
                             scan_shape)
        return g, dataset_partitions(path, dset, g.frames, k)
    if spilled:
        from streams.job.spill import read_partition_file, spilled_partitions

        if not scan:
            raise ValueError("--spilled needs --scan NAME")
        paths = spilled_partitions(spilled, scan)
        if not paths:
            raise ValueError(f"no spilled partitions of scan {scan} under {spilled}")
        data, _, _, attrs = read_partition_file(paths[0])
        g = ScanGeometry(scan, 1, int(attrs["frames"]), int(attrs["sectors"]),
                         (int(data.shape[1]), int(data.shape[2])), str(attrs["dtype"]),
                         (int(attrs["scan_shape"][0]), int(attrs["scan_shape"][1])))
        return g, spill_partitions(paths)
    raise ValueError("give --frames FILE.h5:/DATASET or --spilled DIR --scan NAME")
