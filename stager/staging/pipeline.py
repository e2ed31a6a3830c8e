"""``stage``: replicate a plan into every node's local storage, reading each byte once.

Collective over a communicator. The phases are written once, for every block kind; a
kind brings its own part (its transfer, its check, whether it copies whole files)
through the table of :mod:`stager.planning.kinds`. Every local step before a collective
runs inside ``core.mpi.agreed``, so a failure on one rank is the same ``StagerError`` on
all, never a hang. The phases, in order (docs/ARCHITECTURE.md, section 2): options and
plan on rank 0, one broadcast each; the node layout; lock and resume
(:mod:`stager.staging.commits`); capacity, before any copy is written; prepare
(directories journaled before they are made); the transfer, each copy journaled just
before its rename, leaders stopping together on a failure or an interrupt
(:mod:`core.interrupt`); the optional source check; record (compact, unlock; also after
a failure, so a re-run resumes); the report, summed over ranks. Kept in one module (~480
lines) so the phases read in their order, top to bottom.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from core.errors import Interrupted, MpistageError
from stager.errors import KEPT, TransferError
from core.mpi.agree import agreed, any_true, bcast_result
from core.job import Job
from core.nodes import NodeLayout
from core import commit, localfs
from stager.nodelocal.state import STATE_DIR
from stager.staging.options import StageOptions, resolve_options
from stager.planning.api import plan as plan_spec
from core.nodes import expand_node
from stager.planning.plan import Plan, describe_size
from stager.planning.kinds import Kind, kinds, split
from stager.planning.scatter import node_bytes, placement
from stager.planning.sources import check_disjoint, real_dest
from core import interrupt
from stager.staging.capacity import check_capacity
from stager.staging.commits import NodeRecords
from stager.staging.kind import Moved, Transfer
from stager.staging.report import Progress, Report, SourceMeter
from stager.staging.sourcecheck import verify_sources

__all__ = ["stage", "NodeTargets", "node_targets"]


@dataclass
class NodeTargets:
    """This node's concrete destinations for a list of units (leaders only).

    ``dests[g]`` is unit ``g``'s path on this node; ``roots[g]`` its block's
    destination root; ``rels[g]`` the path relative to the root.
    """

    dests: List[str]
    roots: List[str]
    rels: List[str]


def node_targets(plan: Plan, units: Sequence[Any], node: str) -> NodeTargets:
    """Concrete destinations on ``node``, each checked to stay inside its block's root. Pure.

    Only the block's destination template is expanded (``%n``); the part of a
    destination that comes from a matched source name is kept exactly, so a
    source called ``run%n.dat`` lands as ``run%n.dat``.

    Raises
    ------
    localfs.UnsafePathError
        A destination escapes its root, or collides with the root's state directory.
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
        if rel.split("/", 1)[0] == STATE_DIR:
            raise localfs.UnsafePathError(f"destination {dest} collides with the stager's "
                                          f"state directory {root}/{STATE_DIR}; rename the "
                                          "source")
        dests.append(dest)
        roots.append(root)
        rels.append(rel)
    return NodeTargets(dests, roots, rels)


class _Run:
    """What the phases share and the emergency path of an interrupt needs (filled in as
    the run goes)."""

    def __init__(self, comm: Any, grace: float) -> None:
        self.rank = comm.rank
        self.grace = grace
        self.records: Optional[NodeRecords] = None
        self.phase = "planning"             # what a failure stopped (its message says)

    def emergency(self, signum: int) -> None:
        if self.records is not None:
            self.records.remove_temps()
        if self.rank == 0:
            print(f"stager stage: interrupted by {interrupt.signal_name(signum)}; the ranks "
                  f"could not stop together within {self.grace:g} s (a rank may have died): "
                  "every complete copy is recorded, temporary files removed; to resume, run "
                  "the same command again", file=sys.stderr, flush=True)


def stage(spec: Any, job: Any = None, **options: Any) -> Report:
    """Collective over `job`: every rank must call. Stage ``spec`` to every node.

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or Plan
        The hook spec (read and planned on rank 0 only) or a ready plan.
    job : core.job.Job or mpi4py.MPI.Comm, optional
        The job's node layout, made once (:meth:`Job.from_comm`); a communicator
        (default ``MPI.COMM_WORLD``) is made a job here (:meth:`Job.of`: nodes from
        ``$STAGER_NODE_ID``, else host names).
    **options
        ``method`` ("stripe" | "readall" | "bcast" | "naive"), ``chunk_size``,
        ``small_file_threshold``, ``force``, ``json`` (report path, written by rank 0),
        ``progress``, ``fsync``, the kinds' own (``h5_memory``, ``h5_inline_bytes``,
        ``shared_exchange``), ``wait`` (seconds to wait
        for another run holding a destination; negative: forever),
        ``verify_source`` (read every source again after staging and compare),
        ``interrupt_grace``. Each falls back to ``STAGER_<NAME>`` in rank 0's
        environment, then to its default (see ``core.options``).

    Returns
    -------
    Report
        Identical on every rank.

    Raises
    ------
    TypeError, ValueError
        Bad options (on every rank, before any transfer).
    hooks.SpecError, PlanError
        The spec cannot be read or planned, or a destination overlaps a source
        (on every rank, before anything is written).
    LockBusy
        Another run is using a destination (``wait`` to wait for it).
    CapacityError
        Some node lacks room; nothing was written.
    TransferError
        Reading, writing or checking failed somewhere; temporary files removed,
        every complete copy recorded (the message says how many).
    Interrupted
        SIGINT or SIGTERM: the ranks stopped together; as for ``TransferError``.
    """
    with Job.of(job) as j:
        comm = j.comm
        opts: StageOptions = bcast_result(comm, resolve_options, **options)
        run_id = comm.bcast(secrets.token_hex(6) if comm.rank == 0 else None, root=0)
        ctx = _Run(comm, opts.interrupt_grace)
        with interrupt.Handling(grace=opts.interrupt_grace, emergency=ctx.emergency):
            t_plan = time.perf_counter()
            plan = bcast_result(comm, plan_spec, spec, **opts.kind_options)
            plan_seconds = time.perf_counter() - t_plan
            report = _run(plan, comm, j, opts, plan_seconds, run_id, ctx)
        if opts.json and comm.rank == 0:
            report.write_json(opts.json)
        return report


@dataclass
class _Units:
    """The split plan's units as every phase sees them (pure: the same on every rank)."""

    planned: Plan                       # the plan as given (the report's)
    plan: Plan                          # split: an h5 output's frame ranges, one per node
    units: List[Tuple[Kind, int, Any]]  # (kind, index in its kind, unit), table order
    used: List[Kind]
    holders: Dict[Tuple[str, int], Tuple[int, ...]]    # scatter: the nodes holding a unit


@dataclass
class _Done:
    """What the phases measured, for the report."""

    need_any: bytearray
    meter: SourceMeter
    results: Dict[str, Tuple[List[int], Moved]]
    seconds: float
    checked: Dict[str, Any]
    extra_local: Dict[str, Any]


def _units(plan: Plan, nodes: int) -> _Units:
    """Scatter h5 blocks (each output split into frame ranges, one per node) and scatter
    blocks (which nodes hold which files). Pure: the same on every rank, so a PlanError
    here is raised by every rank at once, before any collective."""
    planned, plan = plan, split(plan, nodes)
    units = [(k, i, u) for k in kinds() for i, u in enumerate(plan.units(k.name))]
    return _Units(planned, plan, units, [k for k in kinds() if plan.units(k.name)],
                  placement(plan, nodes) if plan.scatters else {})


def _run(plan: Plan, comm: Any, job: Job, opts: StageOptions,
         plan_seconds: float, run_id: str, ctx: _Run) -> Report:
    """Collective over `comm`: every rank must call. The phases after planning, in the
    order of the module docstring."""
    from mpi4py import MPI

    w = _units(plan, len(job.names))
    ctx.phase = "checking destinations"
    try:
        need_local = _lock_and_resume(w, job, opts, run_id, ctx)
        need_any = bytearray(len(w.units))
        comm.Allreduce([need_local, MPI.UNSIGNED_CHAR], [need_any, MPI.UNSIGNED_CHAR], op=MPI.MAX)
        ctx.phase = "checking free space"      # before any copy is written
        sizes: Dict[str, List[int]] = defaultdict(list)
        if ctx.records is not None:
            for g, (_, _, u) in enumerate(w.units):
                if need_local[g]:
                    sizes[ctx.records.roots[g]].append(u.out_bytes)
        check_capacity(comm, job, sizes)
        ctx.phase = "preparing destinations"
        with agreed(comm, ctx.phase, base=KEPT, default=TransferError, node=job.name):
            interrupt.check(ctx.phase)
            if ctx.records is not None:
                _prepare(ctx.records, need_local)
        done = _stage_and_record(w, job, opts, need_local, need_any, ctx)
    except MpistageError as e:
        # every rank raised this same agreed error at the same point: one more
        # collective says how much is safely done, so the message can say it
        _after_failure(comm, job, ctx.records, e, ctx.phase)
        raise
    finally:
        if ctx.records is not None:
            with contextlib.suppress(Exception):
                ctx.records.close()
    return _report(w, done, job, opts, plan_seconds)


def _lock_and_resume(w: _Units, job: Job, opts: StageOptions, run_id: str,
                     ctx: _Run) -> bytearray:
    """Collective over `job`: every rank must call. Each leader checks its roots, takes
    their locks and reads its records (``ctx.records``); what this node still needs."""
    node = job.name
    need_local = bytearray(len(w.units))
    with agreed(job.comm, "checking destinations", base=KEPT, default=TransferError,
                node=node, quiet=True):
        interrupt.check("checking destinations")
        if not job.is_leader:
            return need_local
        for k in w.used:
            k.check(node)
        targets = node_targets(w.plan, [u for _, _, u in w.units], node)
        _check_roots(w.plan, targets, node)
        p = w.plan.spec_path
        spec_name = os.path.realpath(p) if p and os.path.isfile(p) else (p or "<spec>")
        recs = ctx.records = NodeRecords(
            [u for _, _, u in w.units], targets.dests, targets.roots, targets.rels,
            w.plan.spec_key, spec_name, run_id, node, fsync=opts.fsync,
            kinds=[k.name for k, _, _ in w.units])
        recs.open(wait=opts.wait)
        for g, (kind, i, u) in enumerate(w.units):
            held = w.holders.get((kind.name, i))
            if held is not None and recs.roots[g] in recs.shared:
                raise localfs.UnsafePathError(
                    f"{recs.roots[g]} is one directory shared by several nodes, and "
                    f"its block ({w.plan.blocks[u.block].location}) scatters: "
                    "each node must hold its own files. Put %n in the destination "
                    "(or stage to node-local storage), or broadcast the block")
            mine = held is None or job.index in held
            need_local[g] = recs.decide(g, opts.force) if recs.writes(g) and mine else 0
    return need_local


def _stage_and_record(w: _Units, job: Job, opts: StageOptions, need_local: bytearray,
                      need_any: bytearray, ctx: _Run) -> _Done:
    """Collective over `job`: every rank must call. The transfer (each copy journaled as it
    commits), the sources read again (``verify_source``), the records compacted and
    unlocked."""
    comm, node, recs = job.comm, job.name, ctx.records
    ctx.phase = "staging"
    meter = SourceMeter()
    results: Dict[str, Tuple[List[int], Moved]] = {}
    comm.Barrier()
    t0 = time.perf_counter()
    with agreed(comm, "staging", base=KEPT, default=TransferError, node=node, quiet=True):
        if recs is not None:
            with commit.session(recs):
                _transfer(w.plan, w.units, w.used, recs, need_local, need_any, job, opts,
                          meter, results, w.holders)
    comm.Barrier()
    seconds = comm.bcast(time.perf_counter() - t0, root=0)
    checked: Dict[str, Any] = {}
    if opts.verify_source:
        ctx.phase = "checking the sources"
        with agreed(comm, "checking the sources again", base=KEPT, default=TransferError,
                    node=node, quiet=True):
            if recs is not None:
                files = [g for g, (k, _, _) in enumerate(w.units) if k.whole_files]
                checked = verify_sources(job.leader_comm, files, w.units, recs)
    ctx.phase = "recording"
    extra_local: Dict[str, Any] = {}
    with agreed(comm, "recording the copies", base=KEPT, default=TransferError, node=node):
        if recs is not None:
            extra_local = {"leftovers_removed": recs.leftovers,
                           "locks_taken_over": recs.taken_over,
                           "shared_roots": dict(recs.shared)}
            recs.close()
    _remove_ancestors(comm, recs)
    return _Done(need_any, meter, results, seconds, checked, extra_local)


def _report(w: _Units, d: _Done, job: Job, opts: StageOptions, plan_seconds: float) -> Report:
    """Collective over `job`: every rank must call. Sums over ranks, the same on all."""
    comm, n = job.comm, len(w.units)
    written = sum(m.bytes_written for _, m in d.results.values())
    src = d.meter.bytes if d.meter.available else -1
    d.meter.close()
    sums = comm.allgather((written, src, d.extra_local))
    total_written = sum(b for b, _, _ in sums)
    source_bytes = None if any(s < 0 for _, s, _ in sums) else sum(s for _, s, _ in sums)
    extra = comm.bcast({name: m.extra for name, (_, m) in d.results.items() if m.extra}
                       if comm.rank == 0 else None, root=0)
    for k in w.used:
        extra.setdefault(k.name, {})["outputs"] = len(w.plan.units(k.name))
        if k.label:
            extra[k.name]["label"] = k.label
    extra["records"] = {
        "leftovers_removed": sum(x.get("leftovers_removed", 0) for _, _, x in sums),
        "locks_taken_over": [t for _, _, x in sums for t in x.get("locks_taken_over", [])],
        "shared_roots": {r: by for _, _, x in sums for r, by in x.get("shared_roots", {}).items()},
    }
    if opts.verify_source:
        extra["verify_source"] = comm.bcast(d.checked if job.index == 0 and job.is_leader
                                            else None, root=0)
    moved = [g for g in range(n) if d.need_any[g]]
    moved_file_bytes = sum(w.units[g][2].size for g in moved if w.units[g][0].whole_files)
    amp = (source_bytes / moved_file_bytes) if (source_bytes is not None and moved_file_bytes) \
        else None
    seconds, nodes = d.seconds, len(job.names)
    per_node = node_bytes(w.plan, nodes) if w.plan.scatters else [w.plan.total_bytes]
    return Report(
        method=opts.method, nodes=job.names, ranks=comm.size, files=n,
        files_transferred=len(moved), files_skipped=n - len(moved),
        bytes_per_node=max(per_node), bytes_written=total_written,
        transferred_bytes=moved_file_bytes, seconds=seconds,
        delivered_gbps=(total_written / seconds / 1e9) if seconds > 0 else 0.0,
        source_bytes_read=source_bytes, amplification=amp, chunk_size=opts.chunk_size,
        small_file_threshold=opts.small_file_threshold, plan_seconds=plan_seconds,
        extra=extra, plan=w.planned)


def _check_roots(plan: Plan, targets: NodeTargets, node: str) -> None:
    """This node's concrete roots stay clear of every source (``PlanError``: exit 2)."""
    where: Dict[str, str] = {}
    for b in plan.blocks:
        where.setdefault(os.path.normpath(os.path.abspath(expand_node(b.dest, node))), b.location)
    for root in dict.fromkeys(targets.roots):
        check_disjoint(real_dest(root), plan.areas, where.get(root, plan.spec_path), root)


def _after_failure(comm: Any, layout: NodeLayout, recs: Optional[NodeRecords],
                   e: MpistageError, phase: str) -> None:
    """Collective over `comm`: every rank must call. Close the records, then tell ``e`` how
    much is complete and recorded (every rank raised ``e`` at the same point)."""
    err = None
    mine = recs.progress() if recs is not None else (0, 0, 0, 0)
    if recs is not None:
        try:
            recs.close()
        except Exception as exc:  # reported in the message, never lost silently
            err = exc
    parts = comm.allgather((mine, None if err is None else str(err)))
    _remove_ancestors(comm, recs)
    if phase not in ("staging", "checking the sources", "recording") and \
            not isinstance(e, Interrupted):
        return
    done, total, done_b, total_b = (sum(p[i] for p, _ in parts) for i in range(4))
    nodes = len([p for p, _ in parts if p[1]])
    note = (f"{done} of {total} copies ({describe_size(done_b)} of {describe_size(total_b)}) "
            f"are complete and recorded on {nodes} node(s); temporary files removed")
    failed = [m for _, m in parts if m]
    if failed:
        note += f"; but saving a record failed: {failed[0]}"
    e.args = (f"{e.args[0] if e.args else e}; {note}; once the cause is fixed, the same "
              "command transfers only the rest",) + tuple(e.args[1:])
    e.progress_note = note  # type: ignore[attr-defined]  # for the command's one line


def _remove_ancestors(comm: Any, recs: Optional[NodeRecords]) -> None:
    """Collective over `comm`: every rank must call. rmdir the parents of emptied roots
    every node left behind.

    Emulated nodes on one host share the parents the stager made (``/local/run`` of
    ``/local/run/%n``); after the previous collective every node is done with them.
    """
    host = socket.gethostname()
    mine = recs.ancestors_left if recs is not None else []
    left = [d for h, ds in comm.allgather((host, mine)) if h == host for d in ds]
    if recs is None or not left:
        return
    for d in sorted(set(left), key=lambda p: (p.count("/"), p), reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass  # not empty, or another leader of this host removed it first


def _prepare(recs: NodeRecords, need_local: bytearray) -> None:
    """Make the directories this node's new copies go to (journaled first), each on its
    root's filesystem (a copy is renamed there from the root's ``.stager/tmp``)."""
    seen: Dict[str, None] = {}
    devs: Dict[str, int] = {}
    for g, need in enumerate(need_local):
        if not need:
            continue
        d = os.path.dirname(recs.dests[g])
        if d in seen:
            continue
        root = recs.roots[g]
        localfs.ensure_dir(root, d, announce=recs.announce_dir(root))
        if root not in devs:
            devs[root] = os.lstat(root).st_dev
        if d != root and os.lstat(d).st_dev != devs[root]:
            raise localfs.UnsafePathError(
                f"{d} is on another filesystem than its destination root {root} (a mount "
                "point below the root): stage into it with a block of its own")
        seen[d] = None


def _transfer(plan: Plan, units: List[Tuple[Kind, int, Any]], used: List[Kind],
              recs: NodeRecords, need_local: bytearray, need_any: bytearray,
              job: Job, opts: StageOptions, meter: SourceMeter,
              results: Dict[str, Tuple[List[int], Moved]],
              holders: Dict[Tuple[str, int], Tuple[int, ...]]) -> None:
    """Collective over the leader communicator: every leader must call. Move, then record.

    Kinds run in table order; after each, the leaders agree whether any failed
    and stop together. Checksums that became known only at the end of a kind
    (computed by another leader) are journaled; this leader's own failure is
    raised afterwards.
    """
    layout = job
    own = sum(units[g][2].out_bytes for g, need in enumerate(need_local) if need)
    progress = Progress(own, opts.progress and layout.index == 0)  # node 0's leader is rank 0
    error: Optional[BaseException] = None
    try:
        for k in used:
            gl = [g for g, (kind, _, _) in enumerate(units) if kind is k and need_any[g]]
            if not gl:
                continue
            moved = [units[g][1] for g in gl]
            dests = [recs.dests[g] if need_local[g] else None for g in gl]
            # a scatter output with one holder is read by that node alone (no exchange);
            # with several, among its holders only
            held = [holders.get((k.name, i)) for i in moved]
            alone = [h is not None and len(h) == 1 for h in held]
            res = k.transfer(Transfer(layout.leader_comm, plan.units(k.name), moved, dests,
                                      layout.name, opts, meter, progress, job, alone, held))
            results[k.name] = (gl, res)
            for j, (digest, _size) in res.done.items():
                if digest:
                    recs.set_checksum(gl[j], digest)
            if any_true(layout.leader_comm, res.error is not None):
                error = res.error
                break
    finally:
        progress.close()
    if error is not None:
        raise error
