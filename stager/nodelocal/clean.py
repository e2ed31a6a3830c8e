"""``clean``: remove exactly what ``stage`` put on the nodes.

Collective over a communicator. Each leader reads the record of every
destination root of its node and removes the recorded files (only if they are
still regular files: a symlink or directory that replaced one is left alone
and reported), leftover temporary files of interrupted runs next to them, the
record, and then the directories the stager created, deepest first, if
they are empty. Nothing else is touched.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from stager.mpi.agree import agreed
from stager.nodelocal import localfs
from stager.nodelocal import record as records
from stager.nodelocal.roots import open_roots

__all__ = ["clean", "CleanReport"]


@dataclass(frozen=True)
class CleanReport:
    """What ``clean`` removed, summed over nodes (identical on every rank)."""

    nodes: Tuple[str, ...]
    files_removed: int
    dirs_removed: int
    skipped: Tuple[str, ...]


def _clean_root(root: str, made: List[str]) -> Tuple[int, List[str]]:
    """Remove one root's staged files and record; collect its created dirs in ``made``."""
    st = records.load(root)
    if not os.path.exists(st.path):
        return 0, []
    files = 0
    skipped: List[str] = []
    parents = set()
    for rel in st.files:
        path = localfs.inside(root, rel)
        parents.add(os.path.dirname(path))
        try:
            lst = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(lst.st_mode):
            os.unlink(path)
            files += 1
        else:
            skipped.append(path)
    for d in parents:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if localfs.TEMP_MARK in name and name.startswith("."):
                p = os.path.join(d, name)
                if stat.S_ISREG(os.lstat(p).st_mode) and os.lstat(p).st_uid == os.geteuid():
                    os.unlink(p)
    os.unlink(st.path)
    made.extend(st.created_dirs)
    return files, skipped


def _remove_dirs(made: List[str]) -> int:
    """rmdir the stager-made directories of every root, deepest first, if empty.

    After all roots are cleaned: two blocks may share parents that only one
    of them recorded as created.
    """
    dirs = 0
    for d in sorted(set(made), key=lambda p: (p.count(os.sep), p), reverse=True):
        try:
            os.rmdir(d)
            dirs += 1
        except OSError:
            pass  # not empty (someone else's files) or already gone: leave it
    return dirs


def clean(spec: Any, comm: Any = None, emulate_nodes: Optional[int] = None,
          node_id_env: Optional[str] = None) -> CleanReport:
    """Collective over `comm`: every rank must call. Remove every node's staged copies.

    Parameters are those of :func:`stager.verify`.

    Returns
    -------
    CleanReport

    Raises
    ------
    StagerError
        Removal failed somewhere (agreed on all ranks).
    """
    comm, roots, layout = open_roots(spec, comm, emulate_nodes, node_id_env)
    try:
        files = dirs = 0
        skipped: List[str] = []
        made: List[str] = []
        with agreed(comm, "clean", node=layout.name):
            if layout.is_leader:
                for root in roots:
                    f, s = _clean_root(root, made)
                    files, skipped = files + f, skipped + s
                dirs = _remove_dirs(made)
        if layout.is_leader and made:
            # parents shared by emulated nodes on one machine (``/local/run`` of
            # ``/local/run/%n``) are empty only once every node is done
            dirs += _remove_dirs([d for d in made if os.path.isdir(d)])
        gathered = comm.allgather((files, dirs, skipped))
    finally:
        layout.free()
    return CleanReport(nodes=layout.names, files_removed=sum(g[0] for g in gathered),
                       dirs_removed=sum(g[1] for g in gathered),
                       skipped=tuple(p for g in gathered for p in g[2]))
