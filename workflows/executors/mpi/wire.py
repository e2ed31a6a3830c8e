"""The mpi executor's tags, from the project's table (:data:`stager.mpi.link.TAGS`).

Each message is one pickled object sent by a :class:`stager.mpi.link.Link`
on the executor's own communicator. What each carries, from whom to whom:
``docs/DISPATCH.md`` (Messages). A worker's results go through its server as
opaque bytes: servers never unpickle task arguments or results, so they import
no user code and copy no large result twice.
"""

from __future__ import annotations

from stager.mpi.link import TAGS

__all__ = ["TASKS", "DONE", "FEED", "UP", "STEAL", "STOLEN", "STOP", "BYE", "FINAL"]

TASKS, DONE, FEED, UP, STEAL, STOLEN, STOP, BYE, FINAL = (TAGS["executor"][n] for n in __all__)
