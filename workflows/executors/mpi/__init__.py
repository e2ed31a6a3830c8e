"""The mpi executor: tasks on the ranks of the staging communicator, through our own dispatcher.

Modules, along the path of a task: :mod:`.executor` (the collective context
manager, ``MPIExecutor``), :mod:`.roles` (root, node servers, workers from the
job's node layout by the rule of :mod:`core.mpi.roles`), :mod:`.root` (the
root's dispatcher thread), :mod:`.server` (what every task server does:
batches, stealing, the give-up backstop), :mod:`.queues` (a server's backlog
and placement rules, pure), :mod:`.worker` (a worker's loop), :mod:`.wire`
(its tags and messages, sent by :class:`core.mpi.link.Link`).
The protocol: ``docs/DISPATCH.md``.
"""

from .executor import MPIExecutor

__all__ = ["MPIExecutor"]
