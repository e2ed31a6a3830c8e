"""``--verify-source``: read every source again after staging and compare it with its copies.

The transfer already checks each piece against the digest its reader computed,
and each source's size, mtime, ctime and inode before and after it is read. What
that cannot see is a source rewritten in place with the same size while its
mtime is set back and its ctime happens to match -- or a filesystem that returns
different bytes to two reads. For users who need that certainty, every leader
re-reads a share of the sources (each file once in the whole job), and every
leader compares the checksums with those of its own copies. A copy that differs
is removed and dropped from the record (a re-run stages it again), and the run
fails naming the file.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence

from stager.errors import TransferError
from core import checksum

__all__ = ["verify_sources"]


def verify_sources(lc: Any, files: Sequence[int], units: Sequence[Any],
                   recs: Any) -> Dict[str, Any]:
    """Collective over `lc` (the leader communicator): every leader must call.

    Parameters
    ----------
    lc : mpi4py.MPI.Comm
    files : sequence of int
        Indices (into ``units``) of the whole-file units to check; identical everywhere.
    units : sequence
        ``(kind, index, unit)`` of every planned output.
    recs : stager.staging.commits.NodeRecords
        This leader's records (checksums of its copies).

    Returns
    -------
    dict
        ``{"files": n, "bytes": b, "seconds": s}`` of this leader's re-reads.

    Raises
    ------
    TransferError
        A source differs from its copies (those copies are removed), or cannot be read.
    """
    t0 = time.perf_counter()
    mine: Dict[int, str] = {}
    nbytes = 0
    for pos, g in enumerate(files):
        if pos % lc.size != lc.rank:
            continue
        u = units[g][2]
        try:
            mine[g] = checksum.file_hexdigest(u.source)
            nbytes += u.size
        except OSError as e:
            mine[g] = f"!cannot read it again: {e.strerror}"
    found: Dict[int, str] = {}
    for part in lc.allgather(mine):
        found.update(part)
    bad: List[str] = []
    for g, h in sorted(found.items()):
        src = units[g][2].source
        if h.startswith("!"):
            bad.append(f"{src} ({h[1:]})")
            continue
        if not recs.writes(g) or g not in recs.done:
            continue
        have = recs.checksum_of(g) or checksum.file_hexdigest(recs.dests[g])
        if have != h:
            recs.discard(g)
            bad.append(f"{src} (its checksum now differs from the copy staged on node "
                       f"{recs.node}; that copy was removed)")
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise TransferError(f"--verify-source: {len(bad)} source(s) changed while being "
                            f"staged or cannot be read again: {shown}; stage again once the "
                            "data is stable")
    return {"files": len(mine), "bytes": nbytes, "seconds": time.perf_counter() - t0}
