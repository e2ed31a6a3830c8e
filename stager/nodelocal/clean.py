"""``clean``: remove exactly what ``stage`` put on the nodes for one spec, and nothing else.

Collective over a communicator. ``clean`` deletes files, so it trusts nothing it has
not checked (:mod:`core.trusted`). Each leader, for each destination root of its node:
opens the root without following a symlink and requires it to be yours (a root another
user made, with a record planted in it, is reported and left); takes the root's lock
and removes what dead runs left; removes each copy the spec's record names only if it
is still *the recorded copy* (docs/staging-state.md, section 4), walking to it with
``O_NOFOLLOW`` directory descriptors; then removes the record and the directories the
stager made that are now empty. Anything else is reported and left; other specs'
records in the same root, and their files, are not touched.
"""
from __future__ import annotations

import os
import socket
import stat
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from core.mpi.agree import agreed
from stager.errors import KEPT, StagerError
from stager.nodelocal import record as records
from stager.nodelocal.roots import locked_roots, release
from stager.nodelocal.state import RootState
from core.trusted import Untrusted, is_missing, open_below

__all__ = ["clean", "CleanReport", "remove_recorded"]


@dataclass(frozen=True)
class CleanReport:
    """What ``clean`` removed, summed over nodes (identical on every rank).

    ``skipped`` lists what was left and why (``PATH: reason``); ``leftovers`` counts
    temporary files of dead runs removed.
    """

    nodes: Tuple[str, ...]
    files_removed: int
    dirs_removed: int
    skipped: Tuple[str, ...]
    leftovers: int = 0


def remove_recorded(root_fd: int, root: str, rec: records.SpecRecord
                    ) -> Tuple[int, List[str], Dict[str, records.StagedFile]]:
    """Remove every recorded copy that is still the recorded copy; never follow a link.

    Returns
    -------
    (removed, left, keep)
        Files removed; ``"PATH: why"`` for each file left; the entries to keep in
        the record (files left only because their directory cannot be trusted
        now: a fixed directory lets a later clean remove them).
    """
    by_dir: Dict[str, List[str]] = defaultdict(list)
    for rel in rec.files:
        by_dir[os.path.dirname(rel)].append(rel)
    removed = 0
    left: List[str] = []
    keep: Dict[str, records.StagedFile] = {}
    for d in sorted(by_dir):
        try:
            fd = open_below(root_fd, d, root)
        except Untrusted as e:
            for rel in by_dir[d]:
                keep[rel] = rec.files[rel]
            left.append(f"{os.path.join(root, d)}: {e}; its staged files were left")
            continue
        except OSError as e:
            if is_missing(e):
                continue  # the directory and its copies are gone already
            raise
        try:
            for rel in sorted(by_dir[d]):
                name = os.path.basename(rel)
                path = os.path.join(root, rel)
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entry = rec.files[rel]
                if entry.is_copy(st):
                    os.unlink(name, dir_fd=fd)
                    removed += 1
                elif stat.S_ISLNK(st.st_mode):
                    left.append(f"{path}: a symlink, not the staged copy")
                elif not stat.S_ISREG(st.st_mode):
                    left.append(f"{path}: no longer a regular file")
                elif entry.same_file(st):
                    left.append(f"{path}: modified since it was staged (size or mtime)")
                else:
                    left.append(f"{path}: replaced since it was staged (not the staged copy)")
        finally:
            os.close(fd)
    return removed, left, keep


def _clean_root(state: RootState, key: str) -> Tuple[int, int, List[str], List[str], int]:
    """One locked root: (files removed, dirs removed, left, ancestors still there, temps)."""
    temps = state.clear_tmp()
    rec = state.load(key)
    removed, left, keep = remove_recorded(state.root_fd, state.root, rec)
    if keep:
        rec.files = keep
        records.compact(state.fd, state.path, rec)
    else:
        records.remove(state.fd, key)
    final = not state.spec_keys()
    dirs, ancestors = state.remove_dirs(final)
    return removed, dirs, left, ancestors, temps


def clean(spec: Any, job: Any = None, wait: Any = None) -> CleanReport:
    """Collective over `job`: every rank must call. Remove every node's copies of ``spec``.

    Parameters are those of :func:`stager.verify`; ``wait`` as for :func:`stager.stage`
    (seconds to wait for a run holding a root; default: fail at once, naming it).

    Returns
    -------
    CleanReport
        ``skipped`` names everything left and why (a root that is not yours, a file
        that is not the recorded copy, a directory that cannot be trusted).

    Raises
    ------
    StagerError
        Removal failed somewhere, or a run holds a root (agreed on all ranks).
    """
    with locked_roots(spec, job, wait, "clean") as (staged, held):
        comm, layout = staged.job.comm, staged.job
        files = dirs = temps = 0
        skipped: List[str] = []
        ancestors: List[str] = []
        with agreed(comm, "clean", node=layout.name, quiet=True, base=KEPT, default=StagerError):
            if layout.is_leader:
                files, dirs, skipped, ancestors, temps = _clean_node(staged.key, held)
                release(held)
                held.clear()
        # parents shared by nodes on one machine (``/local/run`` of
        # ``/local/run/%n``) are empty only once every node is done: after the agreement
        # above, each leader tries those every node of its host could not remove
        host = socket.gethostname()
        left = [a for h, anc in comm.allgather((host, ancestors)) if h == host for a in anc]
        if layout.is_leader and left:
            dirs += _remove_ancestors(left)
        gathered = comm.allgather((files, dirs, skipped, temps))
    return CleanReport(nodes=layout.names, files_removed=sum(g[0] for g in gathered),
                       dirs_removed=sum(g[1] for g in gathered),
                       skipped=tuple(p for g in gathered for p in g[2]),
                       leftovers=sum(g[3] for g in gathered))


def _clean_node(key: str, held: List[Any]) -> Tuple[int, int, List[str], List[str], int]:
    files = dirs = temps = 0
    skipped: List[str] = []
    ancestors: List[str] = []
    for root, state, why in held:
        if state is None:
            if why and why != "nothing staged here" and not why.startswith("shared with"):
                skipped.append(f"{root}: {why}; nothing there was removed")
            continue
        f, d, left, anc, t = _clean_root(state, key)
        files, dirs, temps = files + f, dirs + d, temps + t
        skipped.extend(left)
        ancestors.extend(anc)
    return files, dirs, skipped, ancestors, temps


def _remove_ancestors(paths: List[str]) -> int:
    n = 0
    for d in sorted(set(paths), key=lambda p: (p.count("/"), p), reverse=True):
        try:
            os.rmdir(d)
            n += 1
        except OSError:
            pass  # not empty (someone else's files) or already gone: leave it
    return n
