"""A Parsl configuration that runs workflow tasks on Slurm nodes (SlurmProvider + HTEX)::

    from workflows.executors.parsl import ParslExecutor
    from workflows.executors.parsl_slurm import slurm_htex_config
    ex = ParslExecutor(config=slurm_htex_config(nodes=4, run_dir="runinfo"))

Parsl's own classes, nothing re-implemented (``slurm/README.md``, "Parsl on Slurm"):
one block of ``nodes`` nodes from ``sbatch`` (``exclusive=False``, so the emulated nodes
of the local test cluster, which share one host, can be allocated together); one
worker pool per node started by ``srun``, so each sees its node's ``SLURMD_NODENAME``,
the node identity the stager uses, and tasks find the copies staged under ``%n``;
``worker_init`` activates this interpreter's virtual environment and puts the source
tree on ``PYTHONPATH``. The interchange listens on ``address`` (``127.0.0.1`` for the
local cluster; on a real one, the login node's address the compute nodes reach).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from .parsl import htex_config

__all__ = ["slurm_htex_config", "venv_worker_init"]

REPO = Path(__file__).resolve().parents[2]  # the source tree (workflows/executors/ -> repo)


def venv_worker_init(python: str | None = None, extra: str = "") -> str:
    """Shell lines that make a worker use this interpreter's venv and this source tree.

    Pure (string building). A venv is recognised by ``pyvenv.cfg`` next to its
    ``bin/``; without one, the interpreter's directory is put first on PATH.
    """
    python = python or sys.executable
    bindir = os.path.dirname(os.path.abspath(python))
    venv = os.path.dirname(bindir)
    lines = []
    is_venv = os.path.isfile(os.path.join(venv, "pyvenv.cfg"))
    if is_venv and os.path.isfile(os.path.join(bindir, "activate")):
        lines.append(f"source {bindir}/activate")
    else:
        lines.append(f"export PATH={bindir}:$PATH")
    lines.append(f"export PYTHONPATH={REPO}${{PYTHONPATH:+:$PYTHONPATH}}")
    # tasks ask workflows.this_node(): on a Slurm node its name is SLURMD_NODENAME
    lines.append("export STAGER_NODE_ID=env:SLURMD_NODENAME")
    if extra:
        lines.append(extra)
    return "; ".join(lines)


def slurm_htex_config(nodes: int, run_dir: str, *, workers_per_node: int = 1,
                      walltime: str = "00:10:00", partition: str | None = None,
                      address: str = "127.0.0.1", worker_init: str | None = None,
                      scheduler_options: str = "", label: str = "htex_slurm") -> Any:
    """A Parsl ``Config``: one HighThroughputExecutor block of ``nodes`` Slurm nodes.

    Parameters
    ----------
    nodes : int
        Nodes per block (the whole allocation; one worker pool per node).
    run_dir : str
        Parsl's run directory (logs, submit scripts); must be on a filesystem
        the nodes can see.
    workers_per_node : int
        Workers in each node's pool.
    walltime : str
        Block wall-clock limit, ``HH:MM:SS``.
    partition : str, optional
        Slurm partition (default: the cluster's default).
    address : str
        Address the interchange listens on; workers connect to it.
    worker_init : str, optional
        Shell run before each pool starts (default :func:`venv_worker_init`).
    scheduler_options : str
        Extra ``#SBATCH`` lines.
    label : str
        Executor label.

    Raises
    ------
    ValueError
        ``nodes`` or ``workers_per_node`` below 1.
    """
    for what, n in (("nodes", nodes), ("workers_per_node", workers_per_node)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"{what} must be a positive integer, got {n!r}")
    from parsl.launchers import SrunLauncher
    from parsl.providers import SlurmProvider

    provider = SlurmProvider(
        partition=partition, nodes_per_block=nodes, init_blocks=1, min_blocks=1, max_blocks=1,
        walltime=walltime, exclusive=False, scheduler_options=scheduler_options,
        worker_init=venv_worker_init() if worker_init is None else worker_init,
        launcher=SrunLauncher(), cmd_timeout=30)
    return htex_config(provider, workers_per_node, run_dir, label, address, heartbeat_threshold=20)
