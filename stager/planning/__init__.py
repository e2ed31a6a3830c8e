"""Planning: a hook spec → one :class:`~stager.planning.plan.Plan`. Rank 0 only, serial.

:func:`build_plan` is the only entry point that globs, stats and opens the
sources on the shared filesystem. The MPI layer calls it on rank 0 only and
broadcasts the result once (``stager.mpi.bcast_result``), so N ranks do not
put N times the metadata load on a parallel filesystem.

Modules: ``plan`` (the data), ``sources`` (glob + stat + destination rules
shared by all kinds), ``files`` (``files`` blocks), ``h5`` and ``h5types``
(``h5`` blocks; h5py is imported only when a spec has one).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

from hooks.spec import Pattern, Spec
from stager.errors import PlanError
from stager.planning.files import plan_files
from stager.planning.plan import BlockPlan, FileEntry, Plan, describe_size, expand_node
from stager.planning.sources import StatFn

__all__ = ["build_plan", "destination_templates", "Plan", "BlockPlan", "FileEntry",
           "expand_node", "describe_size", "KINDS"]

#: Block kinds, in the order their outputs are staged.
KINDS = ("files", "h5")


def build_plan(spec: Spec, *, stat: StatFn = os.stat, h5_inline_bytes: Any = None) -> Plan:
    """Plan every block of ``spec``; call on one process only.

    Parameters
    ----------
    spec : hooks.Spec
    stat : callable, optional
        ``os.stat`` for ``files`` blocks (a parameter so tests can count calls).
    h5_inline_bytes : int, optional
        Threshold below which ``h5`` datasets are read while planning (see
        :data:`stager.planning.h5.INLINE_BYTES`).

    Returns
    -------
    Plan

    Raises
    ------
    PlanError
        Anything a block cannot be planned for; the message starts with the
        ``FILE:LINE:COL`` of the pattern or block.
    """
    claimed: Dict[str, Tuple[str, Pattern]] = {}
    blocks: List[BlockPlan] = []
    files: List[FileEntry] = []
    h5: List[Any] = []
    for index, block in enumerate(spec.blocks):
        if block.kind == "files":
            bp, entries = plan_files(block, index, claimed, stat)
            files.extend(entries)
        elif block.kind == "h5":
            # numpy and h5py: only for a spec with h5 blocks, only on the planning rank
            from stager.planning.h5 import INLINE_BYTES, plan_h5

            inline = INLINE_BYTES if h5_inline_bytes is None else int(h5_inline_bytes)
            bp, outputs = plan_h5(block, index, claimed, inline)
            h5.extend(outputs)
        else:
            raise PlanError(f"{block.location}: '{block.kind}' blocks are not supported by "
                            f"this version of the stager: use one of {', '.join(KINDS)}")
        blocks.append(bp)
    return Plan(spec_path=spec.path, blocks=tuple(blocks), files=tuple(files), h5=tuple(h5))


def destination_templates(spec: Spec) -> List[str]:
    """The destination template of every block (may hold ``%n``), without globbing. Pure."""
    return [b.dest for b in spec.blocks]
