"""Which node a task runs on: the name the stager gave that node (what ``%n`` stands for).

The runner (``python -m workflows run``) builds the job's node layout once
(:meth:`core.job.Job.from_comm`: ``--node-id``, else host names), and exports
each rank's node name as ``WORKFLOWS_NODE`` before any task runs. Worker ranks,
processes forked from them (the ``local`` executor) and command tasks inherit it, so a task asks
:func:`this_node` instead of knowing how nodes are formed: a flow never sees
node options (as LiberTEM's analyses never see executors).

Outside a run (a flow's ``main`` called from a test), the name follows the
same rule for one process: ``WORKFLOWS_NODE_ID_ENV`` names a variable holding
it, else the host name.
"""
from __future__ import annotations

import os
from typing import Optional

from core.nodes import local_node_name
from stager.planning.plan import expand_node

__all__ = ["ENV", "this_node", "on_this_node", "set_node", "worker_name"]

#: Environment variable holding the node name of this process.
ENV = "WORKFLOWS_NODE"
#: Optional: the name of a variable that identifies the node (e.g. SLURMD_NODENAME),
#: for processes started outside the runner (Parsl workers on a Slurm node).
ENV_ID = "WORKFLOWS_NODE_ID_ENV"


def set_node(name: str) -> None:
    """Record this process's node name (the runner calls it on every rank)."""
    os.environ[ENV] = name


def this_node() -> str:
    """The node this process runs on, as the stager names it."""
    name = os.environ.get(ENV)
    if name:
        return name
    var = os.environ.get(ENV_ID)
    return local_node_name(f"env:{var}" if var else "host")


def on_this_node(template: str, node: Optional[str] = None) -> str:
    """``template`` with ``%n`` replaced by this process's node name (or ``node``)."""
    if "%n" not in template:
        return template
    return expand_node(template, node or this_node())


def worker_name() -> str:
    """``rank R`` or ``pid P``: which worker ran a task (for logs, not results).

    From the launcher's environment (Open MPI, PMI, PMIx): no MPI import in a task.
    """
    for r, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                    ("PMIX_RANK", "PMIX_SIZE")):
        if r in os.environ and size in os.environ and int(os.environ[size]) > 1:
            return f"rank {os.environ[r]}"
    return f"pid {os.getpid()}"
