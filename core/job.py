"""The job context: who is where in one MPI job, worked out once and passed down.

A :class:`Job` holds the communicator, how nodes were identified (one value,
``node_id``: ``host``, ``env:VAR`` or ``emulate:N``, see
:func:`core.nodes.parse_node_id`), and the node layout that follows from
it (node and leader communicators, node names, each rank's node). Build it
once per MPI job and hand it to ``stage``, ``verify``, ``clean``, ``drain``,
``receive_scans``, the workflow executors and runner::

    from core.job import Job
    job = Job.from_comm(comm, node_id="emulate:2")
    stager.stage(spec, job=job)
    stager.drain(src, dest, job=job)
    job.free()

Each of those functions still takes ``comm`` and the older node keywords
(``emulate_nodes=``, ``node_id_env=``): then it builds a job itself
(:func:`job_for`) and frees it when done.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Tuple

from core.mpi.agree import bcast_result
from core.nodes import NodeLayout, node_id_of, node_layout, resolve_node_id, split_node_id

__all__ = ["Job", "job_for", "acquire_job", "comm_and_job", "NODE_KEYWORDS"]

#: The keywords that say how nodes are identified (the older two map onto ``node_id``).
NODE_KEYWORDS = ("node_id", "emulate_nodes", "node_id_env")


@dataclass(frozen=True)
class Job:
    """One MPI job: its communicator, how nodes are identified, and the node layout.

    Attributes
    ----------
    comm : mpi4py.MPI.Intracomm
    node_id : str
        ``host``, ``env:VAR`` or ``emulate:N`` (the same on every rank).
    layout : NodeLayout
        This rank's node, the node and leader communicators, every node's name.
    """

    comm: Any
    node_id: str
    layout: NodeLayout

    @classmethod
    def from_comm(cls, comm: Any = None, node_id: Optional[str] = None, *,
                  emulate_nodes: Optional[int] = None,
                  node_id_env: Optional[str] = None) -> Job:
        """Collective over `comm`: every rank must call. Resolve ``node_id`` and lay out nodes.

        Parameters
        ----------
        comm : mpi4py.MPI.Intracomm, optional
            Default ``MPI.COMM_WORLD``.
        node_id : str, optional
            ``host`` (ranks sharing memory, named by host name), ``env:VAR``
            (ranks with the same value of ``VAR``) or ``emulate:N`` (``N``
            contiguous blocks of ranks). Default ``$STAGER_NODE_ID``, else ``host``;
            resolved on rank 0 and broadcast.
        emulate_nodes, node_id_env : optional
            The older spelling of ``emulate:N`` and ``env:VAR``.

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
        nid: str = bcast_result(comm, resolve_node_id, None, node_id, emulate_nodes,
                                node_id_env)
        emulate, env_var = split_node_id(nid)
        return cls(comm, nid, node_layout(comm, emulate_nodes=emulate, node_id_env=env_var))

    # -- the layout, read through ------------------------------------------------------
    @property
    def name(self) -> str:
        """This rank's node name (what ``%n`` stands for)."""
        return self.layout.name

    @property
    def index(self) -> int:
        return self.layout.index

    @property
    def n_nodes(self) -> int:
        return self.layout.n_nodes

    @property
    def names(self) -> Tuple[str, ...]:
        return self.layout.names

    @property
    def node_of(self) -> Tuple[int, ...]:
        """Node index of every rank of ``comm``, by rank."""
        return self.layout.node_of

    @property
    def is_leader(self) -> bool:
        return self.layout.is_leader

    @property
    def node_comm(self) -> Any:
        return self.layout.node_comm

    @property
    def leader_comm(self) -> Any:
        return self.layout.leader_comm

    @property
    def leader_ranks(self) -> Tuple[int, ...]:
        return self.layout.leader_ranks

    def free(self) -> None:
        """Free the layout's communicators (call once, on every rank)."""
        self.layout.free()


def comm_and_job(comm: Any = None, job: Optional[Job] = None) -> Tuple[Any, Optional[Job]]:
    """``(comm, job)`` of a public function's arguments: ``comm`` may be a :class:`Job`;
    the communicator defaults to ``job.comm``, else ``MPI.COMM_WORLD``. Local."""
    if isinstance(comm, Job):
        job, comm = (comm, None) if job is None else (job, comm)
    if comm is None:
        if job is not None:
            return job.comm, job
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    return comm, job


def _congruent(a: Any, b: Any) -> bool:
    """Same ranks in the same order (``b`` may be a ``Dup`` of ``a``). Local."""
    from mpi4py import MPI

    return MPI.Comm.Compare(a, b) in (MPI.IDENT, MPI.CONGRUENT)


def acquire_job(comm: Any = None, job: Optional[Job] = None, *, node_id: Optional[str] = None,
                emulate_nodes: Optional[int] = None,
                node_id_env: Optional[str] = None) -> Tuple[Job, bool]:
    """Collective over `comm` unless ``job`` is given. ``(job, made_here)``.

    The caller's ``job`` (``comm`` may itself be a :class:`Job`), else one made
    by :meth:`Job.from_comm` from the node keywords; the caller frees a job made
    here (``made_here``), never a given one.

    Raises
    ------
    ValueError
        ``job`` with a ``comm`` of other ranks, or with node keywords that differ from
        its ``node_id`` (checked locally, alike on every rank).
    """
    if isinstance(comm, Job):
        job, comm = (comm, None) if job is None or job is comm else (job, comm)
    if job is None:
        return Job.from_comm(comm, node_id, emulate_nodes=emulate_nodes,
                             node_id_env=node_id_env), True
    if comm is not None and comm is not job.comm and not _congruent(comm, job.comm):
        raise ValueError("job= was built on other ranks than comm= holds; pass one of them")
    asked = node_id_of(node_id, emulate_nodes, node_id_env)
    if asked is not None and asked != job.node_id:
        raise ValueError(f"node options ask for {asked!r} but job= identifies nodes by "
                         f"{job.node_id!r}; pass one of them")
    return job, False


@contextmanager
def job_for(comm: Any = None, job: Optional[Job] = None, *, node_id: Optional[str] = None,
            emulate_nodes: Optional[int] = None,
            node_id_env: Optional[str] = None) -> Iterator[Job]:
    """:func:`acquire_job` as a context: a job made here is freed on leaving."""
    job, made = acquire_job(comm, job, node_id=node_id, emulate_nodes=emulate_nodes,
                            node_id_env=node_id_env)
    try:
        yield job
    finally:
        if made:
            job.free()
