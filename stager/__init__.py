"""mpistage's stager: plan a hook spec, then stage it collectively to every node.

Planning (``build_manifest``) is pure and serial; the collective layer is
imported lazily so ``stager plan`` never loads MPI.
"""
from stager.errors import CapacityError, PlanError, StagerError, TransferError, VerifyError
from stager.manifest import BlockPlan, Entry, Manifest
from stager.plan import build_manifest

__all__ = [
    "StagerError", "PlanError", "CapacityError", "TransferError", "VerifyError",
    "Manifest", "Entry", "BlockPlan", "build_manifest",
]
