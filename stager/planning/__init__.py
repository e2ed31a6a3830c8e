"""Planning: a hook spec → one :class:`~stager.planning.plan.Plan`. Rank 0 only, serial.

:func:`build_plan` is the only entry point that globs, stats and opens the
sources on the shared filesystem. The MPI layer calls it on rank 0 only and
broadcasts the result once (``core.mpi.bcast_result``), so N ranks do not
put N times the metadata load on a parallel filesystem.

Modules: ``plan`` (the data), ``kinds`` (the table of block kinds: each block is
planned by its kind), ``sources`` (glob + stat + destination rules shared by all
kinds), ``files`` (``files`` blocks), ``scatter`` (where outputs of scatter blocks
land: a pure function of the plan and the node count, computed by every rank). The
``h5`` kind plans its blocks in its own package, :mod:`stager.kinds.h5`.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Tuple

from core.options import resolve
from hooks.spec import Block, Spec
from stager.errors import PlanError
from stager.planning import kinds
from stager.planning.plan import BlockPlan, FileEntry, Plan, describe_size
from stager.planning.sources import SourceArea, StatFn, check_disjoint, real_dest, source_areas

__all__ = ["build_plan", "spec_key", "check_destinations", "Plan",
           "BlockPlan", "FileEntry", "describe_size"]


def build_plan(spec: Spec, *, stat: StatFn = os.stat, **options: Any) -> Plan:
    """Plan every block of ``spec``; call on one process only.

    Parameters
    ----------
    spec : hooks.Spec
    stat : callable, optional
        ``os.stat`` for ``files`` blocks (a parameter so tests can count calls).
    **options
        The block kinds' own options (:func:`stager.planning.kinds.options`), e.g.
        ``h5_inline_bytes``: the threshold below which ``h5`` datasets are read while
        planning.

    Returns
    -------
    Plan

    Raises
    ------
    PlanError
        Anything a block cannot be planned for; the message starts with the
        ``FILE:LINE:COL`` of the pattern or block.
    TypeError
        An option no kind has.
    """
    ctx = kinds.PlanContext(stat=stat, options=resolve(kinds.options(), options, {},
                                                       what="planning option"))
    blocks: List[BlockPlan] = []
    outputs: Dict[str, List[Any]] = {name: [] for name in kinds.names()}
    for index, block in enumerate(spec.blocks):
        if block.kind not in outputs:
            raise PlanError(f"{block.location}: '{block.kind}' blocks are not supported by "
                            f"this version of the stager: use one of {', '.join(outputs)}")
        bp, units = kinds.kind(block.kind).plan(block, index, ctx)
        outputs[block.kind].extend(units)
        blocks.append(bp)
    sources = [u.source for us in outputs.values() for u in us]
    areas = source_areas(spec.blocks, sources, ctx.trees)
    for block in spec.blocks:
        check_destinations(block, areas)
    return Plan(spec_path=spec.path, blocks=tuple(blocks),
                outputs={k: tuple(v) for k, v in outputs.items() if v},
                spec_key=spec_key(spec), areas=areas,
                skipped_links=tuple(dict.fromkeys(ctx.skipped)))


def check_destinations(block: Block, areas: Tuple[SourceArea, ...]) -> None:
    """Refuse a block whose destination overlaps the sources (``PlanError``, exit 2).

    A destination without ``%n`` is checked exactly. With ``%n`` the node names are
    not known yet: its part before the first ``%n`` is checked against the source
    trees (if that part is inside one, every node's root is), and each node's leader
    checks its own root exactly before anything is written (``stager.staging``).
    """
    dest = block.dest
    where = str(block.dest_location)
    if "%n" not in dest:
        check_disjoint(real_dest(dest), areas, where, block.display_dest)
        return
    head = real_dest(os.path.dirname(dest[:dest.index("%n")] + "x"))
    trees = [a for a in areas if a.kind == "tree"
             and (head == a.path or head.startswith(a.path.rstrip("/") + "/"))]
    # every node's root is below ``head``: checked as a path below it
    check_disjoint(os.path.join(head, "%n"), trees, where, block.display_dest)


def spec_key(spec: Any) -> str:
    """The key of a spec's records in every destination root: 16 hex characters.

    From the spec file's real path when it is a file, so ``stage``, ``verify`` and
    ``clean`` of one file meet the same records from any working directory; a spec
    that is not a file (parsed from text) is keyed by the name it was given. A
    ``Plan`` carries the key it was planned with; a path may be given as it is.
    """
    if isinstance(spec, Plan) and spec.spec_key:
        return spec.spec_key
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
    else:
        path = getattr(spec, "path", None) or getattr(spec, "spec_path", "") or "<string>"
    ident = ("path:" + os.path.realpath(path)) if os.path.isfile(path) else ("name:" + path)
    return hashlib.sha256(ident.encode()).hexdigest()[:16]
