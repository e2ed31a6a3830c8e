"""Which destination roots a node holds for a spec, and the set-up verify and clean share."""
from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from stager.mpi.agree import bcast_result
from stager.mpi.nodes import NodeLayout, check_node_options, node_layout
from stager.options import resolve_options
from stager.planning.api import load
from stager.planning.plan import expand_node

__all__ = ["node_roots", "open_roots"]


def node_roots(templates: List[str], node: str) -> List[str]:
    """Distinct concrete destination roots on ``node``, in spec order. Pure."""
    return list(dict.fromkeys(os.path.normpath(expand_node(t, node)) for t in templates))


def _templates(spec: Any) -> List[str]:
    return [b.dest for b in load(spec).blocks]  # a Spec's or a Plan's blocks


def _node_options(emulate_nodes: Optional[int], node_id_env: Optional[str]) -> Tuple[Any, Any]:
    opts = resolve_options(emulate_nodes=emulate_nodes, node_id_env=node_id_env)
    return opts.emulate_nodes, opts.node_id_env


def open_roots(spec: Any, comm: Any, emulate_nodes: Optional[int],
               node_id_env: Optional[str]) -> Tuple[Any, List[str], NodeLayout]:
    """Collective over `comm`: every rank must call. The set-up ``verify`` and ``clean`` share.

    Rank 0 resolves the node options (keyword > ``STAGER_*`` environment) and
    reads the spec's destination templates (no globbing: ``verify`` and
    ``clean`` work from the records, not from the sources); every rank gets
    both, then the node layout is built. Returns ``(comm, this node's roots,
    layout)``; the caller frees the layout.
    """
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    emulate, env_var = bcast_result(comm, _node_options, emulate_nodes, node_id_env)
    check_node_options(comm.size, emulate, env_var)
    templates = bcast_result(comm, _templates, spec)
    layout = node_layout(comm, emulate, env_var)
    return comm, node_roots(templates, layout.name), layout
