"""``files`` blocks → :class:`~stager.planning.plan.FileEntry`: which source file lands where.

Rank 0 only (see :mod:`stager.planning.sources` for the shared rules). Here:

- two different sources mapping to one destination is an error naming both;
- the same file named twice is staged once;
- a pattern matching nothing is an error unless written with a leading ``?``;
- symbolic links to directories are not followed below ``**`` nor inside a matched
  directory (the walk and the recursive glob share that rule); they are listed in
  ``skipped``.
"""
from __future__ import annotations

import os
import stat as _stat
from typing import Dict, Iterator, List, Optional, Tuple

from hooks.spec import Block, Pattern
from stager.errors import PlanError
from stager.planning.plan import BlockPlan, FileEntry
from stager.planning.sources import (StatFn, checked_dest, claim, destination_for, glob_matches,
                                     regular, stat_source)

__all__ = ["plan_files"]


def plan_files(block: Block, index: int, claimed: Dict[str, Tuple[str, Pattern]],
               stat: StatFn = os.stat, trees: Optional[List[Tuple[str, Pattern]]] = None,
               skipped: Optional[List[str]] = None) -> Tuple[BlockPlan, List[FileEntry]]:
    """Glob and stat every pattern of one ``files`` block; call on one process only.

    Parameters
    ----------
    block : hooks.Block
    index : int
        The block's index in the spec.
    claimed : dict
        Destination -> (source, pattern) of every output planned so far (all
        blocks); updated here, so two blocks cannot write one path.
    stat : callable
        ``os.stat`` by default (a parameter so tests can count calls).
    trees : list, optional
        Appended to: ``(directory, pattern)`` of every matched directory (copied
        recursively; destinations must stay out of it).
    skipped : list, optional
        Appended to: symbolic links to directories that were not followed.

    Returns
    -------
    (BlockPlan, list of FileEntry)
        Entries sorted by destination.

    Raises
    ------
    PlanError
        A pattern matched nothing, two sources map to one destination, a
        match is not a regular file or directory, or a source cannot be
        stat'ed. The message starts with the pattern's ``FILE:LINE:COL``.
    """
    entries: List[FileEntry] = []
    trees = [] if trees is None else trees
    skipped = [] if skipped is None else skipped
    for pattern in block.patterns:
        found = 0
        for source, dest, st in _expand_pattern(block, pattern, stat, trees, skipped):
            found += 1
            if not claim(claimed, dest, source, pattern):
                continue  # the same file named twice: stage it once
            entries.append(FileEntry(source=source, dest=dest, size=st.st_size,
                                     mode=_stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns,
                                     block=index, ctime_ns=st.st_ctime_ns, ino=st.st_ino))
        if not found and not pattern.optional:
            raise PlanError(f"{pattern.location}: {pattern.raw!r} matches no file "
                            f"(looked for {pattern.text}); fix the path, or write "
                            "'?' before it to make it optional")
    entries.sort(key=lambda e: e.dest)
    nbytes = sum(e.size for e in entries)
    return (BlockPlan(dest=block.dest, kind=block.kind, location=str(block.location),
                      files=len(entries), bytes=nbytes, data_bytes=nbytes,
                      mode=block.mode, replicas=block.replicas), entries)


def _expand_pattern(block: Block, pattern: Pattern, stat: StatFn,
                    trees: List[Tuple[str, Pattern]],
                    skipped: List[str]) -> Iterator[Tuple[str, str, os.stat_result]]:
    """(source, destination, stat) for every file a pattern stands for, in sorted order.

    Each path is stat'ed exactly once (the result says both "directory?" and
    size/mode/mtime): on a parallel filesystem every metadata call counts.
    """
    for match in glob_matches(pattern.text, skipped):
        st = stat_source(stat, match, pattern)
        if _stat.S_ISDIR(st.st_mode):
            trees.append((match, pattern))
            for root, dirs, files in os.walk(match):  # never follows a directory link
                dirs.sort()
                for name in dirs:
                    if os.path.islink(os.path.join(root, name)):
                        skipped.append(os.path.join(root, name))
                for name in sorted(files):
                    path = os.path.join(root, name)
                    within = os.path.relpath(path, match)
                    dest = destination_for(block.dest, pattern.text, match, within)
                    yield path, checked_dest(block, dest), regular(
                        stat_source(stat, path, pattern), path, pattern)
        else:
            dest = destination_for(block.dest, pattern.text, match)
            yield match, checked_dest(block, dest), regular(st, match, pattern)
