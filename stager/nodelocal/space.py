"""Free space at destinations, and the capacity check before anything is written.

Several destinations may share one filesystem (``/tmp`` and ``/tmp/bulk``, or
nodes sharing one host): room is always compared with what all of them
need together. ``check_space`` serves ``stager plan`` on one machine;
:func:`shortfalls` is the pure rule the collective capacity check of the
staging pipeline (:mod:`stager.staging.capacity`) applies to every leader's
measurements before the first byte is written.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Tuple

from stager.planning.plan import describe_size

__all__ = ["DestinationSpace", "existing_ancestor", "free_bytes", "filesystem_id",
           "block_size", "allocated", "check_space", "RootNeed", "shortfalls"]


def existing_ancestor(path: str) -> str:
    """``path`` itself if it exists, else its nearest existing parent."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path: str) -> int:
    """Bytes available to an unprivileged writer on the filesystem holding ``path``."""
    st = os.statvfs(existing_ancestor(path))
    return st.f_bavail * st.f_frsize


def filesystem_id(path: str) -> int:
    """Device id of the filesystem that holds (or would hold) ``path``."""
    return os.stat(existing_ancestor(path)).st_dev


def block_size(path: str) -> int:
    """Allocation unit of the filesystem holding ``path``."""
    return os.statvfs(existing_ancestor(path)).f_frsize or 4096


def allocated(nbytes: int, block: int) -> int:
    """``nbytes`` rounded up to whole blocks: what a file of that size occupies."""
    return -(-nbytes // block) * block


@dataclass(frozen=True)
class DestinationSpace:
    """Room at one destination directory (``stager plan``).

    Attributes
    ----------
    dest : str
        The destination directory (concrete: ``%n`` already replaced).
    probe : str
        The nearest existing ancestor, where free space was measured.
    needs : int
        Bytes this destination receives.
    free : int
        Bytes available to this user on its filesystem.
    fs_needs : int
        Bytes all destinations on the same filesystem receive together.
    """

    dest: str
    probe: str
    needs: int
    free: int
    fs_needs: int

    @property
    def fits(self) -> bool:
        return self.fs_needs <= self.free

    @property
    def shortfall(self) -> int:
        return max(self.fs_needs - self.free, 0)


def check_space(needs: Iterable[Tuple[str, int]], reserve: int = 0) -> List[DestinationSpace]:
    """Free space for each ``(destination, bytes)``, aggregating per filesystem.

    Parameters
    ----------
    needs : iterable of (str, int)
        Destination directories and the bytes each will receive.
    reserve : int
        Bytes to leave free on every filesystem (headroom for temporary files).

    Returns
    -------
    list of DestinationSpace
        In input order.
    """
    rows = []
    per_dev: Dict[int, int] = {}
    for dest, n in needs:
        probe = existing_ancestor(dest)
        free = free_bytes(probe)
        dev = filesystem_id(probe)
        per_dev[dev] = per_dev.get(dev, 0) + n
        rows.append((dest, probe, n, free, dev))
    return [DestinationSpace(dest=d, probe=p, needs=n, free=max(free - reserve, 0),
                             fs_needs=per_dev[dev])
            for d, p, n, free, dev in rows]


@dataclass(frozen=True)
class RootNeed:
    """What one node will write under one destination root, and the room there."""

    host: str
    filesystem: int
    node: str
    root: str
    needs: int
    free: int


def shortfalls(rows: Iterable[RootNeed]) -> List[str]:
    """One message per (host, filesystem) whose roots need more than is free. Pure.

    Rows on the same host and filesystem are summed: nodes sharing one
    machine, or two blocks on one disk, compete for the same free space.
    """
    groups: Dict[Tuple[str, int], List[RootNeed]] = defaultdict(list)
    for r in rows:
        groups[(r.host, r.filesystem)].append(r)
    out = []
    for (host, _), members in groups.items():
        need = sum(m.needs for m in members)
        free = min(m.free for m in members)
        if need > free:
            where = ", ".join(f"node {m.node} -> {m.root} ({describe_size(m.needs)})"
                              for m in members[:4])
            more = f" and {len(members) - 4} more" if len(members) > 4 else ""
            out.append(f"{where}{more}: needs {describe_size(need)} on host {host} but only "
                       f"{describe_size(free)} is free (short by {describe_size(need - free)})")
    return out
