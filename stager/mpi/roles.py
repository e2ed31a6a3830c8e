"""Who serves whom on a node: the one role rule of every MPI loop here. Pure (no MPI).

On every node the first ``per_node`` ranks *serve* and the node's other ranks
*work* for them, dealt round-robin over the node's servers (worker i of a node
belongs to its server ``i mod per_node``), so work and data stay on their node
(Swift/T's ADLB servers; the leader communicator's lowest rank per host).
``first`` puts one rank at the head of its node (the mpi executor's root
serves its own node wherever it sits in it).

A node with no spare rank (``per_node`` ranks or fewer) has no worker: with
``lone="serve"`` its ranks serve nobody but themselves (a stream receiver
analyses its own partitions), with ``lone="work"`` they have no server here
(``server_of`` -1) and the caller hands them to another (the mpi executor's
root serves them).

Both loops derive their roles from :func:`serve_nodes`:
:func:`streams.job.roles.assign_roles` (receivers and their workers) and
:func:`workflows.executors.mpi.roles.plan_roles` (task servers and workers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Serving", "serve_nodes"]


@dataclass(frozen=True)
class Serving:
    """The outcome of the role rule (identical on every rank).

    Attributes
    ----------
    servers : tuple of int
        Serving ranks, node by node (nodes by their lowest rank), each node's
        in its order (``first`` ahead, then by rank).
    server_of : tuple of int
        For every rank: the rank serving it; a server: itself; -1: none (a
        node without worker under ``lone="work"``).
    """

    servers: Tuple[int, ...]
    server_of: Tuple[int, ...]

    def workers_of(self, server: int) -> Tuple[int, ...]:
        """The ranks ``server`` serves, ascending (not itself)."""
        return tuple(r for r, s in enumerate(self.server_of) if s == server and r != server)


def serve_nodes(node_of: Sequence[int], per_node: int = 1, *, lone: str = "serve",
                first: Optional[int] = None, what: str = "servers") -> Serving:
    """The role rule (see the module docstring). Pure.

    Parameters
    ----------
    node_of : sequence of int
        Node index of every rank, by rank.
    per_node : int
        Serving ranks on every node with a spare rank.
    lone : {"serve", "work"}
        What the ranks of a node with no spare rank do.
    first : int, optional
        A rank that serves its node ahead of the others (always, even alone).
    what : str
        What the serving ranks are called, in messages.

    Raises
    ------
    ValueError
        ``per_node`` < 1, an unknown ``lone``, or (``lone="serve"``) a node with
        fewer than ``per_node`` ranks.
    """
    if not isinstance(per_node, int) or per_node < 1:
        raise ValueError(f"per_node must be a positive integer, got {per_node!r}")
    if lone not in ("serve", "work"):
        raise ValueError(f"lone={lone!r}: expected 'serve' or 'work'")
    by_node: Dict[int, List[int]] = {}
    for rank, n in enumerate(node_of):
        by_node.setdefault(n, []).append(rank)
    servers: List[int] = []
    server_of = [-1] * len(node_of)
    for ranks in sorted(by_node.values(), key=lambda rs: rs[0]):
        if first in ranks:
            ranks = [first] + [r for r in ranks if r != first]
        elif len(ranks) <= per_node and lone == "work":
            continue   # no worker here: the caller serves these ranks
        if len(ranks) < per_node and first not in ranks:
            raise ValueError(f"{per_node} {what} per node, but node {node_of[ranks[0]]} has "
                             f"only {len(ranks)} rank(s): start more ranks per node or lower "
                             f"the {what} per node")
        mine = ranks[:per_node]
        for rk in mine:
            server_of[rk] = rk
        servers.extend(mine)
        for i, rk in enumerate(ranks[per_node:]):
            server_of[rk] = mine[i % len(mine)]
    return Serving(tuple(servers), tuple(server_of))
