"""All MPI plumbing of mpistage, in one place (as mpi4py.futures keeps its in ``_lib``).

* :mod:`stager.mpi.agree` -- the one way ranks agree on failure (``agreed``),
  rank-0 results broadcast to all (``bcast_result``), the sleeping barrier;
* :mod:`stager.mpi.nodes` -- which ranks form a node, its leader, the leader
  communicator, and the one function that names nodes (``%n``);
* :mod:`stager.mpi.job` -- the job context: made once (``Job.from_comm``), passed down;
* :mod:`stager.mpi.roles` -- the one role rule (per node, who serves and whom) and ``Roles``;
* :mod:`stager.mpi.loop` -- the one message loop of every MPI role (``Loop``);
* :mod:`stager.mpi.link` -- the one message link of the MPI loops (``Link``), every
  tag of the project (``TAGS``), a worker's window (``Credits``);
* :mod:`stager.mpi.tree` -- the one merge tree.

Every function here that communicates says so ("Collective over `comm`") and
takes the communicator as a parameter. Used by the stager and by the workflow
runtime; nothing here imports mpi4py at module level.
"""
from stager.mpi.agree import agree, agreed, any_true, bcast_result, quiet_barrier
from stager.mpi.job import Job, job_for
from stager.mpi.link import TAGS, Backoff, Credits, Link
from stager.mpi.nodes import NodeLayout, name_nodes, node_layout
from stager.mpi.roles import serve_nodes, workers_of

__all__ = ["agree", "agreed", "any_true", "bcast_result", "quiet_barrier", "Job", "job_for",
           "NodeLayout", "name_nodes", "node_layout", "TAGS", "Backoff", "Credits", "Link",
           "serve_nodes", "workers_of"]
