"""The offline path: the same partitions read from files, for the same analysis.

A stream delivers partitions of K frames; files give the same ``(frames,
positions, complete)`` triples, so an analysis written once runs on both. The
sources (``PartitionRef.kind``): ``dataset``, an HDF5 dataset of frames ``(F, rows,
cols)`` or ``(ny, nx, rows, cols)``; ``spill``, a partition file a receiving job
spilled; ``frames``, raw detector frames as :func:`kernels.open_frames` reads them --
one GE/HDF5/TIFF file holding every frame (frame ``n`` at index ``n``) or a TIFF
series (``%d`` in the file name: frame ``n`` in ``path % n``) -- position ``p`` being
frame ``first + p``. A :class:`PartitionRef` is plain data (it travels to the
workers, which resolve ``%n`` and read on their node); :func:`frame_files` lists
the files it reads, :func:`read_partition` reads it; :func:`offline_report` is the accounting
of frames read from files (present = complete), so the offline output file has
the same layout as the streamed one (:func:`streams.job.output.write_scan`).
"""
from __future__ import annotations

import functools
import glob
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from analyses.errors import AnalysisError
from analyses.geometry import ScanGeometry

__all__ = ["PartitionRef", "partitions", "read_partition_file", "spilled_partitions",
           "frame_files", "is_series", "open_frame_file", "read_partition", "dataset_geometry",
           "parse_source", "source_partitions", "read_frames"]


@dataclass(frozen=True)
class PartitionRef:
    """Positions ``start:stop`` of a source (module docstring). ``frames``: ``first``
    (frame of position 0), ``shape`` and ``dtype`` (:func:`open_frame_file`). ``node``:
    where a scatter block put its files (its task goes there); ``shared``: per file of
    :func:`frame_files`, the shared file to read where the copy is not."""

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


def partitions(path: str, frames: int, k: int, **fields: Any) -> List[PartitionRef]:
    """Partitions of ``k`` consecutive positions over ``frames`` positions of ``path``
    (``fields``: the refs' other fields, e.g. ``kind='frames', first=1``)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [PartitionRef(path, start=s, stop=min(s + k, frames), **fields)
            for s in range(0, frames, k)]


def frame_files(ref: PartitionRef) -> List[str]:
    """The files ``ref`` reads: one per frame of a TIFF series, else its one file."""
    if ref.kind == "frames" and is_series(ref.path):
        folder, name = os.path.split(ref.path)   # %d in the name only: a %n may stay
        return [os.path.join(folder, name % (ref.first + p)) for p in range(ref.start, ref.stop)]
    return [ref.path]


def open_frame_file(path: str, shape: Sequence[int] = (), dtype: Optional[str] = None,
                    **options: Any) -> Any:
    """:func:`kernels.open_frames` of a detector file (or TIFF series): frames converted
    to ``dtype`` (values that do not fit are an error, never wrapped), ``shape`` (rows,
    cols) given to a GE raw file, which has no signature to say it."""
    from kernels import open_frames
    from kernels.io import sniff

    opts: Dict[str, Any] = {"dtype": dtype} if dtype else {}
    if shape and not is_series(path) and sniff(path) == "unknown":
        opts["shape"] = tuple(shape)
    return open_frames(path, **opts, **options)


@functools.lru_cache(maxsize=8)
def _series(pattern: str, first: int, dtype: Optional[str], _folder: Any = None) -> Any:
    """One reader per TIFF series and process (``_folder``: the folder's state, so files
    added or removed are counted again): opening a frame's file as a reader of its own
    reads it twice, once for its shape (``bench/results/offline_read.md``)."""
    return open_frame_file(pattern, (), dtype, first=first)


@functools.lru_cache(maxsize=4)
def _dataset(path: str, name: str, _identity: Any) -> Tuple[Any, Any, Tuple[int, ...]]:
    """One open frames dataset per file and process: the file, the dataset and its shape.
    Opening the file and the dataset for every partition of 16-64 frames of 128x128 took
    0.8 ms a partition, 1.8-3.2x the read itself (``bench/results/offline_read.md``).
    ``_identity`` (this process, the file's inode, time and size) keeps a forked worker
    off its parent's handle and opens a replaced file anew; a file stays open in the
    worker until four others were opened after it, or the worker ends (HDF5 then refuses
    to truncate it, ``"w"``, in that process: write a new copy and rename it, as the
    stager does)."""
    import h5py

    f = h5py.File(path, "r")
    d = f[name]
    return f, d, tuple(d.shape)


def _read_frame_files(ref: PartitionRef, files: Sequence[str]) -> np.ndarray:
    if is_series(ref.path):
        folder = os.path.dirname(files[0])
        if not ref.shared and list(files) == [os.path.join(folder, os.path.basename(f))
                                              for f in frame_files(ref)]:
            # the series' own files in one folder, all on this node (not scattered): its
            # reader (which counts the files from ``first`` there; a frame past them is
            # read on its own)
            from kernels.errors import ReaderError

            try:
                series = _series(os.path.join(folder, os.path.basename(ref.path)), ref.first,
                                 ref.dtype, os.stat(folder).st_mtime_ns)
            except ReaderError:     # no frame ``first`` here: each file on its own, below
                series = None
            if series is not None and ref.stop <= series.n_frames:
                return np.stack([series.read(p) for p in range(ref.start, ref.stop)])
        return np.stack([open_frame_file(f, (), ref.dtype).read(0) for f in files])
    reader = open_frame_file(files[0], ref.shape, ref.dtype)
    return np.stack([reader.read(ref.first + p) for p in range(ref.start, ref.stop)])


def parse_source(text: str) -> Tuple[str, str]:
    """``FILE.h5:/dataset`` -> (file, dataset)."""
    path, sep, dset = text.rpartition(":")
    if not sep or not path or not dset.startswith("/"):
        raise AnalysisError(f"{text!r}: expected FILE.h5:/dataset")
    return path, dset


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


def read_partition(ref: PartitionRef, files: Optional[Sequence[str]] = None
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(frames (k, rows, cols), positions (k,), complete (k,))`` of one partition.

    ``files``: where to read each of :func:`frame_files` (this node's copies); default
    those paths as they are.
    """
    files = list(files) if files is not None else frame_files(ref)
    if ref.kind == "spill":
        data, index, complete, _ = read_partition_file(files[0])
        return data, index, complete
    if ref.kind == "frames":
        data = _read_frame_files(ref, files)
    else:
        st = os.stat(files[0])
        _, d, shape = _dataset(files[0], ref.dataset,
                               (os.getpid(), st.st_ino, st.st_mtime_ns, st.st_size))
        if len(shape) == 4:
            # one read of the scan rows that hold the frames (not one read per frame)
            nx = shape[1]
            y0, y1 = ref.start // nx, (ref.stop - 1) // nx + 1
            rows = d[y0:y1].reshape(-1, *shape[2:])
            data = rows[ref.start - y0 * nx:ref.stop - y0 * nx]
        else:
            data = d[ref.start:ref.stop]
    positions = np.arange(ref.start, ref.stop, dtype=np.int64)
    return data, positions, np.ones(len(positions), bool)


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
        raise AnalysisError(f"frames {missing[:5]} asked for are not in the source")
    return np.stack([got[i] for i in sorted(got)])


def source_partitions(frames: Optional[str], spilled: Optional[str], scan: Optional[str],
                      scan_shape: Optional[Sequence[int]], k: int
                      ) -> Tuple[ScanGeometry, List[PartitionRef]]:
    """The geometry and partitions of an offline run's source: ``FILE.h5:/DATASET``
    (``frames``) or a receiving job's spill directory (``spilled`` with ``scan``)."""
    if frames:
        path, dset = parse_source(frames)
        g = dataset_geometry(path, dset, scan or os.path.splitext(os.path.basename(path))[0],
                             scan_shape)
        return g, partitions(path, g.frames, k, dataset=dset)
    if spilled:
        if not scan:
            raise ValueError("--spilled needs --scan NAME")
        paths = spilled_partitions(spilled, scan)
        if not paths:
            raise ValueError(f"no spilled partitions of scan {scan} under {spilled}")
        data, _, _, attrs = read_partition_file(paths[0])
        g = ScanGeometry(scan, 1, int(attrs["frames"]), int(attrs["sectors"]),
                         (int(data.shape[1]), int(data.shape[2])), str(attrs["dtype"]),
                         (int(attrs["scan_shape"][0]), int(attrs["scan_shape"][1])))
        return g, [PartitionRef(p, kind="spill") for p in paths]
    raise ValueError("give --frames FILE.h5:/DATASET or --spilled DIR --scan NAME")


def read_partition_file(path: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
    """``(frames, frame_index, complete, attrs)`` of one spilled partition file."""
    import h5py

    with h5py.File(path, "r") as f:
        return (f["frames"][()], f["frame_index"][()], f["complete"][()],
                {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()})


def spilled_partitions(template: str, scan: str, nodes: Optional[List[str]] = None
                       ) -> List[str]:
    """Paths of the spilled partitions of ``scan`` under ``template``, sorted.

    ``nodes``: the node names to look under (default: every directory that
    ``%n`` matches, for a shared view on one machine).
    """
    from stager.planning.plan import expand_node

    if "%n" not in template:
        roots = [template]
    elif nodes is None:
        roots = sorted(glob.glob(template.replace("%n", "*")))
    else:
        roots = [expand_node(template, n) for n in nodes]
    return [p for r in roots for p in sorted(glob.glob(os.path.join(r, scan, "part-r*-*.h5")))]
