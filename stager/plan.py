"""Spec → :class:`~stager.manifest.Manifest`: which source file lands where.

``build_manifest`` is the only place that globs and stats the shared
filesystem. It runs on ONE process: the MPI layer calls it on rank 0 and
broadcasts the result, so N ranks do not put N times the metadata load on a
parallel filesystem. Everything else here is pure.

Rules (docs/hook-spec.md):

- a plain pattern lands at ``DIR/basename``; a matched directory is copied
  recursively as ``DIR/basename/...``;
- a ``**`` pattern keeps the path relative to its static prefix (the
  components before the first one with a glob character);
- two different sources mapping to one destination is an error naming both;
- a pattern matching nothing is an error unless written with a leading ``?``.
"""
from __future__ import annotations

import glob as _glob
import os
import stat as _stat
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from hooks.spec import Block, Pattern, Spec
from stager.errors import PlanError
from stager.manifest import BlockPlan, Entry, Manifest

__all__ = ["build_manifest", "destination_for", "static_prefix", "has_magic"]

_MAGIC = frozenset("*?[")


def has_magic(component: str) -> bool:
    """True if a path component holds a glob character."""
    return any(c in _MAGIC for c in component)


def static_prefix(pattern: str) -> str:
    """The leading directories of ``pattern`` that hold no glob character.

    >>> static_prefix("/data/run1/**/*.tif")
    '/data/run1'
    """
    parts = pattern.split("/")
    keep = []
    for part in parts[:-1]:
        if has_magic(part):
            break
        keep.append(part)
    return "/".join(keep) or "/"


def destination_for(dest_dir: str, pattern: str, match: str, within: str = "") -> str:
    """Where ``match`` (found by ``pattern``) lands under ``dest_dir``. Pure.

    Parameters
    ----------
    dest_dir : str
        The block's destination directory (may hold ``%n``).
    pattern : str
        The absolute pattern that matched.
    match : str
        The matched path (a file, or a directory being walked).
    within : str
        For a file found by walking a matched directory: its path relative to that directory.
    """
    if "**" in pattern.split("/"):
        rel = os.path.relpath(match, static_prefix(pattern))
    else:
        rel = os.path.basename(match.rstrip("/"))
    if within:
        rel = os.path.join(rel, within)
    return os.path.normpath(os.path.join(dest_dir, rel))


StatFn = Callable[[str], os.stat_result]


def build_manifest(spec: Spec, *, stat: StatFn = os.stat) -> Manifest:
    """Glob and stat every pattern of ``spec``; call on one process only.

    Parameters
    ----------
    spec : hooks.Spec
    stat : callable, optional
        ``os.stat`` by default (a parameter so tests can count calls).

    Returns
    -------
    Manifest
        Entries sorted by block, then destination.

    Raises
    ------
    PlanError
        A pattern matched nothing, two sources map to one destination, a
        match is not a regular file or directory, or a source cannot be
        stat'ed. The message starts with the pattern's ``FILE:LINE:COL``.
    """
    entries: List[Entry] = []
    claimed: Dict[str, Tuple[str, Pattern]] = {}
    blocks: List[BlockPlan] = []
    for index, block in enumerate(spec.blocks):
        if block.kind == "h5":
            # HDF5 selections are planned by stager.h5plan.build_h5_plan (they need h5py).
            blocks.append(BlockPlan(dest=block.dest, kind=block.kind,
                                    location=str(block.location)))
            continue
        if block.kind != "files":
            raise PlanError(f"{block.location}: '{block.kind}' blocks are not supported by "
                            "this version of the stager: use 'files'")
        first = len(entries)
        for pattern in block.patterns:
            found = 0
            for source, dest, st in _expand_pattern(block, pattern, stat):
                found += 1
                owner = claimed.get(dest)
                if owner is not None:
                    if owner[0] == source:
                        continue  # the same file named twice: stage it once
                    raise PlanError(
                        f"{pattern.location}: {source} and {owner[0]} (matched at "
                        f"{owner[1].location}) would both land at "
                        f"{dest.replace(chr(0), '%')}: rename one, or use '**' to keep "
                        "their directories")
                claimed[dest] = (source, pattern)
                entries.append(Entry(source=source, dest=dest, size=st.st_size,
                                     mode=_stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns,
                                     block=index))
            if not found and not pattern.optional:
                raise PlanError(f"{pattern.location}: {pattern.raw!r} matches no file "
                                f"(looked for {pattern.text}); fix the path, or write "
                                "'?' before it to make it optional")
        mine = entries[first:]
        mine.sort(key=lambda e: e.dest)
        entries[first:] = mine
        blocks.append(BlockPlan(dest=block.dest, kind=block.kind, location=str(block.location),
                                files=len(mine), bytes=sum(e.size for e in mine)))
    return Manifest.from_entries(spec.path, blocks, entries)


def _expand_pattern(block: Block, pattern: Pattern,
                    stat: StatFn) -> Iterator[Tuple[str, str, os.stat_result]]:
    """(source, destination, stat) for every file a pattern stands for, in sorted order.

    Each path is stat'ed exactly once (the result says both "directory?" and
    size/mode/mtime): on a parallel filesystem every metadata call counts.
    """
    recursive = "**" in pattern.text.split("/")
    matches = sorted(_glob.glob(pattern.text, recursive=recursive))
    if not matches and not has_magic(pattern.text) and os.path.lexists(pattern.text):
        matches = [pattern.text]  # e.g. a dangling link: let stat report it
    for match in matches:
        st = _stat_source(stat, match, pattern)
        if _stat.S_ISDIR(st.st_mode):
            for root, dirs, files in os.walk(match):
                dirs.sort()
                for name in sorted(files):
                    path = os.path.join(root, name)
                    within = os.path.relpath(path, match)
                    dest = destination_for(block.dest, pattern.text, match, within)
                    yield path, _checked(block, dest), _regular(_stat_source(stat, path, pattern),
                                                                path, pattern)
        else:
            dest = destination_for(block.dest, pattern.text, match)
            yield match, _checked(block, dest), _regular(st, match, pattern)


def _checked(block: Block, dest: str) -> str:
    if not dest.startswith(block.dest.rstrip("/") + "/"):
        raise PlanError(f"{block.dest_location}: {dest} would land outside "
                        f"{block.display_dest}; refusing")
    return dest


def _stat_source(stat: StatFn, source: str, pattern: Pattern) -> os.stat_result:
    try:
        return stat(source)
    except OSError as e:
        raise PlanError(f"{pattern.location}: cannot stat {source}: {e.strerror}") from e


def _regular(st: os.stat_result, source: str, pattern: Pattern) -> os.stat_result:
    if not _stat.S_ISREG(st.st_mode):
        raise PlanError(f"{pattern.location}: {source} is not a regular file or directory; "
                        "only files and directories can be staged")
    return st


def describe_size(n: Optional[int]) -> str:
    """Bytes in binary units, for humans (``1.5 MiB``)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
