"""Node identity and the leader communicator (one rank per node).

A *node* is a set of ranks that share node-local storage; its *leader* is its
lowest rank in ``comm`` (as in Swift/T's leader communicator). Leaders do all
the staging I/O; the other ranks only take part in agreement.

Three ways to decide which ranks form a node:

* default: ``comm.Split_type(MPI.COMM_TYPE_SHARED)``, named by host name;
* ``emulate_nodes=K``: contiguous blocks of ranks become ``node0`` ...
  ``node{K-1}`` (block ``i`` holds ranks ``[i*size//K, (i+1)*size//K)``), for
  one-machine tests and benchmarks;
* ``node_id_env=VAR``: ranks with the same value of environment variable
  ``VAR`` form a node named by that value (e.g. ``SLURMD_NODENAME`` in the
  local four-node Slurm cluster, where every rank has the same host name).

Nodes are numbered by their leader's rank. Use::

    from stager.nodes import node_layout
    layout = node_layout(comm, emulate_nodes=2)
    if layout.is_leader:
        layout.leader_comm.Barrier()   # one rank per node
    layout.free()

The assignment rules are pure functions (:func:`emulated_ids`,
:func:`assign_nodes`) tested without MPI.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from stager.errors import StagerError, TransferError

__all__ = ["NodeLayout", "node_layout", "emulated_ids", "assign_nodes", "check_node_name",
           "on_node"]


@dataclass(frozen=True)
class NodeLayout:
    """Where this rank sits: its node and, on leaders, the leader communicator.

    Attributes
    ----------
    name : str
        Node name (substituted for ``%n`` in destinations).
    index : int
        Node number, ``0 <= index < n_nodes``, ordered by leader rank.
    n_nodes : int
        Number of nodes in ``comm``.
    names : tuple of str
        Every node's name, by index (the same on every rank).
    node_comm : mpi4py.MPI.Comm
        The ranks of this node (leader is rank 0 in it).
    leader_comm : mpi4py.MPI.Comm or None
        One rank per node, rank ``i`` being node ``i``'s leader; ``None`` on
        non-leaders.
    is_leader : bool
        This rank is its node's leader.
    leader_ranks : tuple of int
        Rank in ``comm`` of each node's leader, by node index.
    """

    name: str
    index: int
    n_nodes: int
    names: Tuple[str, ...]
    node_comm: Any
    leader_comm: Optional[Any]
    is_leader: bool
    leader_ranks: Tuple[int, ...]

    def free(self) -> None:
        """Free the communicators this layout created (call once, on every rank)."""
        self.node_comm.Free()
        if self.leader_comm is not None:
            self.leader_comm.Free()


def emulated_ids(size: int, k: int) -> List[str]:
    """Node name of each of ``size`` ranks split into ``k`` contiguous blocks.

    >>> emulated_ids(4, 2)
    ['node0', 'node0', 'node1', 'node1']
    """
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= size:
        raise ValueError(f"emulate_nodes must be an integer in 1..{size} (the number of ranks), "
                         f"got {k!r}")
    # rank r is in block i iff i*size//k <= r < (i+1)*size//k
    return [f"node{_block_of(r, size, k)}" for r in range(size)]


def _block_of(rank: int, size: int, k: int) -> int:
    i = (rank * k) // size
    while (i + 1) * size // k <= rank:
        i += 1
    while i * size // k > rank:
        i -= 1
    return i


def assign_nodes(ids: Sequence[str]) -> Tuple[List[int], List[str], List[int]]:
    """Group ranks by node id.

    Parameters
    ----------
    ids : sequence of str
        Node id of each rank, by rank.

    Returns
    -------
    index_of_rank : list of int
        Node index of each rank (nodes numbered by their lowest rank).
    names : list of str
        Node name of each index.
    leader_ranks : list of int
        Lowest rank of each node.
    """
    first: dict = {}
    for r, i in enumerate(ids):
        first.setdefault(i, r)
    names = sorted(first, key=first.__getitem__)
    index = {n: k for k, n in enumerate(names)}
    return [index[i] for i in ids], names, [first[n] for n in names]


def check_node_name(name: str) -> str:
    """A node name must be usable as one path component (it replaces ``%n``)."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise StagerError(
            f"node name {name!r} cannot be used as a directory name (it replaces %n); "
            "use a node id variable whose values are plain names")
    return name


def node_layout(comm: Any, emulate_nodes: Optional[int] = None,
                node_id_env: Optional[str] = None) -> NodeLayout:
    """Collective over `comm`: every rank must call. Decide nodes and leaders.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    emulate_nodes : int, optional
        Split ranks into this many contiguous blocks (``1 <= K <= comm.size``).
    node_id_env : str, optional
        Name of an environment variable whose value identifies the node.
        Mutually exclusive with ``emulate_nodes``.

    Returns
    -------
    NodeLayout

    Raises
    ------
    ValueError
        Bad arguments (raised before any collective, identically on all ranks).
    StagerError
        ``node_id_env`` unset on some rank, or a node name unusable as a path
        component (raised on every rank).
    """
    from mpi4py import MPI

    if emulate_nodes is not None and node_id_env is not None:
        raise ValueError("use either emulate_nodes or node_id_env, not both")
    if emulate_nodes is not None:
        ids: List[Optional[str]] = list(emulated_ids(comm.size, emulate_nodes))
    elif node_id_env is not None:
        if not node_id_env or "=" in node_id_env:
            raise ValueError("node_id_env must be an environment variable name, "
                             f"got {node_id_env!r}")
        ids = comm.allgather(os.environ.get(node_id_env) or None)
        unset = [r for r, v in enumerate(ids) if v is None]
        if unset:
            raise StagerError(
                f"environment variable {node_id_env} is unset or empty on rank(s) "
                f"{', '.join(map(str, unset[:8]))}{' ...' if len(unset) > 8 else ''}; "
                "set it on every rank or drop --node-id-env")
    else:
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        leader_rank = shared.bcast(comm.rank, root=0)
        shared.Free()
        # Host names may repeat across shared-memory groups only in odd set-ups;
        # the leader's rank keeps the id unique, the host name keeps it readable.
        hosts = comm.allgather((socket.gethostname(), leader_rank))
        counts: dict = {}
        for h, _lr in dict.fromkeys(hosts):
            counts[h] = counts.get(h, 0) + 1
        ids = [h if counts[h] == 1 else f"{h}-{lr}" for h, lr in hosts]

    idx, names, leaders = assign_nodes([str(i) for i in ids])
    bad = [n for n in names if not _valid(n)]
    if bad:
        check_node_name(bad[0])  # raises on every rank (names are identical everywhere)
    my = idx[comm.rank]
    node_comm = comm.Split(my, key=comm.rank)
    is_leader = leaders[my] == comm.rank
    lc = comm.Split(0 if is_leader else MPI.UNDEFINED, key=comm.rank)
    leader_comm = None if lc == MPI.COMM_NULL else lc
    return NodeLayout(name=names[my], index=my, n_nodes=len(names), names=tuple(names),
                      node_comm=node_comm, leader_comm=leader_comm, is_leader=is_leader,
                      leader_ranks=tuple(leaders))


def _valid(name: str) -> bool:
    try:
        check_node_name(name)
        return True
    except StagerError:
        return False


def on_node(layout: NodeLayout, e: BaseException) -> BaseException:
    """``e`` with this node's name in front, ready for :func:`stager.agree.agree`.

    Stager errors keep their class; anything else (an ``OSError``) becomes a
    :class:`~stager.errors.TransferError`. The original is kept as ``__cause__``.
    """
    from stager.agree import describe

    msg = f"node {layout.name}: {describe(e)}"
    out: BaseException = type(e)(msg) if isinstance(e, StagerError) else TransferError(msg)
    out.__cause__ = e
    return out
