"""The plain data of an ``h5`` plan: datasets, groups, links, one output file each.

Built on rank 0 by :mod:`stager.kinds.h5.plan`, broadcast inside the
:class:`~stager.planning.plan.Plan`, executed by :mod:`stager.kinds.h5`.
Frozen dataclasses; numpy is needed only for the inline values.

Values travel *raw*: in the dataset's own HDF5 file type (``h5type``, the
bytes of ``H5Tencode``), read and written with that type as the memory type,
so HDF5 converts nothing -- string padding and character set, byte order,
enum and compound layouts survive byte for byte. Only variable-length strings
(``values == "vlen"``: Python ``bytes``) and references (``values == "refs"``:
:class:`RefTarget`, translated to the copy) travel otherwise.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import numpy as np

__all__ = ["FILE_OVERHEAD", "OBJECT_OVERHEAD", "Attr", "Filter", "GroupPlan", "LinkPlan",
           "RefTarget", "DatasetPlan", "H5FilePlan", "raw_dtype", "region_summary"]

#: Capacity estimate: bytes of HDF5 metadata per output file and per object.
FILE_OVERHEAD = 64 << 10
OBJECT_OVERHEAD = 4 << 10


def raw_dtype(size: int) -> np.dtype:
    """The numpy buffer dtype of raw values of an HDF5 type of ``size`` bytes."""
    return np.dtype((np.void, max(int(size), 1)))


def region_summary(space: Any) -> str:
    """A library-independent description of a region reference's selection (planned,
    and recomputed from the copy by :mod:`stager.kinds.h5.check`)."""
    return f"{space.get_select_type()}:{space.get_select_npoints()}:{space.get_select_bounds()}"


@dataclass(frozen=True)
class RefTarget:
    """Where one HDF5 reference points, in the copy's namespace.

    ``path`` is ``""`` for a null reference; ``region`` is the ``H5Sencode``
    of a region reference's selection (``None`` for object references), and
    ``summary`` a library-independent description of it (for checksums).
    """

    path: str
    region: Optional[bytes] = None
    summary: str = ""


@dataclass(frozen=True)
class Attr:
    """One attribute, to be written back with its exact HDF5 type.

    Attributes
    ----------
    name : str
    h5type : bytes
        ``H5Tencode`` of the attribute's file type (committed types as transient copies).
    shape : tuple or None
        ``()`` for a scalar, ``None`` for a null dataspace.
    values : str
        ``"raw"`` (``value`` is a void array in the file type), ``"vlen"``
        (an object array of ``bytes``), ``"refs"`` (a tuple of
        :class:`RefTarget`) or ``"null"`` (no value).
    value : object
    """

    name: str
    h5type: bytes
    shape: Optional[Tuple[int, ...]]
    values: str
    value: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class Filter:
    """One stage of a dataset's filter pipeline (``H5Pget_filter``).

    ``values`` are the client values the source *stores*; ``setup`` are the
    values to pass to ``H5Pset_filter`` so that the filter's set-up callback
    stores ``values`` again (bitshuffle, for one, prepends its version and the
    element size to what it is given). Found and proven on the planning rank
    (:func:`stager.kinds.h5.filters.setup_values`).
    """

    code: int
    flags: int
    values: Tuple[int, ...]
    name: str
    setup: Tuple[int, ...] = ()


@dataclass(frozen=True)
class GroupPlan:
    path: str
    attrs: Tuple[Attr, ...] = ()


@dataclass(frozen=True)
class LinkPlan:
    """A link inside the copy: ``soft`` (kept as a soft link) or ``hard`` (a second name
    of a copied dataset)."""

    path: str
    target: str
    kind: str = "soft"


@dataclass(frozen=True, eq=False)
class DatasetPlan:
    """One dataset selection. ``start:stop:step`` index the first axis (scalars: 0:0:1).

    Layout fields (``layout``, ``chunks``, ``maxshape``, ``filters``) describe
    the *copy*: the source's own, except for a virtual dataset, which is
    copied as a regular dataset (``origin == "virtual"``, see
    :mod:`stager.kinds.h5.links`). ``read_file``/``read_path`` say where the
    values are read: ``""`` means the plan's source file and ``path``; an
    external link's target file otherwise.
    """

    path: str
    shape: Tuple[int, ...]
    dtype: Any                      # numpy dtype as h5py reads it (for messages and checks)
    h5type: bytes                   # H5Tencode of the file type: written back exactly
    layout: str                     # "chunked", "contiguous" or "compact" (of the copy)
    chunks: Optional[Tuple[int, ...]]
    maxshape: Tuple[Optional[int], ...]
    filters: Tuple[Filter, ...]
    fillvalue: Any                  # a user-defined fill value (h5py's dtype), or None
    attrs: Tuple[Attr, ...]
    start: int
    stop: int
    step: int
    sliced: bool
    inline: Optional[Any] = field(default=None, repr=False)
    est_bytes: int = 0
    space: str = "simple"           # "simple", "scalar" or "null"
    values: str = "raw"             # "raw", "vlen" or "refs" (see the module docstring)
    itemsize: int = 0               # bytes per element of the file type
    origin: str = ""                # "", "external" (link followed), "virtual" (VDS) or
    #                                 "efile" (contiguous data in external raw files)
    read_file: str = ""
    read_path: str = ""
    fill_time: int = -1             # H5D_FILL_TIME_* of the source (-1: library default)
    alloc_time: int = -1            # H5D_ALLOC_TIME_* of the source (-1: library default)

    @property
    def rows(self) -> int:
        """Selected indices on the first axis (1 for a scalar, 0 for a null dataspace)."""
        if self.space == "null":
            return 0
        return len(range(self.start, self.stop, self.step)) if self.shape else 1

    @property
    def out_shape(self) -> Tuple[int, ...]:
        return (self.rows,) + tuple(self.shape[1:]) if self.shape else ()

    @property
    def row_bytes(self) -> int:
        size = self.itemsize or np.dtype(self.dtype).itemsize
        return int(np.prod(self.shape[1:], dtype=np.int64)) * size

    @property
    def nbytes(self) -> int:
        """Selected bytes in memory (uncompressed)."""
        if self.space == "null":
            return 0
        if self.values == "vlen" and self.inline is not None:
            return sum(len(v) for v in np.asarray(self.inline).ravel())
        return self.rows * self.row_bytes if self.shape else \
            (self.itemsize or np.dtype(self.dtype).itemsize)

    @property
    def selection(self) -> str:
        """``/path[start:stop:step]`` (resolved), or ``/path`` for a whole dataset."""
        return f"{self.path}[{self.start}:{self.stop}:{self.step}]" if self.sliced else self.path

    @property
    def source_path(self) -> str:
        """The path the values are read from, in ``read_file`` (or the source file)."""
        return self.read_path or self.path

    @property
    def independent(self) -> bool:
        """Read with independent opens even when MPI-IO is available: HDF5 1.10-1.14
        cannot read a virtual dataset through the MPI-IO driver ("parallel reads not
        supported on virtual datasets"), nor, reliably, external raw storage."""
        return self.origin in ("virtual", "efile")

    def same_selection(self, other: DatasetPlan) -> bool:
        return (self.path, self.start, self.stop, self.step, self.sliced) == \
               (other.path, other.start, other.stop, other.step, other.sliced)


@dataclass(frozen=True)
class H5FilePlan:
    """Everything one node-local HDF5 file receives from one source file.

    ``linked`` lists the other files the copy's values come from (external
    link targets, virtual dataset sources) as ``(path, size, mtime_ns)``:
    they are checked for changes like the source, and are part of ``key``.
    """

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
    linked: Tuple[Tuple[str, int, int], ...] = ()
    ctime_ns: int = -1              # with size, mtime: the source's identity (resume)
    ino: int = -1
    #: ``(first, stop, step)``: the source frames this output holds, when it is one frame
    #: range of a ``scatter ... h5`` block (:mod:`stager.kinds.h5.frames`); else ``()``
    frames: Tuple[int, ...] = ()

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
            tuple(sorted(f"{g.path.rstrip('/')}/" for g in self.groups))

    @property
    def key(self) -> str:
        """What was staged from where: the resume record's ``source``.

        When values come from other files too (external links, VDS), a digest
        of their identities is appended, so changing one re-stages the copy.
        """
        key = f"{self.source}:{','.join(d.selection for d in self.datasets)}"
        if self.linked:
            ident = repr(sorted(self.linked)).encode()
            key += f";linked={hashlib.sha256(ident).hexdigest()[:16]}"
        return key

    @property
    def out_bytes(self) -> int:
        """Bytes the output file is expected to occupy (the capacity check)."""
        return self.est_bytes

    def describe(self) -> Dict[str, Any]:
        """A JSON-friendly summary (``stager plan --json``)."""
        return {"source": self.source, "dest": self.dest, "block": self.block,
                "selections": list(self.selections), "bytes": self.nbytes,
                "est_bytes": self.est_bytes, "linked": [p for p, _, _ in self.linked],
                **({"frames": list(self.frames)} if self.frames else {})}
