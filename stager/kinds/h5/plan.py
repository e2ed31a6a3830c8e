"""``h5`` blocks → :class:`~stager.kinds.h5.types.H5FilePlan`: which objects of which
HDF5 files land where.

Like the ``files`` planning, :func:`plan_h5` runs on ONE process (rank 0 under MPI,
serial h5py, read only) and its result is broadcast inside the plan. It opens every
matched source file once, resolves each entry's internal path (with globs) and describes
every selected dataset (:mod:`stager.kinds.h5.describe`). The entry syntax was checked
when the spec was parsed (:mod:`hooks.h5entry`); the slice bounds are checked here.

The decisions (one output file per block and source file, groups copied whole, links
and virtual datasets followed, references translated) are docs/hook-spec.md, "HDF5
selections". Small datasets (at most :data:`INLINE_BYTES` selected), scalars,
variable-length strings (at most :data:`VLEN_LIMIT`) and references are read here, once,
and travel inside the plan: a NeXus metadata group of a hundred scalars then costs no
collective round per scalar.
"""
from __future__ import annotations

import os
import posixpath
import stat as _stat
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Dict, Iterator, List, Optional, Tuple

from hooks.h5entry import Slice, path_has_magic
from hooks.spec import Block, Pattern
from stager.errors import PlanError
from stager.kinds.h5.describe import (INLINE_BYTES, VLEN_LIMIT, Ctx, RefCheck, describe,
                                        external_target, read_attrs)
from stager.kinds.h5.links import LinkedFiles
from stager.kinds.h5.types import DatasetPlan, GroupPlan, H5FilePlan, LinkPlan
from stager.planning.plan import BlockPlan
from stager.planning.sources import (checked_dest, claim, destination_for, glob_matches,
                                     stat_source)

__all__ = ["INLINE_BYTES", "VLEN_LIMIT", "MAX_LINK_HOPS", "plan_h5"]

#: Links followed in a row before a path is refused as a loop (HDF5's own limit is 16).
MAX_LINK_HOPS = 16


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
        dataset, unsupported dtype, a filter missing here, a link or virtual
        dataset whose target does not exist, a reference whose target is not
        staged, a file that is not HDF5, conflicting selections or destinations.
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
            claim(claimed, dest, src, pattern)  # one file in several entries: one output
            if dest not in accs:
                accs[dest] = _FileAcc(src, dest, block, index, entry)
            acc = accs[dest]
            try:
                f = h5py.File(src, "r")
            except OSError as e:
                raise PlanError(f"{entry.where}: cannot open {src} as HDF5 ({e}); is it an "
                                "HDF5 file? Stage other files with a 'files' block") from e
            files = LinkedFiles()
            try:
                walker = _Walker(Ctx(f, src), entry, src, acc, inline_bytes, files)
                found = 0
                for path in _resolve(f, entry, src):
                    found += 1
                    walker.select(path)
                if not found and not pattern.optional:
                    raise PlanError(f"{entry.where}: {entry.path} matches no object in "
                                    f"{src}{_holds(f, entry.path)}")
            finally:
                files.close()
                f.close()
    mine = [accs[d].done() for d in sorted(accs)]
    return (BlockPlan(dest=block.dest, kind="h5", location=str(block.location),
                      files=len(mine), bytes=sum(m.est_bytes for m in mine),
                      data_bytes=sum(m.nbytes for m in mine), mode=block.mode,
                      replicas=block.replicas), mine)


# -- files ----------------------------------------------------------------------

def _glob_files(entry: _Entry) -> List[str]:
    found = glob_matches(entry.file)
    for src in found:
        if not _stat.S_ISREG(stat_source(os.stat, src, entry.pattern).st_mode):
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
        self.linked: Dict[str, Tuple[int, int]] = {}
        self.checks: List[RefCheck] = []
        self.objects: Dict[Tuple[str, int], str] = {}  # whole datasets by (file, address)

    def add_dataset(self, d: DatasetPlan, where: str) -> None:
        old = self.datasets.get(d.path)
        if old is not None:
            if old[0].same_selection(d):
                return
            raise PlanError(f"{where}: {self.source}:{d.selection} conflicts with "
                            f"{old[0].selection} selected at {old[1]}; one output file holds "
                            "one selection per dataset")
        self.datasets[d.path] = (d, where)

    def _check_refs(self) -> None:
        for c in self.checks:
            d = self.datasets.get(c.target)
            held = c.target == "/" or c.target in self.groups or d is not None or \
                (c.target in self.links and self.links[c.target].kind == "hard")
            if not held:
                raise PlanError(f"{c.where}: {c.what} refers to {c.target}, which this block "
                                f"does not stage; add {self.source}:{c.target} to the block "
                                "(references are translated to the copy's objects), or leave "
                                "the reference out")
            if c.region and d is not None and d[0].sliced:
                raise PlanError(f"{c.where}: {c.what} is a region reference into "
                                f"{d[0].selection}, which is staged as a slice (the region's "
                                "coordinates would be wrong); stage the dataset whole")

    def done(self) -> H5FilePlan:
        self._check_refs()
        return H5FilePlan(source=self.source, dest=self.dest, block=self.block, root=self.root,
                          size=self.size,
                          mtime_ns=self.mtime_ns, mode=self.mode, ctime_ns=self.ctime_ns,
                          ino=self.ino,
                          groups=tuple(self.groups[p] for p in sorted(self.groups)),
                          datasets=tuple(self.datasets[p][0] for p in sorted(self.datasets)),
                          links=tuple(self.links[p] for p in sorted(self.links)),
                          linked=tuple((p, s, m) for p, (s, m) in sorted(self.linked.items())))


# -- objects --------------------------------------------------------------------

def _resolve(f: Any, entry: _Entry, src: str) -> Iterator[str]:
    """Internal paths matching ``entry.path`` (globbing one component at a time)."""
    import h5py

    current = ["/"]
    parts = [p for p in entry.path.split("/") if p]
    for part in parts:
        nxt: List[str] = []
        for parent in current:
            try:
                g = f.get(parent)
            except (KeyError, OSError):  # through a dangling link: select() names it
                g = None
                if not path_has_magic(entry.path):
                    nxt.append(_join(parent, part))
                    continue
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


class _Walker:
    """Plans the objects one entry selects in one source file (links followed)."""

    def __init__(self, main: Ctx, entry: _Entry, src: str, acc: _FileAcc, inline: int,
                 files: LinkedFiles) -> None:
        self.main, self.entry, self.src, self.acc = main, entry, src, acc
        self.inline, self.files = inline, files

    def where(self, path: str) -> str:
        return f"{self.entry.where}: {self.src}:{path}"

    # -- following links ---------------------------------------------------------
    def locate(self, ctx: Ctx, path: str, hops: int = 0) -> Tuple[Ctx, str]:
        """The file and path holding the object at ``path`` (of ``ctx``'s file), links
        followed (``hops`` of them so far); the returned context maps the object's paths
        to the copy's."""
        import h5py

        if hops > MAX_LINK_HOPS:
            raise PlanError(f"{self.where(path)}: more than {MAX_LINK_HOPS} links in a row "
                            "(a loop?); select the target itself")
        ctx0, cur, copy_cur = ctx, "/", "/"
        for name in [p for p in path.split("/") if p]:
            g = ctx.file.get(cur)
            if not isinstance(g, h5py.Group):
                raise PlanError(f"{self.where(path)}: {cur} is not a group, so {path} does "
                                "not exist")
            link = g.get(name, getlink=True)
            nxt, copy_cur = _join(cur, name), _join(copy_cur, name)
            if link is None:
                raise PlanError(f"{self.where(path)}: {nxt} does not exist in {ctx.name}")
            if isinstance(link, h5py.SoftLink):
                target = posixpath.normpath(posixpath.join(cur, link.path))
                if ctx.file.get(target) is None:
                    raise PlanError(f"{self.where(path)}: {nxt} is a dangling soft link (to "
                                    f"{link.path}); fix the file, or leave it out")
                ctx, cur = self._hop(ctx, target, ctx0.to_copy(copy_cur) or copy_cur, hops)
            elif isinstance(link, h5py.ExternalLink):
                ctx, cur = self.external(ctx, link, ctx0.to_copy(copy_cur) or copy_cur, hops)
            else:
                cur = nxt
        return ctx, cur

    def _hop(self, ctx: Ctx, target: str, copy_at: str, hops: int) -> Tuple[Ctx, str]:
        c2, inner = self.locate(ctx, target, hops + 1)
        if not c2.read_file:
            return c2, inner  # the source file itself: its paths are the copy's paths
        return Ctx(c2.file, c2.name, c2.read_file, inner, copy_at), inner

    def external(self, ctx: Ctx, link: Any, copy_at: str, hops: int = 0) -> Tuple[Ctx, str]:
        """Follow an external link that lands at ``copy_at`` in the copy."""
        f, path = external_target(ctx, link, copy_at, self.where(copy_at), self.files)
        st = os.stat(path)
        self.acc.linked[path] = (st.st_size, st.st_mtime_ns)
        c2, inner = self.locate(Ctx(f, path, path), link.path, hops + 1)
        return Ctx(c2.file, c2.name, c2.read_file, inner, copy_at), inner

    # -- selecting ----------------------------------------------------------------
    def select(self, path: str) -> None:
        import h5py

        ctx, inner = self.locate(self.main, path) if path != "/" else (self.main, "/")
        obj = ctx.file[inner]
        self.ancestors(path)
        if isinstance(obj, h5py.Dataset):
            self.dataset(obj, path, ctx, self.entry.slice)
        elif isinstance(obj, h5py.Group):
            if self.entry.slice is not None:
                raise PlanError(f"{self.where(path)} is a group, not a dataset; the slice "
                                f"{self.entry.slice} applies to datasets only (drop it to copy "
                                "the whole group)")
            self.walk(obj, path, inner, ctx, set())
        else:
            raise PlanError(f"{self.where(path)} is a committed datatype, not a dataset or "
                            "group; it cannot be staged on its own")

    def ancestors(self, path: str) -> None:
        parts = [p for p in path.split("/") if p][:-1]
        for p in ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]:
            if p not in self.acc.groups:
                ctx, inner = self.locate(self.main, p) if p != "/" else (self.main, "/")
                self.acc.groups[p] = GroupPlan(p, read_attrs(ctx.file[inner], self.where(p),
                                                             ctx, self.acc.checks))

    def dataset(self, ds: Any, path: str, ctx: Ctx, sl: Optional[Slice]) -> None:
        import h5py

        key = (ctx.name, h5py.h5o.get_info(ds.id).addr)
        first = self.acc.objects.get(key)
        if sl is None and first is not None and first != path \
                and not self.acc.datasets[first][0].sliced:
            self.acc.links[path] = LinkPlan(path, first, "hard")  # a second name, kept so
            return
        d = describe(ds, path, sl, self.where(path), ctx, self.inline, self.files,
                     self.acc.linked, self.acc.checks)
        self.acc.add_dataset(d, self.entry.where)
        if sl is None:
            self.acc.objects.setdefault(key, path)

    def walk(self, g: Any, path: str, inner: str, ctx: Ctx, seen: set) -> None:
        """Copy group ``g`` (at ``inner`` in ``ctx``'s file) to ``path`` in the copy."""
        import h5py

        addr = (ctx.name, h5py.h5o.get_info(g.id).addr)
        if addr in seen:  # a hard-link cycle: the group is being copied already
            return
        seen.add(addr)
        self.acc.groups[path] = GroupPlan(path, read_attrs(g, self.where(path), ctx,
                                                           self.acc.checks))
        for name in sorted(g.keys()):
            child, child_inner = _join(path, name), _join(inner, name)
            link = g.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                if not ctx.read_file:
                    self.acc.links[child] = LinkPlan(child, link.path)
                    continue
                target = ctx.to_copy(posixpath.normpath(posixpath.join(inner, link.path)))
                if target is None:
                    raise PlanError(f"{self.where(child)} is a soft link (to {link.path} in "
                                    f"{ctx.name}) that leads outside the externally linked "
                                    "group; select its target with its own entry")
                self.acc.links[child] = LinkPlan(child, target)
                continue
            if isinstance(link, h5py.ExternalLink):
                c2, i2 = self.external(ctx, link, child)
                obj = c2.file[i2]
            else:
                c2, i2, obj = ctx, child_inner, g[name]
            if isinstance(obj, h5py.Group):
                self.walk(obj, child, i2, c2, seen)
            elif isinstance(obj, h5py.Dataset):
                self.dataset(obj, child, c2, None)
            else:
                raise PlanError(f"{self.where(child)} is a committed datatype, which the "
                                "stager cannot copy on its own; select the group's datasets "
                                "instead")
