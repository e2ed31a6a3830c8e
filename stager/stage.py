"""``stage``: replicate a spec's files into every node's local storage, reading each byte once.

Collective over a communicator. The phases, each ending in agreement so a
failure on one rank is the same ``StagerError`` on all (never a hang):

1. **plan** — rank 0 alone loads the spec and globs/stats the sources
   (``build_manifest``); one ``bcast`` hands the manifest (or the error) to all;
2. **nodes** — node identity and the leader communicator (``stager.nodes``);
3. **resume** — each leader reads its per-destination state
   (``stager.state``) and marks what its node still needs; the union over
   nodes is what the transfer moves;
4. **capacity** — every leader measures free space at its destinations,
   aggregated per filesystem (emulated nodes on one host share one), before
   any byte or directory is written;
5. **prepare** — destination directories (``0700``) and symlink checks;
6. **transfer** — the chosen method over the leader communicator
   (``stager.transfer``), then the per-destination state is saved (also after
   a failure, for the files that were completed);
7. **report** — sums over ranks (``stager.report``).
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from stager import localfs, space, state
from stager.agree import agree, bcast_result, quiet_barrier
from stager.errors import TransferError
from stager.manifest import Manifest, expand_node
from stager.nodes import NodeLayout, node_layout, on_node
from stager.options import StageOptions, resolve_options
from stager.report import Progress, Report, SourceMeter
from stager.transfer import FileJob, Sink, SourceReader, run_method

__all__ = ["stage", "load_manifest", "load_destinations", "node_roots",
           "check_node_options", "staged_layout",
           "NodeTargets",
           "node_targets"]

SpecLike = Union[str, "os.PathLike[str]", Any]


def _plan(spec: SpecLike) -> Manifest:
    if isinstance(spec, Manifest):
        return spec
    from hooks import Spec, load_spec
    from stager.plan import build_manifest
    if not isinstance(spec, Spec):
        spec = load_spec(os.fspath(spec))
    return build_manifest(spec)


def _dest_templates(spec: SpecLike) -> List[str]:
    if isinstance(spec, Manifest):
        return [b.dest for b in spec.blocks]
    from hooks import Spec, load_spec
    if not isinstance(spec, Spec):
        spec = load_spec(os.fspath(spec))
    return [b.dest for b in spec.blocks]


def load_destinations(spec: SpecLike, comm: Any) -> List[str]:
    """Collective over `comm`: every rank must call. The spec's destination templates.

    Rank 0 reads the spec (no globbing: ``verify`` and ``clean`` work from the
    per-destination state, not from the sources) and broadcasts the block
    destinations, which may still hold ``%n``.
    """
    return bcast_result(comm, _dest_templates, spec)


def staged_layout(spec: SpecLike, comm: Any, emulate_nodes: Optional[int],
                  node_id_env: Optional[str]) -> Tuple[Any, List[str], NodeLayout]:
    """Collective over `comm`: every rank must call. The set-up ``verify`` and ``clean`` share.

    Resolves the node options (keyword > environment), checks them against
    ``comm`` (``MPI.COMM_WORLD`` if ``None``), reads the spec's destination
    templates on rank 0 and builds the node layout. Returns ``(comm, templates,
    layout)``; the caller frees the layout.
    """
    opts = resolve_options(emulate_nodes=emulate_nodes, node_id_env=node_id_env)
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    check_node_options(opts, comm)
    templates = load_destinations(spec, comm)
    return comm, templates, node_layout(comm, opts.emulate_nodes, opts.node_id_env)


def node_roots(templates: List[str], node: str) -> List[str]:
    """Distinct concrete destination roots on ``node``, in spec order."""
    return list(dict.fromkeys(os.path.normpath(expand_node(t, node)) for t in templates))


def load_manifest(spec: SpecLike, comm: Any) -> Manifest:
    """Collective over `comm`: every rank must call. Plan on rank 0, broadcast the result.

    ``spec`` may be a path to a hook spec, a ``hooks.Spec`` or a ``Manifest``.
    Only rank 0 reads the spec and the sources' metadata. A planning error
    (``SpecError``, ``PlanError``) is raised on every rank with the same message.
    """
    return bcast_result(comm, _plan, spec)


@dataclass
class NodeTargets:
    """This node's concrete destinations for a manifest (leaders only).

    ``dests[i]`` is entry ``i``'s path on this node; ``roots[i]`` its block's
    destination root; ``rels[i]`` the path relative to the root.
    """

    dests: List[str]
    roots: List[str]
    rels: List[str]
    states: Dict[str, state.DestState] = field(default_factory=dict)


def node_targets(manifest: Manifest, node: str) -> NodeTargets:
    """Concrete destinations on ``node``, each checked to stay inside its block's root.

    Raises
    ------
    localfs.UnsafePathError
        A destination escapes its root, or collides with the state file name.
    """
    dests, roots, rels = [], [], []
    block_roots = [os.path.normpath(os.path.abspath(expand_node(b.dest, node)))
                   for b in manifest.blocks]
    for e in manifest.entries:
        root = block_roots[e.block]
        # string checks, not localfs.inside(): this runs once per file (10,000s)
        dest = os.path.normpath(expand_node(e.dest, node))
        if not dest.startswith(root + os.sep) or not os.path.isabs(dest):
            localfs.inside(root, dest)  # raises with the standard message
            raise localfs.UnsafePathError(f"destination {dest} collides with its block's "
                                          f"directory {root}; rename the source")
        rel = dest[len(root) + 1:]
        if os.path.basename(rel) == state.STATE_NAME:
            raise localfs.UnsafePathError(f"destination {dest} collides with the stager's state "
                                          "file; rename the source")
        dests.append(dest)
        roots.append(root)
        rels.append(rel)
    return NodeTargets(dests, roots, rels)


def check_node_options(opts: StageOptions, comm: Any) -> None:
    """Reject a node count the communicator cannot hold (before any collective)."""
    if opts.emulate_nodes is not None and opts.emulate_nodes > comm.size:
        raise ValueError(f"emulate_nodes must be an integer in 1..{comm.size} (the number of "
                         f"ranks), got {opts.emulate_nodes}")


def stage(spec: SpecLike, comm: Any = None, **options: Any) -> Report:
    """Collective over `comm`: every rank must call. Stage ``spec`` to every node.

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or Manifest
        The hook spec (read and planned on rank 0 only) or a ready manifest.
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    **options
        ``method`` ("stripe" | "readall" | "bcast" | "naive"), ``chunk_size``,
        ``small_file_threshold``, ``emulate_nodes``, ``node_id_env``,
        ``force``, ``json`` (report path, written by rank 0), ``progress``,
        ``fsync``. Each falls back to ``STAGER_<NAME>`` in the environment,
        then to its default (see ``stager.options``).

    Returns
    -------
    Report
        Identical on every rank.

    Raises
    ------
    TypeError, ValueError
        Bad options (before any collective, on every rank).
    hooks.SpecError, PlanError
        The spec cannot be read or planned (on every rank).
    CapacityError
        Some node lacks room; nothing was written.
    TransferError
        Reading, writing or checking failed somewhere; temporary files removed.
    """
    opts = resolve_options(**options)
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    check_node_options(opts, comm)
    t_plan = time.perf_counter()
    manifest = load_manifest(spec, comm)
    plan_seconds = time.perf_counter() - t_plan
    layout = node_layout(comm, opts.emulate_nodes, opts.node_id_env)
    try:
        report = _stage(manifest, comm, layout, opts, plan_seconds)
        if any(b.kind == "h5" for b in manifest.blocks) and not isinstance(spec, Manifest):
            from stager.h5stage import stage_h5  # HDF5 selections, after the files
            report.extra["h5"] = stage_h5(spec, comm, layout=layout, force=opts.force).to_dict()
    finally:
        layout.free()
    if opts.json and comm.rank == 0:
        report.write_json(opts.json)
    return report


def _stage(manifest: Manifest, comm: Any, layout: NodeLayout, opts: StageOptions,
           plan_seconds: float) -> Report:
    """Collective over `comm`: every rank must call. Phases 3-7 of the module docstring."""
    from mpi4py import MPI

    n = len(manifest.entries)
    entries = manifest.entries
    # -- resume: what does this node still need? ------------------------------
    need_local = np.zeros(n, np.uint8)
    targets: Optional[NodeTargets] = None
    err: Optional[BaseException] = None
    if layout.is_leader:
        try:
            targets = node_targets(manifest, layout.name)
            for root in dict.fromkeys(targets.roots):
                targets.states[root] = state.load(root)
            for i, e in enumerate(entries):
                if opts.force:
                    need_local[i] = 1
                    continue
                rec = targets.states[targets.roots[i]].files.get(targets.rels[i])
                current = rec is not None and state.is_current(rec, e.source, e.size, e.mtime_ns,
                                                               targets.dests[i])
                need_local[i] = 0 if current else 1
        except Exception as e:
            err = on_node(layout, e)
    agree(comm, err, "checking destinations", default=TransferError)
    need_any = np.empty_like(need_local)
    comm.Allreduce(need_local, need_any, op=MPI.MAX)
    moved = [i for i in range(n) if need_any[i]]

    # -- capacity, before anything is written ---------------------------------
    _check_capacity(comm, layout, manifest, targets, need_local)

    # -- prepare destination directories -------------------------------------
    created: Dict[str, List[str]] = defaultdict(list)
    if layout.is_leader:
        assert targets is not None
        try:
            # one scandir per existing directory finds symlinks/dirs squatting on
            # destination names (no lstat per file); new directories are empty
            blocked: Dict[str, set] = {}
            for i in moved:
                if not need_local[i]:
                    continue
                d, name = os.path.split(targets.dests[i])
                if d not in blocked:
                    made = created[targets.roots[i]]
                    before = len(made)
                    localfs.ensure_dir(targets.roots[i], d, made)
                    blocked[d] = set() if (len(made) > before and made[-1] == d) else \
                        localfs.non_files(d)
                if name in blocked[d]:
                    localfs.check_dest(targets.dests[i])
        except Exception as e:
            err = on_node(layout, e)
    agree(comm, err, "preparing destinations", default=TransferError)

    # -- transfer ----------------------------------------------------------
    jobs = [FileJob(entries[i].source, entries[i].size, entries[i].mtime_ns, entries[i].mode)
            for i in moved]
    meter = SourceMeter()
    comm.Barrier()
    t0 = time.perf_counter()
    sink = None
    if layout.is_leader:
        assert targets is not None
        dests = [targets.dests[i] if need_local[i] else None for i in moved]
        own_bytes = sum(j.size for j, d in zip(jobs, dests) if d is not None)
        progress = Progress(own_bytes, opts.progress and comm.rank == 0)
        sink = Sink(jobs, dests, progress=progress, fsync=opts.fsync)
        reader = SourceReader(jobs, meter)
        try:
            err = run_method(opts.method, layout.leader_comm, jobs, reader, sink,
                             opts.chunk_size, opts.small_file_threshold)
        except Exception as e:
            err = e
        finally:
            sink.abort()
            progress.close()
        try:
            _save_states(targets, moved, jobs, sink, created)
        except Exception as e:
            err = err or e
        if err is not None:
            err = on_node(layout, err)
    quiet_barrier(comm)  # non-leaders wait here without taking the leaders' CPU
    agree(comm, err, "staging", default=TransferError)
    comm.Barrier()
    seconds = time.perf_counter() - t0

    # -- report ------------------------------------------------------------
    written = sink.bytes_written if sink is not None else 0
    src = meter.bytes if meter.available else -1
    meter.close()
    totals = comm.allreduce(np.array([written, max(src, 0)], np.int64), op=MPI.SUM)
    unmeasurable = comm.allreduce(int(src < 0), op=MPI.MAX)
    seconds = comm.bcast(seconds, root=0)
    moved_bytes = sum(j.size for j in jobs)
    source_bytes = None if unmeasurable else int(totals[1])
    amp = (source_bytes / moved_bytes) if (source_bytes is not None and moved_bytes) else None
    return Report(
        method=opts.method, nodes=layout.names, ranks=comm.size, files=n,
        files_transferred=len(moved), files_skipped=n - len(moved),
        bytes_per_node=manifest.total_bytes, bytes_written=int(totals[0]),
        transferred_bytes=moved_bytes, seconds=seconds,
        delivered_gbps=(int(totals[0]) / seconds / 1e9) if seconds > 0 else 0.0,
        source_bytes_read=source_bytes, amplification=amp, chunk_size=opts.chunk_size,
        small_file_threshold=opts.small_file_threshold, plan_seconds=plan_seconds)


def _check_capacity(comm: Any, layout: NodeLayout, manifest: Manifest,
                    targets: Optional[NodeTargets], need_local: np.ndarray) -> None:
    """Collective over `comm`: every rank must call. Fail everywhere if a filesystem lacks room.

    Each leader lists, per destination root, the sizes of the files it will
    write; :func:`stager.space.check_capacity` rounds them to blocks, groups
    roots by (host, filesystem) across leaders and compares with free space.
    """
    sizes: Dict[str, List[int]] = defaultdict(list)
    if layout.is_leader and targets is not None:
        for i, e in enumerate(manifest.entries):
            if need_local[i]:
                sizes[targets.roots[i]].append(e.size)
    space.check_capacity(comm, layout, sizes)



def _save_states(targets: NodeTargets, moved: List[int], jobs: List[FileJob], sink: Sink,
                 created: Dict[str, List[str]]) -> None:
    """Record the committed copies (and the directories made) in each root's state file."""
    touched = set()
    for k, i in enumerate(moved):
        digest = sink.done.get(k)
        if digest is None:
            continue
        root = targets.roots[i]
        j = jobs[k]
        targets.states[root].files[targets.rels[i]] = state.StagedFile(
            source=j.source, size=j.size, mtime_ns=j.mtime_ns, mode=j.mode, checksum=digest)
        touched.add(root)
    for root, dirs in created.items():
        st = targets.states[root]
        st.created_dirs.extend(d for d in dirs if d not in st.created_dirs)
        touched.add(root)
    for root in sorted(touched):
        if os.path.isdir(root):
            state.save(targets.states[root])
