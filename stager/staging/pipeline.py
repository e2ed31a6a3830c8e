"""``stage``: replicate a plan into every node's local storage, reading each byte once.

Collective over a communicator. The phases are written once, for every block
kind; a kind (files, h5) only brings its transfer (:mod:`stager.staging.kinds`).
Every local step that precedes a collective runs inside
``stager.mpi.agreed``, so a failure on one rank is the same ``StagerError``
on all (never a hang):

1. **options** -- rank 0 resolves them (keywords > ITS ``STAGER_*``
   environment > defaults) and broadcasts them;
2. **plan** -- rank 0 alone loads the spec and plans every block, files and
   HDF5 selections (:func:`stager.planning.build_plan`); one broadcast;
3. **nodes** -- node identity and the leader communicator (``stager.mpi.nodes``);
4. **resume** -- each leader reads its per-destination records and marks what
   its node still needs; the union over nodes is what the transfer moves;
5. **capacity** -- every leader measures free space at its destinations,
   aggregated per filesystem, before any byte or directory is written;
6. **prepare** -- destination directories (``0700``) and symlink checks;
7. **transfer** -- each kind over the leader communicator, in table order;
   leaders stop together when any fails;
8. **record** -- each leader records the copies it committed (also after a
   failure), so a re-run resumes;
9. **report** -- sums over ranks (:mod:`stager.staging.report`).
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from stager.errors import TransferError
from stager.mpi.agree import agreed, any_true, bcast_result
from stager.mpi.nodes import NodeLayout, check_node_options, node_layout
from stager.nodelocal import localfs
from stager.nodelocal import record as records
from stager.options import StageOptions, resolve_options
from stager.planning.api import plan as plan_spec
from stager.planning.plan import Plan, expand_node
from stager.staging.capacity import check_capacity
from stager.staging.kind import Kind, Moved, Transfer
from stager.staging.kinds import KINDS
from stager.staging.report import Progress, Report, SourceMeter

__all__ = ["stage", "NodeTargets", "node_targets"]


def _plan(spec: Any, inline_bytes: Optional[int]) -> Plan:
    return plan_spec(spec, h5_inline_bytes=inline_bytes)


@dataclass
class NodeTargets:
    """This node's concrete destinations for a list of units (leaders only).

    ``dests[g]`` is unit ``g``'s path on this node; ``roots[g]`` its block's
    destination root; ``rels[g]`` the path relative to the root.
    """

    dests: List[str]
    roots: List[str]
    rels: List[str]
    records: Dict[str, records.DestRecord] = field(default_factory=dict)


def node_targets(plan: Plan, units: Sequence[Any], node: str) -> NodeTargets:
    """Concrete destinations on ``node``, each checked to stay inside its block's root. Pure.

    Only the block's destination template is expanded (``%n``); the part of a
    destination that comes from a matched source name is kept exactly, so a
    source called ``run%n.dat`` lands as ``run%n.dat``.

    Raises
    ------
    localfs.UnsafePathError
        A destination escapes its root, or collides with the record's name.
    """
    dests, roots, rels = [], [], []
    block_roots = [os.path.normpath(os.path.abspath(expand_node(b.dest, node)))
                   for b in plan.blocks]
    templates = [b.dest.rstrip("/") + "/" for b in plan.blocks]
    for u in units:
        root = block_roots[u.block]
        # string checks, not localfs.inside(): this runs once per file (10,000s)
        if not u.dest.startswith(templates[u.block]):
            raise localfs.UnsafePathError(f"destination {u.dest} is not below its block's "
                                          f"directory {root}")
        rel = os.path.normpath(u.dest[len(templates[u.block]):])
        dest = os.path.join(root, rel)
        if rel.startswith("..") or os.path.isabs(rel) or rel == ".":
            localfs.inside(root, dest)  # raises with the standard message
            raise localfs.UnsafePathError(f"destination {dest} collides with its block's "
                                          f"directory {root}; rename the source")
        if os.path.basename(rel) == records.RECORD_NAME:
            raise localfs.UnsafePathError(f"destination {dest} collides with the stager's "
                                          "record file; rename the source")
        dests.append(dest)
        roots.append(root)
        rels.append(rel)
    return NodeTargets(dests, roots, rels)


def stage(spec: Any, comm: Any = None, **options: Any) -> Report:
    """Collective over `comm`: every rank must call. Stage ``spec`` to every node.

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or Plan
        The hook spec (read and planned on rank 0 only) or a ready plan.
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    **options
        ``method`` ("stripe" | "readall" | "bcast" | "naive"), ``chunk_size``,
        ``small_file_threshold``, ``emulate_nodes``, ``node_id_env``,
        ``force``, ``json`` (report path, written by rank 0), ``progress``,
        ``fsync``, ``h5_memory``, ``h5_inline_bytes``. Each falls back to
        ``STAGER_<NAME>`` in rank 0's environment, then to its default (see
        ``stager.options``).

    Returns
    -------
    Report
        Identical on every rank.

    Raises
    ------
    TypeError, ValueError
        Bad options (on every rank, before any transfer).
    hooks.SpecError, PlanError
        The spec cannot be read or planned (on every rank).
    CapacityError
        Some node lacks room; nothing was written.
    TransferError
        Reading, writing or checking failed somewhere; temporary files removed.
    """
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    opts: StageOptions = bcast_result(comm, resolve_options, **options)
    check_node_options(comm.size, opts.emulate_nodes, opts.node_id_env)
    t_plan = time.perf_counter()
    plan = bcast_result(comm, _plan, spec, opts.h5_inline_bytes)
    plan_seconds = time.perf_counter() - t_plan
    layout = node_layout(comm, opts.emulate_nodes, opts.node_id_env)
    try:
        report = _run(plan, comm, layout, opts, plan_seconds)
    finally:
        layout.free()
    if opts.json and comm.rank == 0:
        report.write_json(opts.json)
    return report


def _run(plan: Plan, comm: Any, layout: NodeLayout, opts: StageOptions,
         plan_seconds: float) -> Report:
    """Collective over `comm`: every rank must call. Phases 4-9 of the module docstring."""
    from mpi4py import MPI

    units: List[Tuple[Kind, int, Any]] = [(k, i, u) for k in KINDS
                                          for i, u in enumerate(plan.units(k.name))]
    used = [k for k in KINDS if plan.units(k.name)]
    n = len(units)
    node = layout.name
    # -- resume: what does this node still need? ------------------------------
    need_local = bytearray(n)
    targets: Optional[NodeTargets] = None
    with agreed(comm, "checking destinations", default=TransferError, node=node):
        if layout.is_leader:
            for k in used:
                k.check(node)
            targets = node_targets(plan, [u for _, _, u in units], node)
            for root in dict.fromkeys(targets.roots):
                targets.records[root] = records.load(root)
            for g, (_, _, u) in enumerate(units):
                rec = targets.records[targets.roots[g]].files.get(targets.rels[g])
                current = (not opts.force and rec is not None
                           and records.is_current(rec, u.key, u.size, u.mtime_ns,
                                                  targets.dests[g]))
                need_local[g] = 0 if current else 1
    need_any = bytearray(n)
    comm.Allreduce([need_local, MPI.UNSIGNED_CHAR], [need_any, MPI.UNSIGNED_CHAR], op=MPI.MAX)

    # -- capacity, before anything is written ---------------------------------
    sizes: Dict[str, List[int]] = defaultdict(list)
    if targets is not None:
        for g, (_, _, u) in enumerate(units):
            if need_local[g]:
                sizes[targets.roots[g]].append(u.out_bytes)
    check_capacity(comm, layout, sizes)

    # -- prepare destination directories -------------------------------------
    created: Dict[str, List[str]] = defaultdict(list)
    with agreed(comm, "preparing destinations", default=TransferError, node=node):
        if targets is not None:
            _prepare(targets, need_local, created)

    # -- transfer and record ------------------------------------------------
    meter = SourceMeter()
    results: Dict[str, Tuple[List[int], Moved]] = {}
    comm.Barrier()
    t0 = time.perf_counter()
    with agreed(comm, "staging", default=TransferError, node=node, quiet=True):
        if targets is not None:
            _transfer(plan, units, used, targets, need_local, need_any, created, layout,
                      opts, meter, results)
    comm.Barrier()
    seconds = comm.bcast(time.perf_counter() - t0, root=0)

    # -- report ------------------------------------------------------------
    written = sum(m.bytes_written for _, m in results.values())
    src = meter.bytes if meter.available else -1
    meter.close()
    sums = comm.allgather((written, src))
    total_written = sum(w for w, _ in sums)
    source_bytes = None if any(s < 0 for _, s in sums) else sum(s for _, s in sums)
    extra = comm.bcast({name: m.extra for name, (_, m) in results.items() if m.extra}
                       if comm.rank == 0 else None, root=0)
    for k in used:
        extra.setdefault(k.name, {})["outputs"] = len(plan.units(k.name))
    moved = [g for g in range(n) if need_any[g]]
    moved_file_bytes = sum(units[g][2].size for g in moved if units[g][0].name == "files")
    amp = (source_bytes / moved_file_bytes) if (source_bytes is not None and moved_file_bytes) \
        else None
    return Report(
        method=opts.method, nodes=layout.names, ranks=comm.size, files=n,
        files_transferred=len(moved), files_skipped=n - len(moved),
        bytes_per_node=plan.total_bytes, bytes_written=total_written,
        transferred_bytes=moved_file_bytes, seconds=seconds,
        delivered_gbps=(total_written / seconds / 1e9) if seconds > 0 else 0.0,
        source_bytes_read=source_bytes, amplification=amp, chunk_size=opts.chunk_size,
        small_file_threshold=opts.small_file_threshold, plan_seconds=plan_seconds,
        extra=extra)


def _prepare(targets: NodeTargets, need_local: bytearray,
             created: Dict[str, List[str]]) -> None:
    """Make the directories this node's new copies go to; refuse names squatted by links/dirs.

    One ``scandir`` per existing directory finds symlinks or directories
    sitting on destination names (no ``lstat`` per file); new directories are empty.
    """
    blocked: Dict[str, set] = {}
    for g, need in enumerate(need_local):
        if not need:
            continue
        d, name = os.path.split(targets.dests[g])
        if d not in blocked:
            made = created[targets.roots[g]]
            before = len(made)
            localfs.ensure_dir(targets.roots[g], d, made)
            blocked[d] = set() if (len(made) > before and made[-1] == d) else \
                localfs.non_files(d)
        if name in blocked[d]:
            localfs.check_dest(targets.dests[g])


def _transfer(plan: Plan, units: List[Tuple[Kind, int, Any]], used: List[Kind],
              targets: NodeTargets, need_local: bytearray, need_any: bytearray,
              created: Dict[str, List[str]], layout: NodeLayout, opts: StageOptions,
              meter: SourceMeter, results: Dict[str, Tuple[List[int], Moved]]) -> None:
    """Collective over the leader communicator: every leader must call. Move, then record.

    Kinds run in table order; after each, the leaders agree whether any failed
    and stop together. The records are saved whatever happened; this leader's
    own failure (or a failure to save) is raised afterwards.
    """
    own = sum(units[g][2].out_bytes for g, need in enumerate(need_local) if need)
    progress = Progress(own, opts.progress and layout.index == 0)  # node 0's leader is rank 0
    error: Optional[BaseException] = None
    try:
        for k in used:
            gl = [g for g, (kind, _, _) in enumerate(units) if kind is k and need_any[g]]
            if not gl:
                continue
            moved = [units[g][1] for g in gl]
            dests = [targets.dests[g] if need_local[g] else None for g in gl]
            res = k.transfer(Transfer(layout.leader_comm, plan.units(k.name), moved, dests,
                                      layout.name, opts, meter, progress))
            results[k.name] = (gl, res)
            if any_true(layout.leader_comm, res.error is not None):
                error = res.error
                break
    finally:
        progress.close()
        try:
            _save_records(units, targets, results, created)
        except Exception as e:
            error = error or e
    if error is not None:
        raise error


def _save_records(units: List[Tuple[Kind, int, Any]], targets: NodeTargets,
                  results: Dict[str, Tuple[List[int], Moved]],
                  created: Dict[str, List[str]]) -> None:
    """Record the committed copies (and the directories made) in each root's record."""
    touched = set()
    for gl, res in results.values():
        for k, (digest, size) in res.done.items():
            g = gl[k]
            u = units[g][2]
            root = targets.roots[g]
            targets.records[root].files[targets.rels[g]] = records.StagedFile(
                source=u.key, size=size, mtime_ns=u.mtime_ns, mode=u.mode, checksum=digest,
                source_size=u.size)
            touched.add(root)
    for root, dirs in created.items():
        rec = targets.records[root]
        rec.created_dirs.extend(d for d in dirs if d not in rec.created_dirs)
        touched.add(root)
    for root in sorted(touched):
        if os.path.isdir(root):
            records.save(targets.records[root])
