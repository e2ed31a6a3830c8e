"""The job context: who is where in one MPI job, worked out once and passed down.

A :class:`Job` holds the communicator, how nodes were identified (one value,
``node_id``: ``host``, ``env:VAR`` or ``emulate:N``, see
:func:`core.nodes.parse_node_id`), and the node layout that follows from
it (node and leader communicators, node names, each rank's node). Build it
once per MPI job and hand it to ``stage``, ``verify``, ``clean``, ``drain``,
``receive_scans``, the leader hooks, the workflow executors and runner::

    from core.job import Job
    with Job.from_comm(comm, "emulate:2") as job:   # freed on leaving
        stager.stage(spec, job)
        stager.drain(src, dest, job)

Those functions also take a plain communicator (or nothing: ``MPI.COMM_WORLD``):
:meth:`Job.of` is the one place that turns it into a job (nodes from
``$STAGER_NODE_ID``, else host names), freed when the function returns.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from core.mpi.agree import bcast_result
from core.nodes import NodeLayout, node_layout, resolve_node_id

__all__ = ["Job", "add_node_id_arguments", "job_of"]


@dataclass(frozen=True)
class Job(NodeLayout):
    """One MPI job: its communicator, how nodes are identified, and the node layout.

    A job is its :class:`~core.nodes.NodeLayout` (this rank's node, the node and leader
    communicators, every node's name) with two more attributes; made by :meth:`from_comm`.
    Used as a context manager, a job frees its layout's communicators on leaving.

    Attributes
    ----------
    comm : mpi4py.MPI.Intracomm
    node_id : str
        How ranks form nodes (:func:`core.nodes.parse_node_id`), the same on every rank.
    """

    comm: Any = None
    node_id: str = "host"

    @classmethod
    def from_comm(cls, comm: Any = None, node_id: Optional[str] = None) -> Job:
        """Collective over `comm`: every rank must call. Resolve ``node_id`` and lay out nodes.

        Parameters
        ----------
        comm : mpi4py.MPI.Intracomm, optional
            Default ``MPI.COMM_WORLD``.
        node_id : str, optional
            How ranks form nodes (:mod:`core.nodes`). Default ``$STAGER_NODE_ID``, else
            ``host``; resolved on rank 0 and broadcast.

        Raises
        ------
        ValueError
            A ``node_id`` that does not parse or does not fit ``comm.size`` (every rank,
            before the layout's collectives).
        JobError
            ``env:VAR`` unset on some rank, or a name unusable as a directory (every rank).
        """
        if comm is None:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        nid: str = bcast_result(comm, resolve_node_id, None, node_id)
        return cls(comm=comm, node_id=nid, **vars(node_layout(comm, nid)))

    @classmethod
    @contextmanager
    def of(cls, comm_or_job: Any = None) -> Iterator[Job]:
        """Collective over the communicator unless given a job. The job to work with.

        A :class:`Job` is used as it is (and not freed); a communicator (default
        ``MPI.COMM_WORLD``) becomes :meth:`from_comm`'s job, freed on leaving.
        """
        if isinstance(comm_or_job, Job):
            yield comm_or_job
        else:
            with cls.from_comm(comm_or_job) as job:
                yield job

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    @property
    def layout(self) -> NodeLayout:
        """The node layout: the job itself."""
        return self


def add_node_id_arguments(p: argparse.ArgumentParser) -> None:
    """How ranks form nodes (``--node-id`` or its two older spellings) and ``--quiet``."""
    from core.nodes import add_node_id_flags

    add_node_id_flags(p)
    p.add_argument("--quiet", action="store_true",
                   help="do not say that a command started without mpirun/srun runs as one "
                        "rank on one node")


def job_of(args: argparse.Namespace, comm: Any) -> Any:
    """Collective over `comm`: every rank must call. The command's one job context."""
    from core.mpi.launcher import launcher_size
    from core.nodes import node_id_of

    if comm.size == 1 and launcher_size() is None and not getattr(args, "quiet", False):
        print(f"stager {getattr(args, 'command', '')}: not started by mpirun or srun: running "
              "as one rank on one node (this machine); start it with mpirun -n N (one rank "
              "or more per node) to reach every node; --quiet hides this note",
              file=sys.stderr, flush=True)
    return Job.from_comm(comm, node_id_of(args))
