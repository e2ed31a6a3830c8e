"""Which node a task runs on: the name the stager gave that node (what ``%n`` stands for).

The runner (``python -m workflows run``) builds the job's node layout once
(:meth:`core.job.Job.from_comm`: ``--node-id``, else host names) and records each
rank's node name with :func:`set_node` before any task runs; the executors hand it
to the processes they start (the ``local`` pool's initializer, each Parsl task's
call), so a task asks :func:`this_node` instead of knowing how nodes are formed: a
flow never sees node options (as LiberTEM's analyses never see executors). No
environment variable carries it: a task cannot be told another node's name by
what it inherits.

Outside a run (a flow's ``main`` called from a test, a Parsl worker on a Slurm node),
the name follows the stager's rule for one process: ``$STAGER_NODE_ID``
(``env:SLURMD_NODENAME``: a variable holding it), else the host name
(:func:`core.nodes.resolve_node_id`).
"""
from __future__ import annotations

import os
from typing import Optional

from core.mpi.launcher import launcher_rank, launcher_size
from core.nodes import expand_node, local_node_name, resolve_node_id

__all__ = ["this_node", "on_this_node", "set_node", "worker_name"]

#: This process's node name, once the runner (or an executor's worker set-up) set it.
_NODE: Optional[str] = None


def set_node(name: Optional[str]) -> None:
    """Record this process's node name (the runner on every rank; executors in the
    processes they start). ``None`` forgets it."""
    global _NODE
    _NODE = name or None


def this_node() -> str:
    """The node this process runs on, as the stager names it."""
    if _NODE:
        return _NODE
    return local_node_name(resolve_node_id())


def on_this_node(template: str, node: Optional[str] = None) -> str:
    """``template`` with ``%n`` replaced by this process's node name (or ``node``)."""
    if "%n" not in template:
        return template
    return expand_node(template, node or this_node())


def worker_name() -> str:
    """``rank R`` or ``pid P``: which worker ran a task (for logs, not results).

    From the launcher's environment (Open MPI, PMI, PMIx): no MPI import in a task.
    """
    rank = launcher_rank()
    return f"rank {rank}" if rank is not None and (launcher_size() or 0) > 1 \
        else f"pid {os.getpid()}"
