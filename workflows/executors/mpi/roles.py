"""Who does what in the mpi executor: the root, task servers, workers -- from the node layout.

Pure (``plan_roles``, by the project's role rule :func:`core.mpi.roles.serve_nodes`,
from the job's node layout). Two dispatch modes:

* ``central`` -- the root serves every other rank (one dispatcher).
* ``nodes`` -- one task server per node (Swift/T ADLB's servers): the lowest
  rank of a node serves its other ranks; the root serves its own node and the
  ranks alone on theirs, and feeds the other servers in batches. With one
  rank per node, ``nodes`` is ``central``.

A node with no worker (the root alone on its node) cannot take hard-placed
tasks; soft-placed ones run elsewhere.
"""

from __future__ import annotations

from typing import Sequence

from core.mpi.roles import Roles, serve_nodes

__all__ = ["Roles", "plan_roles", "MODES"]

MODES = ("central", "nodes")


def plan_roles(node_of: Sequence[int], names: Sequence[str], root: int, mode: str) -> Roles:
    """The dispatch topology for ranks on ``node_of`` (node index per rank): the
    root and the serving ranks serve themselves, the root first in ``servers``.

    Raises
    ------
    ValueError
        Unknown mode or root out of range.
    """
    if mode not in MODES:
        raise ValueError(f"dispatch mode {mode!r}: expected one of {', '.join(MODES)}")
    size = len(node_of)
    if not 0 <= root < size:
        raise ValueError(f"root={root}: expecting root in range({size})")
    # central: every rank on one node, served by the root; nodes: the role rule, the
    # root serving its own node and the ranks of nodes with no spare rank
    one = [0] * size if mode == "central" else node_of
    rule = serve_nodes(one, 1, lone="work", first=root)
    server_of = tuple(root if s < 0 else s for s in rule)
    servers = (root,) + tuple(r for r, s in enumerate(rule) if s == r and r != root)
    return Roles(server_of, servers, tuple(node_of), tuple(names), root, mode)
