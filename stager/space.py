"""Free space at destinations, aggregated per filesystem.

Several blocks may land on one filesystem (``/tmp`` and ``/tmp/bulk``): room is
checked against what all of them need together. Used by ``stager plan`` on
one machine and by the stager's capacity check on every node leader.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Tuple

__all__ = ["DestinationSpace", "existing_ancestor", "check_space"]


@dataclass(frozen=True)
class DestinationSpace:
    """Room at one destination directory.

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


def existing_ancestor(path: str) -> str:
    """``path`` itself if it exists, else its nearest existing parent."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


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
        st = os.statvfs(probe)
        dev = os.stat(probe).st_dev
        per_dev[dev] = per_dev.get(dev, 0) + n
        rows.append((dest, probe, n, st.f_bavail * st.f_frsize, dev))
    return [DestinationSpace(dest=d, probe=p, needs=n, free=max(free - reserve, 0),
                             fs_needs=per_dev[dev])
            for d, p, n, free, dev in rows]
