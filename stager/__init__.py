"""mpistage's stager: plan a hook spec, then stage it collectively to every node.

Planning (``build_manifest``) is pure and serial. The collective layer imports
mpi4py only when a collective function runs, so ``stager plan`` never loads MPI.
"""
from stager.errors import CapacityError, PlanError, StagerError, TransferError, VerifyError
from stager.manifest import BlockPlan, Entry, Manifest
from stager.plan import build_manifest

__all__ = [
    "StagerError", "PlanError", "CapacityError", "TransferError", "VerifyError",
    "Manifest", "Entry", "BlockPlan", "build_manifest",
    # collective layer (mpi4py is imported only when a collective function runs)
    "stage", "verify", "clean", "Report", "VerifyReport", "CleanReport", "StageOptions",
    "NodeLayout", "node_layout", "agree", "agreed",
]

# Eager imports on purpose: the functions share their modules' names, and a
# lazy import would let the submodule shadow the function on the package.
from stager.stage import stage
from stager.verify import VerifyReport, verify
from stager.clean import CleanReport, clean
from stager.report import Report
from stager.options import StageOptions
from stager.nodes import NodeLayout, node_layout
from stager.agree import agree, agreed
