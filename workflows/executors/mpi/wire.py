"""The mpi executor's tags, from the project's table (:data:`core.mpi.link.TAGS`); what
each message carries, from whom to whom: ``docs/DISPATCH.md`` (Messages)."""

from __future__ import annotations

from core.mpi.link import TAGS

__all__ = ["TASKS", "DONE", "FEED", "UP", "STEAL", "STOLEN", "STOP", "BYE", "FINAL"]

TASKS, DONE, FEED, UP, STEAL, STOLEN, STOP, BYE, FINAL = (TAGS["executor"][n] for n in __all__)
