"""Sources on the shared filesystem: glob, stat, and where each match lands. Rank 0 only.

The only code that globs and stats the shared filesystem. It runs on ONE
process: the MPI layer plans on rank 0 and broadcasts the result, so N ranks
do not put N times the metadata load on a parallel filesystem. The rules
(docs/hook-spec.md), shared by every block kind:

- a plain pattern lands at ``DIR/basename``; a matched directory is copied
  recursively as ``DIR/basename/...``;
- a ``**`` pattern keeps the path relative to its static prefix (the
  components before the first one with a glob character);
- a destination never lands outside its block's directory.
"""
from __future__ import annotations

import glob as _glob
import os
import stat as _stat
from typing import Callable, List

from hooks.spec import Block, Pattern
from stager.errors import PlanError

__all__ = ["StatFn", "has_magic", "static_prefix", "destination_for", "glob_matches",
           "checked_dest", "stat_source", "regular"]

_MAGIC = frozenset("*?[")

StatFn = Callable[[str], os.stat_result]


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


def glob_matches(pattern: str) -> List[str]:
    """Sorted matches of an absolute pattern (``**`` recursive); a dangling literal path is
    returned as is, so stat can report it."""
    recursive = "**" in pattern.split("/")
    matches = sorted(_glob.glob(pattern, recursive=recursive))
    if not matches and not has_magic(pattern) and os.path.lexists(pattern):
        matches = [pattern]
    return matches


def checked_dest(block: Block, dest: str) -> str:
    """``dest`` if it lies below the block's destination directory, else a PlanError."""
    if not dest.startswith(block.dest.rstrip("/") + "/"):
        raise PlanError(f"{block.dest_location}: {dest} would land outside "
                        f"{block.display_dest}; refusing")
    return dest


def stat_source(stat: StatFn, source: str, pattern: Pattern) -> os.stat_result:
    try:
        return stat(source)
    except OSError as e:
        raise PlanError(f"{pattern.location}: cannot stat {source}: {e.strerror}") from e


def regular(st: os.stat_result, source: str, pattern: Pattern) -> os.stat_result:
    if not _stat.S_ISREG(st.st_mode):
        raise PlanError(f"{pattern.location}: {source} is not a regular file or directory; "
                        "only files and directories can be staged")
    return st
