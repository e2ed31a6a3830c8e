"""The capacity check: before the first byte is written, every node has room for its copies.

Collective over the communicator of a staging run. Each leader measures free
space at the destination roots it will write (sizes rounded to whole blocks),
one ``allgather`` brings every leader's rows to every rank, and the pure rule
:func:`stager.nodelocal.space.shortfalls` groups them by (host, filesystem):
nodes sharing one machine, or two blocks on one disk, compete for the
same free space.
"""
from __future__ import annotations

import socket
from typing import Any, Iterable, List, Mapping

from stager.errors import KEPT, CapacityError
from core.mpi.agree import agreed
from core.nodes import NodeLayout
from stager.nodelocal.space import (RootNeed, allocated, block_size, filesystem_id,
                                    free_bytes, shortfalls)

__all__ = ["check_capacity"]


def check_capacity(comm: Any, layout: NodeLayout, sizes: Mapping[str, Iterable[int]],
                   what: str = "") -> None:
    """Collective over `comm`: every rank must call. Fail everywhere if a filesystem lacks room.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    layout : NodeLayout
        This rank's node; only leaders measure.
    sizes : mapping of str to iterable of int
        On a leader: destination root -> sizes of the outputs this node will
        write there (each rounded up to whole blocks here); ignored elsewhere.
    what : str
        What is being staged, for the message.

    Raises
    ------
    CapacityError
        On every rank, naming each short node, destination and shortfall.
    """
    rows: List[RootNeed] = []
    with agreed(comm, "checking free space", base=KEPT, default=CapacityError, node=layout.name):
        if layout.is_leader:
            host = socket.gethostname()
            for root, files in sizes.items():
                bs = block_size(root)
                n = sum(allocated(size, bs) for size in files)
                rows.append(RootNeed(host, filesystem_id(root), layout.name, root, n,
                                     free_bytes(root)))
    short = shortfalls(row for part in comm.allgather(rows) for row in part)
    if short:
        subject = f"not enough space for {what}" if what else "not enough space"
        raise CapacityError(f"{subject}, nothing was written: " + "; ".join(short)
                            + "; free space or stage to a larger filesystem")
