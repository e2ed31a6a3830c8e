"""Who does what in a receiving job: receivers, workers, the merge tree. Pure (no MPI).

The project's role rule (:func:`core.mpi.roles.serve_nodes`) over the job's nodes:
the first ``receivers_per_node`` ranks of a node are **receivers** (each binds one
socket and assembles the frames routed to it), its other ranks **workers** of its
receivers, round-robin, analysing the partitions on the node that holds them. A
node with no spare rank processes its partitions on the receiver.

Receiver index r (the producers' ``frame mod R``) follows the rank order of the
receivers (``Roles.servers``), so ``receivers[r]`` in the rendezvous file is receiver r.

The merge of the partial results is the project's one fixed binary tree over
ranks in order (:func:`core.mpi.tree.tree_schedule`): ``merge(lower, higher)``
at every step, so an analysis whose merge is associative but not commutative,
or not exactly associative (floating-point sums), gives the same bits at every run -- as
``workflows.reduce_tree(ordered=True)`` does on the staged path.

Partition size: LiberTEM sizes partitions for roughly 100 ms of work;
:func:`partition_frames` does the same from a frame rate when one is known, else
from a byte target, within the bounds the assembler's memory allows -- and never
more than a :data:`PARTIALS`-th of what a receiver gets of the scan: a partition is
what a live partial result is made of (a worker analyses it whole), so a small scan
in a 16 MiB partition would show nothing until its end.
"""
from __future__ import annotations

from typing import Optional, Sequence

from core.mpi.roles import Roles, serve_nodes

__all__ = ["Roles", "assign_roles", "partition_frames",
           "DEFAULT_PARTITION_BYTES", "DEFAULT_PARTITION_SECONDS", "PARTIALS"]

#: Byte target of one partition when no frame rate is given (16 MiB: 50 frames of
#: 576x576 uint16; at NCEM's 7.2 GB/s over 8 receivers, ~20 ms of data each).
DEFAULT_PARTITION_BYTES = 16 << 20
#: LiberTEM's partition length in time.
DEFAULT_PARTITION_SECONDS = 0.1
#: A scan gives each receiver at least this many partitions (when it has the frames):
#: tens of live partial results, whatever the byte target.
PARTIALS = 32


def assign_roles(node_of_rank: Sequence[int], receivers_per_node: int = 1) -> Roles:
    """Roles from the node index of every rank (``NodeLayout`` numbering). Pure.

    Parameters
    ----------
    node_of_rank : sequence of int
        Node index of each rank, by rank (nodes numbered by their lowest rank).
    receivers_per_node : int
        Receivers on every node (at most the node's ranks).

    Raises
    ------
    ValueError
        ``receivers_per_node`` < 1 or more than the ranks of some node.
    """
    server_of = serve_nodes(node_of_rank, receivers_per_node, what="receivers")
    receivers = tuple(rk for rk, s in enumerate(server_of) if s == rk)   # in rank order
    return Roles(server_of, receivers, tuple(node_of_rank))


def partition_frames(frame_bytes: int, receivers: int = 1, *, rate: Optional[float] = None,
                     seconds: float = DEFAULT_PARTITION_SECONDS,
                     target_bytes: int = DEFAULT_PARTITION_BYTES,
                     frames: Optional[int] = None) -> int:
    """K, frames per partition, sized like LiberTEM's ~100 ms partitions. Pure.

    With a frame rate (frames/s over the whole detector), K is the frames one
    receiver gets in ``seconds``: ``rate * seconds / receivers``. Without one, K is
    ``target_bytes // frame_bytes``. Either way at least 1, and at most a
    :data:`PARTIALS`-th of the frames one receiver gets in the scan (when ``frames``
    is known), so that the scan's live partial results grow while it runs.
    """
    if frame_bytes < 1 or receivers < 1:
        raise ValueError("frame_bytes and receivers must be positive")
    if rate is not None:
        if rate <= 0 or seconds <= 0:
            raise ValueError("rate and seconds must be positive")
        k = int(rate * seconds / receivers)
    else:
        k = target_bytes // frame_bytes
    if frames is not None:
        k = min(k, -(-frames // (receivers * PARTIALS)))
    return max(1, k)
