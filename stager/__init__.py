"""mpistage's stager: plan a hook spec, stage it collectively to every node, verify, clean, drain.

Public API::

    from stager import plan, stage, verify, clean, drain

* :func:`plan` -- serial, no MPI: the :class:`Plan` of a spec (rank 0's job);
* :func:`stage`, :func:`verify`, :func:`clean`, :func:`drain` -- collective
  over a communicator (every rank calls them; failures are the same error on
  every rank).

The package is laid out along the data path: ``planning/`` (rank 0, pure) →
``mpi/`` (all MPI plumbing) → ``staging/`` (the collective transfer) →
``nodelocal/`` (the copies on each node: safe writes, records, verify, clean)
→ ``stageout`` (drain). Names are imported lazily: ``import stager`` costs
one small module, and ``stager plan`` never loads MPI.
"""
from __future__ import annotations

from typing import Any

from stager.errors import CapacityError, PlanError, StagerError, TransferError, VerifyError

__all__ = [
    "plan", "stage", "verify", "clean", "drain", "where", "Job",
    "Plan", "Where", "StagedCopyMissing", "Report", "VerifyReport", "CleanReport", "DrainReport",
    "StagerError", "PlanError", "CapacityError", "TransferError", "VerifyError",
]

_LAZY = {
    "plan": "stager.planning.api",
    "Plan": "stager.planning.plan",
    "stage": "stager.staging.pipeline",
    "Report": "stager.staging.report",
    "verify": "stager.nodelocal.verify",
    "VerifyReport": "stager.nodelocal.verify",
    "clean": "stager.nodelocal.clean",
    "CleanReport": "stager.nodelocal.clean",
    "drain": "stager.stageout",
    "DrainReport": "stager.stageout",
    "where": "stager.locality",
    "Where": "stager.locality",
    "StagedCopyMissing": "stager.locality",
    "Job": "stager.mpi.job",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stager' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
