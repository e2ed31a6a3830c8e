"""Files as partitions: the same ``(frames, positions, complete)`` an analysis gets live.

A :class:`PartitionRef` is plain data (workers resolve ``%n`` and read on their
node); its ``kind`` names a row of :data:`SOURCES`, whose :class:`Source` lists
(:func:`frame_files`) and reads (:func:`read_partition`) it: ``dataset`` (an HDF5
dataset of frames), ``frames`` (detector frame files, :func:`kernels.open_frames`),
``spill`` (a partition a receiving job spilled), ``staged`` (a node's frame range
of a scattered dataset), ``tpx3`` (a recorded TPX3 stream, as CSR). A new source is
one module plus one row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from analyses.errors import AnalysisError
from analyses.geometry import ScanGeometry
from core.table import Table

__all__ = ["PartitionRef", "Source", "SOURCES", "partitions", "frame_files", "read_partition",
           "read_frames", "parse_source", "source_partitions"]

#: ``(frames (k, rows, cols), positions (k,), complete (k,))``: a partition as read.
Frames = Tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class PartitionRef:
    """Positions ``start:stop`` of a source of ``kind`` (a row of :data:`SOURCES`).
    ``frames``: ``first`` (frame of position 0), ``shape`` and ``dtype``
    (:func:`open_frame_file`); ``staged``: ``first`` is the position of the copy's
    first row. ``node``: where a scatter block put its files (its task goes there);
    ``shared``: per file of :func:`frame_files`, the shared file to read where the
    copy is not."""

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


class Source:
    """One kind of file partitions are read from: a row of :data:`SOURCES`."""

    #: A ref holds positions ``start:stop`` (:func:`read_frames` skips one holding none
    #: of those asked for); False: its positions are known only once read.
    ranged = True

    def files(self, ref: PartitionRef) -> List[str]:
        """The files ``ref`` reads (default: its one file)."""
        return [ref.path]

    def read(self, ref: PartitionRef, files: Sequence[str]) -> Frames:
        """``(frames (k, rows, cols), positions (k,), complete (k,))`` of ``ref``, read
        from ``files`` (:meth:`files`, as found on this node)."""
        raise NotImplementedError

    def open(self, text: str, scan: Optional[str], scan_shape: Optional[Sequence[int]],
             k: int) -> Tuple[ScanGeometry, List[PartitionRef]]:
        """An offline run's source as its option names it (``text``): the scan's geometry
        and its partitions (of ``k`` positions where the source chooses)."""
        raise NotImplementedError(f"{type(self).__name__} is not a source an offline run "
                                  "names")


#: The sources, by ``PartitionRef.kind``.
SOURCES: Table[Source] = Table("analysis source", {
    "dataset": "analyses.sources.dataset:Dataset",
    "frames": "analyses.sources.frames:FrameFiles",
    "spill": "analyses.sources.spilled:Spilled",
    "staged": "analyses.sources.staged:StagedRange",
    "tpx3": "analyses.sources.tpx3:Tpx3File",
}, make=lambda cls: cls(), hint="register one with analyses.sources.SOURCES.register")


def partitions(path: str, frames: int, k: int, **fields: Any) -> List[PartitionRef]:
    """Partitions of ``k`` consecutive positions over ``frames`` positions of ``path``
    (``fields``: the refs' other fields, e.g. ``kind='frames', first=1``)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [PartitionRef(path, start=s, stop=min(s + k, frames), **fields)
            for s in range(0, frames, k)]


def frame_files(ref: PartitionRef) -> List[str]:
    """The files ``ref`` reads (one per frame of a TIFF series, else its one file)."""
    return SOURCES.load(ref.kind).files(ref)


def read_partition(ref: PartitionRef, files: Optional[Sequence[str]] = None) -> Frames:
    """``(frames (k, rows, cols), positions (k,), complete (k,))`` of one partition, read
    from ``files`` (this node's copies of :func:`frame_files`; default those paths)."""
    source = SOURCES.load(ref.kind)
    return source.read(ref, list(files) if files is not None else source.files(ref))


def read_frames(refs: Sequence[PartitionRef], indices: Sequence[int]) -> np.ndarray:
    """The frames at flat ``indices`` (k, rows, cols), in index order, from ``refs``
    (a partition of a dataset or of frame files that holds none of them is not read)."""
    want = set(int(i) for i in indices)
    got = {}
    for ref in refs:
        if SOURCES.load(ref.kind).ranged and not any(ref.start <= i < ref.stop for i in want):
            continue
        data, positions, _ = read_partition(ref)
        for j, p in enumerate(positions.tolist()):
            if p in want:
                got[p] = data[j]
    missing = sorted(want - set(got))
    if missing:
        raise AnalysisError(f"frames {missing[:5]} asked for are not in the source")
    return np.stack([got[i] for i in sorted(got)])


def parse_source(text: str) -> Tuple[str, str]:
    """``FILE.h5:/dataset`` -> (file, dataset)."""
    path, sep, dset = text.rpartition(":")
    if not sep or not path or not dset.startswith("/"):
        raise AnalysisError(f"{text!r}: expected FILE.h5:/dataset")
    return path, dset


def source_partitions(frames: Optional[str], spilled: Optional[str], scan: Optional[str],
                      scan_shape: Optional[Sequence[int]], k: int, tpx3: Optional[str] = None
                      ) -> Tuple[ScanGeometry, List[PartitionRef]]:
    """The geometry and partitions of an offline run's source: ``FILE.h5:/DATASET``
    (``frames``, the ``dataset`` row), a receiving job's spill directory (``spilled``
    with ``scan``, the ``spill`` row) or a recorded TPX3 stream (``tpx3``, its row),
    opened by its row of :data:`SOURCES`."""
    kind, text = ("dataset", frames) if frames else ("tpx3", tpx3) if tpx3 else \
        ("spill", spilled)
    if not text:
        raise ValueError("give --frames FILE.h5:/DATASET, --spilled DIR --scan NAME or "
                         "--tpx3 FILE")
    return SOURCES.load(kind).open(text, scan, scan_shape, k)
