"""Who serves whom: the one role rule and the one ``Roles`` of the project's MPI loops. Pure.

On every node the first ``per_node`` ranks *serve*; the node's other ranks
*work* for them, dealt round-robin (worker i of a node to its server
``i mod per_node``), so work and data stay on their node (Swift/T's ADLB
servers). A stream job's receivers (:func:`streams.job.roles.assign_roles`)
and the mpi executor's task servers (:func:`workflows.executors.mpi.roles.plan_roles`)
both follow it, and both describe the outcome with one :class:`Roles`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Roles", "serve_nodes", "workers_of"]


@dataclass(frozen=True)
class Roles:
    """Who serves whom in one MPI loop, identical on every rank.

    ``server_of``: per rank, the rank serving it (a server: itself); ``servers``:
    the serving ranks by server index (the executor's root first; a stream job's
    receivers in rank order, receiver r getting the producers' ``frame mod R``);
    ``node_of``/``names``: node index of every rank, node names by index (empty
    if unused); ``root``: the rank owning the work (the executor's; a stream job
    has none); ``mode``: ``nodes`` (the role rule) or ``central`` (the root serves all).
    """

    server_of: Tuple[int, ...]
    servers: Tuple[int, ...]
    node_of: Tuple[int, ...]
    names: Tuple[str, ...] = ()
    root: Optional[int] = None
    mode: str = "nodes"

    @property
    def size(self) -> int:
        return len(self.node_of)

    def role(self, rank: int) -> str:
        """``root``, ``server`` or ``worker``."""
        if rank == self.root:
            return "root"
        return "server" if self.server_of[rank] == rank else "worker"

    def index(self, rank: int) -> Optional[int]:
        """Server index of ``rank`` (its place in :attr:`servers`), None for a worker."""
        return self.servers.index(rank) if self.server_of[rank] == rank else None

    def workers_of(self, server: int) -> Tuple[int, ...]:
        """Ranks served by ``server`` (not itself), ascending."""
        return workers_of(self.server_of, server)

    @property
    def workers(self) -> Tuple[int, ...]:
        """Every rank that serves none, ascending."""
        return tuple(r for r, s in enumerate(self.server_of) if s != r)

    def server_of_node(self) -> Dict[int, int]:
        """Node index -> the server whose workers are on it (nodes without workers: absent)."""
        out: Dict[int, int] = {}
        for r, s in enumerate(self.server_of):
            if s != r:
                out.setdefault(self.node_of[r], s)
        return out

    def nodes_with_workers(self) -> List[int]:
        return sorted(self.server_of_node())

    def describe(self, what: str = "server") -> str:
        """One line: every server (``what``: its name in the loop) with its node and workers."""
        return "; ".join(f"{what} {i}: rank {rk} (node {self.node_of[rk]}), workers "
                         f"{list(self.workers_of(rk)) or 'none'}"
                         for i, rk in enumerate(self.servers))


def serve_nodes(node_of: Sequence[int], per_node: int = 1, *, lone: str = "serve",
                first: Optional[int] = None, what: str = "servers") -> Tuple[int, ...]:
    """The role rule (see the module docstring): the rank serving each rank, by rank
    (a server: itself; -1: none, see ``lone``). Pure.

    Parameters
    ----------
    node_of : sequence of int
        Node index of every rank, by rank.
    per_node : int
        Serving ranks on every node with a spare rank.
    lone : {"serve", "work"}
        A node with no spare rank has no worker: its ranks serve themselves
        (``serve``: a receiver analyses its own partitions) or have no server
        (``work``: the caller hands them to one, the executor's root).
    first : int, optional
        A rank that serves its node ahead of the others, even alone (the
        executor's root).
    what : str
        What the serving ranks are called, in messages.

    Raises
    ------
    ValueError
        ``per_node`` < 1, an unknown ``lone``, or (``lone="serve"``) a node with
        fewer than ``per_node`` ranks.
    """
    if not isinstance(per_node, int) or per_node < 1:
        raise ValueError(f"{what} per node must be a positive integer, got {per_node!r}")
    if lone not in ("serve", "work"):
        raise ValueError(f"lone={lone!r}: expected 'serve' or 'work'")
    by_node: Dict[int, List[int]] = {}
    for rank, n in enumerate(node_of):
        by_node.setdefault(n, []).append(rank)
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
        for i, rk in enumerate(ranks[per_node:]):
            server_of[rk] = mine[i % len(mine)]
    return tuple(server_of)


def workers_of(server_of: Sequence[int], server: int) -> Tuple[int, ...]:
    """The ranks ``server`` serves (not itself), ascending."""
    return tuple(r for r, s in enumerate(server_of) if s == server and r != server)
