"""The plain data of an ``h5`` plan: datasets, groups, links, one output file each.

Built on rank 0 by :mod:`stager.planning.h5`, broadcast inside the
:class:`~stager.planning.plan.Plan`, executed by :mod:`stager.staging.h5`.
Frozen dataclasses; numpy is needed only for the inline values and dtypes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import numpy as np

__all__ = ["FILE_OVERHEAD", "OBJECT_OVERHEAD", "Attr", "Filter", "GroupPlan", "LinkPlan",
           "DatasetPlan", "H5FilePlan"]

#: Capacity estimate: bytes of HDF5 metadata per output file and per object.
FILE_OVERHEAD = 64 << 10
OBJECT_OVERHEAD = 4 << 10


@dataclass(frozen=True)
class Attr:
    """One attribute: name, value as h5py reads it, and the dtype to write it with."""

    name: str
    value: Any
    dtype: Any


@dataclass(frozen=True)
class Filter:
    """One stage of a dataset's filter pipeline (``H5Pget_filter``)."""

    code: int
    flags: int
    values: Tuple[int, ...]
    name: str


@dataclass(frozen=True)
class GroupPlan:
    path: str
    attrs: Tuple[Attr, ...] = ()


@dataclass(frozen=True)
class LinkPlan:
    """A soft link inside a copied group, recreated as a soft link."""

    path: str
    target: str


@dataclass(frozen=True, eq=False)
class DatasetPlan:
    """One dataset selection. ``start:stop:step`` index the first axis (scalars: 0:0:1)."""

    path: str
    shape: Tuple[int, ...]
    dtype: Any                      # numpy dtype used in memory
    h5type: bytes                   # H5Tencode of the file type: written back exactly
    layout: str                     # "chunked", "contiguous", "compact" or "virtual"
    chunks: Optional[Tuple[int, ...]]
    maxshape: Tuple[Optional[int], ...]
    filters: Tuple[Filter, ...]
    fillvalue: Any
    attrs: Tuple[Attr, ...]
    start: int
    stop: int
    step: int
    sliced: bool
    inline: Optional[np.ndarray] = field(default=None, repr=False)
    est_bytes: int = 0

    @property
    def rows(self) -> int:
        """Selected indices on the first axis (1 for a scalar)."""
        return len(range(self.start, self.stop, self.step)) if self.shape else 1

    @property
    def out_shape(self) -> Tuple[int, ...]:
        return (self.rows,) + tuple(self.shape[1:]) if self.shape else ()

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        """Selected bytes in memory (uncompressed)."""
        if self.inline is not None and self.inline.dtype.kind == "O":
            return sum(len(v) for v in self.inline.ravel())
        return self.rows * self.row_bytes if self.shape else np.dtype(self.dtype).itemsize

    @property
    def selection(self) -> str:
        """``/path[start:stop:step]`` (resolved), or ``/path`` for a whole dataset."""
        return f"{self.path}[{self.start}:{self.stop}:{self.step}]" if self.sliced else self.path

    def same_selection(self, other: DatasetPlan) -> bool:
        return (self.path, self.start, self.stop, self.step, self.sliced) == \
               (other.path, other.start, other.stop, other.step, other.sliced)


@dataclass(frozen=True)
class H5FilePlan:
    """Everything one node-local HDF5 file receives from one source file."""

    source: str
    dest: str                       # may hold %n
    block: int
    root: str                       # the block's destination directory (may hold %n)
    size: int
    mtime_ns: int
    mode: int
    groups: Tuple[GroupPlan, ...]
    datasets: Tuple[DatasetPlan, ...]
    links: Tuple[LinkPlan, ...]
    ctime_ns: int = -1              # with size, mtime: the source's identity (resume)
    ino: int = -1

    @property
    def nbytes(self) -> int:
        return sum(d.nbytes for d in self.datasets)

    @property
    def est_bytes(self) -> int:
        """Upper estimate of the output file's size (see ``_estimate``)."""
        return FILE_OVERHEAD + OBJECT_OVERHEAD * len(self.groups) + \
            sum(d.est_bytes for d in self.datasets)

    @property
    def selections(self) -> Tuple[str, ...]:
        return tuple(sorted(d.selection for d in self.datasets)) + \
            tuple(sorted(f"{g.path}/" for g in self.groups))

    @property
    def key(self) -> str:
        """What was staged from where: the resume record's ``source``."""
        return f"{self.source}:{','.join(d.selection for d in self.datasets)}"

    @property
    def out_bytes(self) -> int:
        """Bytes the output file is expected to occupy (the capacity check)."""
        return self.est_bytes

    def describe(self) -> Dict[str, Any]:
        """A JSON-friendly summary (``stager plan --json``)."""
        return {"source": self.source, "dest": self.dest, "block": self.block,
                "selections": list(self.selections), "bytes": self.nbytes,
                "est_bytes": self.est_bytes}
