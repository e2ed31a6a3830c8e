"""All MPI plumbing of mpistage, in one place (as mpi4py.futures keeps its in ``_lib``).

* :mod:`core.mpi.agree` -- the one way ranks agree on failure (``agreed``),
  rank-0 results broadcast to all (``bcast_result``), the sleeping barrier;
* :mod:`core.mpi.roles` -- the one role rule (per node, who serves and whom) and ``Roles``;
* :mod:`core.mpi.loop` -- the one message loop of every MPI role (``Loop``);
* :mod:`core.mpi.link` -- the one message link of the MPI loops (``Link``), every
  tag of the project (``TAGS``), a worker's window (``Credits``);
* :mod:`core.mpi.tree` -- the one merge tree;
* :mod:`core.mpi.groups` -- a communicator of the ranks holding something.

The job (which ranks form a node, the leader communicator) is :mod:`core.job`
and :mod:`core.nodes`. Every function here that communicates says so
("Collective over `comm`") and takes the communicator as a parameter. Used by
the stager, the stream job and the workflow runtime; nothing here imports mpi4py
at module level.
"""
