"""mpistage's stager: plan a hook spec, stage it collectively to every node, verify, clean, drain.

Public API::

    from stager import plan, stage, verify, clean, drain

* :func:`plan` -- serial, no MPI: the :class:`Plan` of a spec (rank 0's job);
* :func:`stage`, :func:`verify`, :func:`clean`, :func:`drain` -- collective
  over a communicator (every rank calls them; failures are the same error on
  every rank).

The package is laid out along the data path: ``planning/`` (rank 0, pure) →
``staging/`` (the collective transfer) → ``nodelocal/`` (the copies on each node:
records, verify, clean) → ``stageout`` (drain). The job (``core.job.Job``), the MPI
plumbing and the safe local writes are the shared base's (``core``). Names are
imported lazily: ``import stager`` costs one small module, and ``stager plan``
never loads MPI.
"""
from __future__ import annotations

import lazy_loader

from stager.errors import CapacityError, PlanError, StagerError, TransferError, VerifyError

__all__ = ["plan", "stage", "verify", "clean", "drain", "where", "Plan", "Where",
           "StagedCopyMissing", "Report", "VerifyReport", "CleanReport", "DrainReport",
           "StagerError", "PlanError", "CapacityError", "TransferError", "VerifyError"]

# loaded on first use (lazy_loader, scientific-python's PEP 562 helper): ``import stager``
# imports no MPI, numpy or h5py
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "planning.api": ["plan"],
    "planning.plan": ["Plan"],
    "staging.pipeline": ["stage"],
    "staging.report": ["Report"],
    "nodelocal.verify": ["verify", "VerifyReport"],
    "nodelocal.clean": ["clean", "CleanReport"],
    "stageout": ["drain", "DrainReport"],
    "locality": ["where", "Where", "StagedCopyMissing"],
})
