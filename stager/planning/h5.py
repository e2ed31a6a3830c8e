"""``h5`` blocks → :class:`~stager.planning.h5types.H5FilePlan`: which objects of which
HDF5 files land where.

Like the ``files`` planning, :func:`plan_h5` runs on ONE process (rank 0
under MPI, with serial h5py: the default file driver, read only) and its
result is broadcast inside the plan. It opens every matched source file once,
resolves each entry's internal path (with globs) and describes every selected
dataset: shape, dtype and HDF5 file type, layout, chunk shape, filter
pipeline, fill value, attributes, selected first-axis range and bytes. The
entry syntax (``FILE:/path[a:b:s]``) was checked when the spec was parsed
(:mod:`hooks.h5entry`); the slice bounds are checked here, against the dataset.

Decisions (also in docs/hook-spec.md, "HDF5 selections"):

* One node-local HDF5 file per (block, source file), at ``DIR/basename`` (or
  the ``**`` rule of file blocks); several entries naming one source file
  fill one output file. The same object selected twice identically is staged
  once; two different selections of one dataset are an error.
* A group is copied whole (subgroups, datasets, attributes, soft links as
  soft links); the ancestors of every selected object are created with their
  attributes, so NeXus ``NX_class`` markers survive. External links and
  committed datatypes are refused with a message (stage their file instead).
* Small datasets (at most :data:`INLINE_BYTES` selected) and variable-length
  string datasets (at most :data:`VLEN_LIMIT`) are read here, once, and travel
  inside the plan: a NeXus metadata group of a hundred scalars then costs no
  collective round per scalar.
* Supported dtypes: booleans, integers, floats, complex, fixed-length strings,
  opaque, compounds and sub-arrays of those, variable-length strings (inline).
  References and variable-length sequences are "unsupported dtype" errors.
"""
from __future__ import annotations

import math
import os
import stat as _stat
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from hooks.h5entry import Slice, path_has_magic
from hooks.spec import Block, Pattern
from stager.errors import PlanError
from stager.planning.h5types import (OBJECT_OVERHEAD, Attr, DatasetPlan, Filter, GroupPlan,
                                     H5FilePlan, LinkPlan)
from stager.planning.plan import BlockPlan
from stager.planning.sources import checked_dest, destination_for, glob_matches

__all__ = ["INLINE_BYTES", "VLEN_LIMIT", "plan_h5"]

#: Datasets with at most this many selected bytes are read while planning.
INLINE_BYTES = 64 << 10
#: Largest variable-length string dataset staged (it is read while planning).
VLEN_LIMIT = 1 << 20


@dataclass(frozen=True)
class _Entry:
    """One ``h5`` block entry as parsed (file glob, internal path, slice, location)."""

    pattern: Pattern

    @property
    def file(self) -> str:
        return self.pattern.text

    @property
    def path(self) -> str:
        assert self.pattern.selection is not None
        return self.pattern.selection.path

    @property
    def slice(self) -> Optional[Slice]:
        assert self.pattern.selection is not None
        return self.pattern.selection.slice

    @property
    def where(self) -> str:
        return str(self.pattern.location)


def plan_h5(block: Block, index: int, claimed: Dict[str, Tuple[str, Pattern]],
            inline_bytes: int = INLINE_BYTES) -> Tuple[BlockPlan, List[H5FilePlan]]:
    """Resolve and describe one ``h5`` block; call on one process only.

    Parameters
    ----------
    block : hooks.Block
        An ``h5`` block (its patterns carry their parsed selections).
    index : int
        The block's index in the spec.
    claimed : dict
        Destination -> (source, pattern) of every output planned so far (all
        blocks and kinds); updated here.
    inline_bytes : int
        Datasets with at most this many selected bytes (and every scalar) are
        read here and travel in the plan (tests pass 0 to force the collective path).

    Returns
    -------
    (BlockPlan, list of H5FilePlan)
        Output files by destination.

    Raises
    ------
    PlanError
        Starting with the entry's ``FILE:LINE:COL``: no match (file or object),
        missing dataset, slice out of range, slice on something that is not a
        dataset, unsupported dtype, a file that is not HDF5, conflicting
        selections or destinations.
    """
    import h5py  # only the planning process needs it, and only for h5 blocks

    accs: Dict[str, _FileAcc] = {}
    for pattern in block.patterns:
        entry = _Entry(pattern)
        sources = _glob_files(entry)
        if not sources and not pattern.optional:
            raise PlanError(f"{entry.where}: {entry.file} matches no file; fix the path, "
                            "or write '?' before the entry to make it optional")
        for src in sources:
            dest = checked_dest(block, destination_for(block.dest, entry.file, src))
            acc = accs.get(dest)
            if acc is None:
                owner = claimed.get(dest)
                if owner is not None and owner[0] != src:
                    raise PlanError(f"{entry.where}: {src} and {owner[0]} (at "
                                    f"{owner[1].location}) would both land at "
                                    f"{dest.replace(chr(0), '%')}; rename one, or use '**'")
                claimed[dest] = (src, pattern)
                acc = accs[dest] = _FileAcc(src, dest, block, index, entry)
            elif acc.source != src:
                raise PlanError(f"{entry.where}: {src} and {acc.source} (at "
                                f"{acc.entry.where}) would both land at "
                                f"{dest.replace(chr(0), '%')}; rename one, or use '**'")
            try:
                f = h5py.File(src, "r")
            except OSError as e:
                raise PlanError(f"{entry.where}: cannot open {src} as HDF5 ({e}); is it an "
                                "HDF5 file? Stage other files with a 'files' block") from e
            with f:
                found = 0
                for path in _resolve(f, entry, src):
                    found += 1
                    _select(f, path, entry, src, acc, inline_bytes)
                if not found and not pattern.optional:
                    raise PlanError(f"{entry.where}: {entry.path} matches no object in "
                                    f"{src}{_holds(f, entry.path)}")
    mine = [accs[d].done() for d in sorted(accs)]
    return (BlockPlan(dest=block.dest, kind="h5", location=str(block.location),
                      files=len(mine), bytes=sum(m.est_bytes for m in mine),
                      data_bytes=sum(m.nbytes for m in mine)), mine)


# -- files ----------------------------------------------------------------------

def _glob_files(entry: _Entry) -> List[str]:
    found = glob_matches(entry.file)
    for src in found:
        try:
            st = os.stat(src)
        except OSError as e:
            raise PlanError(f"{entry.where}: cannot stat {src}: {e.strerror}") from e
        if not _stat.S_ISREG(st.st_mode):
            raise PlanError(f"{entry.where}: {src} is not a regular file; an h5 entry names "
                            "an HDF5 file (use a 'files' block for directories)")
    return found


class _FileAcc:
    """Collects one output file's objects, refusing conflicting selections."""

    def __init__(self, source: str, dest: str, block: Block, index: int, entry: _Entry) -> None:
        st = os.stat(source)
        self.source, self.dest, self.block, self.entry = source, dest, index, entry
        self.root = block.dest
        self.size, self.mtime_ns, self.mode = st.st_size, st.st_mtime_ns, _stat.S_IMODE(st.st_mode)
        self.ctime_ns, self.ino = st.st_ctime_ns, st.st_ino
        self.groups: Dict[str, GroupPlan] = {}
        self.datasets: Dict[str, Tuple[DatasetPlan, str]] = {}
        self.links: Dict[str, LinkPlan] = {}

    def add_dataset(self, d: DatasetPlan, where: str) -> None:
        old = self.datasets.get(d.path)
        if old is not None:
            if old[0].same_selection(d):
                return
            raise PlanError(f"{where}: {self.source}:{d.selection} conflicts with "
                            f"{old[0].selection} selected at {old[1]}; one output file holds "
                            "one selection per dataset")
        self.datasets[d.path] = (d, where)

    def done(self) -> H5FilePlan:
        return H5FilePlan(source=self.source, dest=self.dest, block=self.block, root=self.root,
                          size=self.size,
                          mtime_ns=self.mtime_ns, mode=self.mode, ctime_ns=self.ctime_ns,
                          ino=self.ino,
                          groups=tuple(self.groups[p] for p in sorted(self.groups)),
                          datasets=tuple(self.datasets[p][0] for p in sorted(self.datasets)),
                          links=tuple(self.links[p] for p in sorted(self.links)))


# -- objects --------------------------------------------------------------------

def _resolve(f: Any, entry: _Entry, src: str) -> Iterator[str]:
    """Internal paths matching ``entry.path`` (globbing one component at a time)."""
    import h5py

    current = ["/"]
    parts = [p for p in entry.path.split("/") if p]
    for part in parts:
        nxt: List[str] = []
        for parent in current:
            g = f.get(parent)
            if not isinstance(g, h5py.Group):
                if not path_has_magic(entry.path):
                    raise PlanError(f"{entry.where}: {parent} in {src} is a dataset, not a "
                                    f"group, so {entry.path} does not exist")
                continue
            if path_has_magic(part):
                names = sorted(n for n in g.keys() if fnmatchcase(n, part))
            else:
                names = [part] if g.get(part, getlink=True) is not None else []
            nxt.extend(_join(parent, n) for n in names)
        current = nxt
        if not current:
            return
    yield from current


def _join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def _holds(f: Any, path: str) -> str:
    """' (/entry/data holds: a, b)' for the deepest existing group of ``path``."""
    import h5py

    parent = path.rsplit("/", 1)[0] or "/"
    while parent != "/" and not isinstance(f.get(parent), h5py.Group):
        parent = parent.rsplit("/", 1)[0] or "/"
    names = sorted(f[parent].keys())
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return f" ({parent} holds: {shown or 'nothing'}); check the internal path"


def _select(f: Any, path: str, entry: _Entry, src: str, acc: _FileAcc, inline: int) -> None:
    import h5py

    link = f.get(path, getlink=True) if path != "/" else None
    if isinstance(link, h5py.ExternalLink):
        raise PlanError(f"{entry.where}: {src}:{path} is an external link to "
                        f"{link.filename}:{link.path}; stage that file's object instead")
    try:
        obj = f[path]
    except KeyError as e:
        raise PlanError(f"{entry.where}: {src}:{path} is a dangling soft link") from e
    _ancestors(f, path, acc)
    if isinstance(obj, h5py.Dataset):
        acc.add_dataset(_describe(obj, path, entry.slice, entry, src, inline), entry.where)
    elif isinstance(obj, h5py.Group):
        if entry.slice is not None:
            raise PlanError(f"{entry.where}: {src}:{path} is a group, not a dataset; the "
                            f"slice {entry.slice} applies to datasets only (drop it to copy "
                            "the whole group)")
        _walk(obj, path, entry, src, acc, set(), inline)
    else:
        raise PlanError(f"{entry.where}: {src}:{path} is a committed datatype, not a dataset "
                        "or group; it cannot be staged on its own")


def _ancestors(f: Any, path: str, acc: _FileAcc) -> None:
    parts = [p for p in path.split("/") if p][:-1]
    paths = ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]
    for p in paths:
        if p not in acc.groups:
            acc.groups[p] = GroupPlan(p, _attrs(f[p], p, acc.entry, acc.source))


def _walk(g: Any, path: str, entry: _Entry, src: str, acc: _FileAcc, seen: set,
          inline: int) -> None:
    import h5py

    addr = h5py.h5o.get_info(g.id).addr
    if addr in seen:  # a hard-link cycle: the group is being copied already
        return
    seen.add(addr)
    acc.groups[path] = GroupPlan(path, _attrs(g, path, entry, src))
    for name in sorted(g.keys()):
        child = _join(path, name)
        link = g.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            acc.links[child] = LinkPlan(child, link.path)
        elif isinstance(link, h5py.ExternalLink):
            raise PlanError(f"{entry.where}: {src}:{child} is an external link to "
                            f"{link.filename}:{link.path}; stage that file's object with its "
                            "own entry, or select this group's other members")
        else:
            obj = g[name]
            if isinstance(obj, h5py.Group):
                _walk(obj, child, entry, src, acc, seen, inline)
            elif isinstance(obj, h5py.Dataset):
                acc.add_dataset(_describe(obj, child, None, entry, src, inline), entry.where)
            else:
                raise PlanError(f"{entry.where}: {src}:{child} is a committed datatype, which "
                                "the stager cannot copy; select the group's datasets instead")


def _unsupported(dt: Any) -> Optional[str]:
    """Why ``dt`` cannot be staged, or None (vlen strings are handled by the caller)."""
    import h5py

    if h5py.check_ref_dtype(dt) is not None:
        return "an HDF5 reference"
    if h5py.check_vlen_dtype(dt) is not None:
        return "a variable-length sequence"
    if dt.subdtype is not None:
        return _unsupported(dt.subdtype[0])
    if dt.names:
        for name in dt.names:
            why = _unsupported(dt.fields[name][0])
            if why:
                return f"field {name!r} is {why}"
        return None
    if dt.kind in "biufcSVmM":
        return None
    return "an object type"


def _describe(ds: Any, path: str, sl: Optional[Slice], entry: _Entry, src: str,
              inline_bytes: int) -> DatasetPlan:
    import h5py

    where = f"{entry.where}: {src}:{path}"
    dt = ds.dtype
    info = h5py.check_string_dtype(dt)
    vlen_str = info is not None and info.length is None
    why = None if vlen_str else _unsupported(dt)
    if why:
        raise PlanError(f"{where} has unsupported dtype {dt} ({why}); only numbers, booleans, "
                        "fixed strings, compounds and variable-length strings can be staged")
    if ds.shape is None:
        raise PlanError(f"{where} has an empty (null) dataspace; there is nothing to stage")
    shape = tuple(int(n) for n in ds.shape)
    if sl is not None and not shape:
        raise PlanError(f"{where} is a scalar dataset; the slice {sl} needs at least one axis")
    try:
        whole = (0, shape[0] if shape else 0, 1)
        start, stop, step = sl.resolve(shape[0]) if sl is not None else whole
    except ValueError as e:
        raise PlanError(f"{where}: slice {sl} out of range: {e} ({path} has shape "
                        f"{shape}); fix the slice") from e
    dcpl = ds.id.get_create_plist()
    layout = {h5py.h5d.CHUNKED: "chunked", h5py.h5d.CONTIGUOUS: "contiguous",
              h5py.h5d.COMPACT: "compact"}.get(dcpl.get_layout(), "virtual")
    filters = tuple(Filter(int(c), int(fl), tuple(int(v) for v in vals), _name(nm))
                    for c, fl, vals, nm in (dcpl.get_filter(i) for i in range(dcpl.get_nfilters())))
    d = DatasetPlan(path=path, shape=shape, dtype=dt, h5type=ds.id.get_type().encode(),
                    layout=layout, chunks=ds.chunks, maxshape=tuple(ds.maxshape),
                    filters=filters, fillvalue=None if vlen_str else ds.fillvalue,
                    attrs=_attrs(ds, path, entry, src), start=start, stop=stop, step=step,
                    sliced=sl is not None)
    inline = None
    if vlen_str or not shape or d.nbytes <= inline_bytes:
        inline = np.asarray(ds[start:stop:step] if shape else ds[()])
        if vlen_str and sum(len(v) for v in inline.ravel()) > VLEN_LIMIT:
            raise PlanError(f"{where} is a variable-length string dataset larger than "
                            f"{VLEN_LIMIT >> 20} MiB (unsupported dtype for staging); select "
                            "other datasets or stage the whole file with a 'files' block")
    return replace(d, inline=inline, est_bytes=_estimate(ds, d))


def _estimate(ds: Any, d: DatasetPlan) -> int:
    """Bytes the output dataset is expected to occupy (capacity check).

    Filtered data take the source's stored bytes per selected frame (the
    same filters on the same chunk shape), plus 5 %, as compressed sizes of
    different frames vary; unfiltered data take their raw size.
    """
    raw = d.nbytes
    if d.filters and d.shape and d.shape[0]:
        stored = ds.id.get_storage_size()
        raw = math.ceil(stored * d.rows / d.shape[0] * 1.05)
    chunks = 1
    if d.chunks:
        chunks = math.prod(math.ceil(n / c) for n, c in zip(d.out_shape, d.chunks) if c)
    return raw + OBJECT_OVERHEAD + 64 * chunks


def _name(raw: Any) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def _attrs(obj: Any, path: str, entry: _Entry, src: str) -> Tuple[Attr, ...]:
    import h5py

    out = []
    for name in obj.attrs:
        try:
            dt = obj.attrs.get_id(name).dtype
            info = h5py.check_string_dtype(dt)
            if (info is None or info.length is not None) and _unsupported(dt):
                raise TypeError(f"unsupported dtype {dt} ({_unsupported(dt)})")
            out.append(Attr(name, obj.attrs[name], dt))
        except (TypeError, OSError, ValueError) as e:
            raise PlanError(f"{entry.where}: attribute {name!r} of {src}:{path} cannot be "
                            f"copied: {e}") from e
    return tuple(out)
