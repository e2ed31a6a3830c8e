"""The offline path: the same partitions read from files, for the same analysis.

A stream delivers partitions of K frames; files give the same ``(frames,
positions, complete)`` triples, so an analysis written once runs on both. Three
kinds of source (``PartitionRef.kind``):

``dataset``
    an HDF5 dataset of frames ``(F, rows, cols)`` or ``(ny, nx, rows, cols)``;
``spill``
    one partition file a receiving job spilled;
``frames``
    detector frames as :func:`kernels.open_frames` reads them: one GE/HDF5/TIFF
    file holding every frame (frame number ``n`` at index ``n``), or a TIFF series
    (a ``%d`` field in the file name: frame ``n`` in file ``path % n``);
    position ``p`` is frame number ``first + p`` (``RawStartNr``), raw as the
    detector wrote it (an analysis orients frames itself, as on a stream).

A :class:`PartitionRef` is plain data (picklable: it travels to the workflow's
workers, which open the file on their node -- ``%n`` in a path is resolved there,
by the workflows layer -- and a ref placed on the node holding a scattered copy
says so, with the shared file to read instead); :func:`frame_files` lists the
files a ref reads, :func:`read_partition` reads it; :func:`offline_report` is the accounting
of frames read from files (present = complete), so the offline output file has
the same layout as the streamed one (:func:`streams.job.output.write_scan`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from streams.accounting import ScanReport
from streams.errors import StreamError
from streams.protocol import ScanGeometry

__all__ = ["PartitionRef", "dataset_partitions", "spill_partitions", "frame_partitions",
           "frame_files", "is_series", "read_partition", "dataset_geometry", "offline_report",
           "parse_source", "source_partitions", "read_frames"]


@dataclass(frozen=True)
class PartitionRef:
    """Positions ``start:stop`` of a source (module docstring): of ``dataset`` in ``path``
    (``kind='dataset'``), of frame files (``kind='frames'``; ``first``: the frame number
    of position 0, ``shape``: the frames' (rows, cols) -- a GE file says none --,
    ``dtype``: what the reader converts to, refusing values that do not fit), or one
    spilled partition file (``kind='spill'``: the whole file).

    ``node``: the node holding this ref's files (a scatter block's copies), where its
    task is placed; ``shared``: per file of :func:`frame_files`, the shared file to read
    where the copy is not there.
    """

    path: str
    dataset: str = "/frames"
    start: int = 0
    stop: int = 0
    kind: str = "dataset"
    first: int = 0
    shape: Tuple[int, ...] = ()
    dtype: Optional[str] = None
    node: Optional[str] = None
    shared: Tuple[str, ...] = ()


_SERIES = re.compile(r"%0?\d*d")


def is_series(path: str) -> bool:
    """True if ``path`` names a TIFF series (a ``%d`` field in its file name)."""
    return bool(_SERIES.search(os.path.basename(path)))


def frame_partitions(path: str, first: int, frames: int, k: int = 1,
                     shape: Sequence[int] = (), dtype: Optional[str] = None
                     ) -> List[PartitionRef]:
    """Partitions of ``k`` frames over frame numbers ``first .. first + frames - 1`` of
    frame files (``kind='frames'``)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [PartitionRef(path, "", s, min(s + k, frames), "frames", first, tuple(shape), dtype)
            for s in range(0, frames, k)]


def frame_files(ref: PartitionRef) -> List[str]:
    """The files ``ref`` reads: one per frame of a TIFF series, else its one file."""
    if ref.kind == "frames" and is_series(ref.path):
        folder, name = os.path.split(ref.path)   # %d in the name only: a %n may stay
        return [os.path.join(folder, name % (ref.first + p)) for p in range(ref.start, ref.stop)]
    return [ref.path]


def _read_frame_files(ref: PartitionRef, files: Sequence[str]) -> np.ndarray:
    from kernels import open_frames
    from kernels.io import sniff

    opts: Dict[str, Any] = {"dtype": ref.dtype} if ref.dtype else {}
    if is_series(ref.path):
        return np.stack([open_frames(f, **opts).read(0) for f in files])
    if ref.shape and sniff(files[0]) == "unknown":    # GE raw: no signature, no shape
        opts["shape"] = tuple(ref.shape)
    reader = open_frames(files[0], **opts)
    return np.stack([reader.read(ref.first + p) for p in range(ref.start, ref.stop)])


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


def read_partition(ref: PartitionRef, files: Optional[Sequence[str]] = None
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(frames (k, rows, cols), positions (k,), complete (k,))`` of one partition.

    ``files``: where to read each of :func:`frame_files` (this node's copies); default
    those paths as they are.
    """
    import h5py

    files = list(files) if files is not None else frame_files(ref)
    if ref.kind == "spill":
        from streams.job.spill import read_partition_file

        data, index, complete, _ = read_partition_file(files[0])
        return data, index, complete
    k = ref.stop - ref.start
    if ref.kind == "frames":
        data = _read_frame_files(ref, files)
        return data, np.arange(ref.start, ref.stop, dtype=np.int64), np.ones(k, bool)
    with h5py.File(files[0], "r") as f:
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
    return data, np.arange(ref.start, ref.stop, dtype=np.int64), np.ones(k, bool)


def read_frames(refs: Sequence[PartitionRef], indices: Sequence[int]) -> np.ndarray:
    """The frames at flat ``indices`` (k, rows, cols), in index order, from ``refs``
    (a partition of a dataset or of frame files that holds none of them is not read)."""
    want = set(int(i) for i in indices)
    got = {}
    for ref in refs:
        if ref.kind != "spill" and not any(ref.start <= i < ref.stop for i in want):
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
