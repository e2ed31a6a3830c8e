"""What a source is: a :class:`PartitionRef` names a partition, a :class:`Source` reads it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["PartitionRef", "Source", "Frames"]

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
