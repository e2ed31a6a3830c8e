"""Stage HDF5 selections (``h5`` blocks) into node-local HDF5 files, reading each byte once.

Collective over a communicator, in the phases of :mod:`stager.stage`, each
ending in agreement (an error on one rank is the same ``StagerError`` on all,
never a hang):

1. **plan** — rank 0 alone opens the sources (serial h5py) and describes the
   selections (:func:`stager.h5plan.build_h5_plan`); one ``bcast``;
2. **capability** — every leader needs h5py built with MPI;
3. **resume** — a file already staged from the same source (same mtime) with
   the same selections on every node is skipped; if any node needs it, all
   leaders read it (the reads are collective) and only the nodes that need
   it write;
4. **capacity** — estimated output bytes vs. free space per (host,
   filesystem), before any byte is written;
5. **transfer** — per source file, the leaders open it with
   ``driver='mpio'`` on the leader communicator and, per dataset, in pieces of
   at most half the memory cap (whole output chunks along the first axis when
   they fit): each leader reads a disjoint run of rows with one collective
   ``H5Dread`` (the transfer property list that ``Dataset.collective`` sets,
   built explicitly because a leader with no rows must still take part, and
   h5py's high-level read skips empty selections), then ``Allgatherv`` in
   place completes the piece on every leader, which hashes it and writes it
   to its own file (:class:`stager.h5write.H5Output`). Leaders agree after
   every piece, so a failed write stops all of them at the same point.
   Filtered selections on chunk boundaries with step 1 skip the filters:
   leaders read disjoint runs of stored chunks (``H5Dread_chunk``), exchange
   them, and store them as they are (``H5Dwrite_chunk``) — see
   :func:`stager.h5write.chunk_copyable`;
6. **commit** — re-check, rename into place, record in the per-destination
   state (``stager.state``: the record's ``source`` is the source path plus
   its selections, its checksum the output file's, so ``stager verify`` and
   ``stager clean`` handle the files like any other).

Memory per rank: one piece buffer (at most ``memory/2``, and at most 1 GiB so
every MPI byte count fits in an int) plus HDF5's chunk buffers. Configure with
``memory=`` > ``$STAGER_H5_MEMORY`` > 1 GiB.
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from stager import localfs, space, state
from stager.checksum import new as checksum_new
from stager.agree import agree, bcast_result
from stager.errors import TransferError
from stager.h5plan import DatasetPlan, H5FilePlan, H5Plan, build_h5_plan
from stager.h5write import H5Output, array_digest, chunk_copyable, chunk_digest, chunk_offsets
from stager.manifest import expand_node
from stager.nodes import NodeLayout, node_layout, on_node
from stager.options import parse_size

__all__ = ["H5Report", "stage_h5", "memory_cap", "piece_rows", "DEFAULT_MEMORY"]

DEFAULT_MEMORY = 1 << 30
MAX_PIECE = 1 << 30
MIN_MEMORY = 64 << 10


def memory_cap(value: Any = None) -> int:
    """The per-rank memory cap: ``value`` > ``$STAGER_H5_MEMORY`` > 1 GiB. Strict."""
    if value is None:
        value = os.environ.get("STAGER_H5_MEMORY") or DEFAULT_MEMORY
    cap = parse_size(value, "h5 memory cap (STAGER_H5_MEMORY)")
    if cap < MIN_MEMORY:
        raise ValueError(f"h5 memory cap must be at least {MIN_MEMORY} bytes, got {cap}")
    return cap


def piece_rows(ds: DatasetPlan, cap: int) -> int:
    """Rows of ``ds`` moved per collective piece under memory cap ``cap``. Pure.

    Raises
    ------
    TransferError
        One row alone exceeds the piece budget.
    """
    budget = min(cap // 2, MAX_PIECE)
    rows = budget // max(ds.row_bytes, 1)
    if rows < 1:
        raise TransferError(f"one frame of {ds.path} ({ds.row_bytes} bytes) exceeds half the "
                            f"memory cap ({cap} bytes); raise STAGER_H5_MEMORY")
    c0 = ds.chunks[0] if ds.chunks else 1
    if rows >= c0:
        rows -= rows % c0  # whole output chunks per write: each is compressed once
    return min(rows, max(ds.rows, 1))


@dataclass(frozen=True)
class H5Report:
    """What one ``stage_h5`` run did (identical on every rank)."""

    nodes: Tuple[str, ...]
    files: int
    files_staged: int
    files_skipped: int
    datasets: int
    bytes_per_node: int          # selected dataset bytes, uncompressed
    bytes_written: int           # node-local output file bytes, summed over nodes
    pieces: int                  # collective read rounds
    max_piece_bytes: int         # largest piece buffer (the memory bound)
    memory_cap: int
    seconds: float
    plan_seconds: float

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _plan(spec: Any, inline_bytes: Optional[int]) -> H5Plan:
    if isinstance(spec, H5Plan):
        return spec
    from hooks import Spec, load_spec
    s = spec if isinstance(spec, Spec) else load_spec(os.fspath(spec))
    return build_h5_plan(s) if inline_bytes is None else build_h5_plan(s, inline_bytes)


def stage_h5(spec: Any, comm: Any = None, *, layout: Optional[NodeLayout] = None,
             emulate_nodes: Optional[int] = None, node_id_env: Optional[str] = None,
             force: bool = False, memory: Any = None,
             inline_bytes: Optional[int] = None) -> H5Report:
    """Collective over `comm`: every rank must call. Stage the ``h5`` blocks of ``spec``.

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or H5Plan
        Read and planned on rank 0 only. Blocks of other kinds are ignored.
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    layout : NodeLayout, optional
        Nodes and leaders (``stager.stage`` passes its own); else made from
        ``emulate_nodes``/``node_id_env`` and freed on return.
    force : bool
        Re-stage files already staged and unchanged.
    memory : int or str, optional
        Per-rank memory cap (``"256M"``); default ``$STAGER_H5_MEMORY`` or 1 GiB.
    inline_bytes : int, optional
        Planning threshold for datasets read on rank 0 (see ``build_h5_plan``).

    Returns
    -------
    H5Report

    Raises
    ------
    ValueError, TypeError
        Bad arguments, before any collective.
    hooks.SpecError, PlanError
        On every rank: the spec or a selection is invalid (missing dataset,
        slice out of range, not a dataset, unsupported dtype, ...).
    CapacityError
        Some node lacks room; nothing was written.
    TransferError
        Reading, writing or checking failed somewhere; temporary files removed.
    """
    cap = memory_cap(memory)
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {force!r}")
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    cap = comm.bcast(cap, root=0)  # rank 0's environment decides, so pieces match everywhere
    t0 = time.perf_counter()
    plan = bcast_result(comm, _plan, spec, inline_bytes)
    plan_seconds = time.perf_counter() - t0
    own = layout is None
    if layout is None:
        layout = node_layout(comm, emulate_nodes, node_id_env)
    try:
        return _stage(plan, comm, layout, cap, force, plan_seconds)
    finally:
        if own:
            layout.free()


def _require_mpi_h5py() -> None:
    import h5py

    if not h5py.get_config().mpi:
        raise TransferError(
            "h5py here has no MPI support (h5py.get_config().mpi is False), which HDF5 "
            "staging needs for driver='mpio': install the parallel h5py (Debian: "
            "python3-h5py-mpi) and run under mpirun (or set H5PY_ALWAYS_USE_MPI=1)")


def _targets(plan: H5Plan, node: str) -> List[Tuple[str, str, str]]:
    """(root, dest, rel) of every planned file on ``node``."""
    out = []
    for fp in plan.files:
        root = os.path.normpath(expand_node(fp.root, node))
        dest = localfs.inside(root, expand_node(fp.dest, node))
        rel = os.path.relpath(dest, root)
        if rel == "." or os.path.basename(rel) == state.STATE_NAME:
            raise localfs.UnsafePathError(f"destination {dest} collides with its block's "
                                          "directory or the stager's state file")
        out.append((root, dest, rel))
    return out


def _is_current(rec: Optional[state.StagedFile], fp: H5FilePlan, dest: str) -> bool:
    if rec is None or (rec.source, rec.mtime_ns) != (fp.key, fp.mtime_ns):
        return False
    try:
        st = os.lstat(dest)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o100000 and (st.st_size, st.st_mtime_ns) == \
        (rec.size, rec.mtime_ns)


def _stage(plan: H5Plan, comm: Any, layout: NodeLayout, cap: int, force: bool,
           plan_seconds: float) -> H5Report:
    """Collective over `comm`: every rank must call. Phases 3-6 of the module docstring."""
    from mpi4py import MPI

    n = len(plan.files)
    err: Optional[BaseException] = None
    targets: List[Tuple[str, str, str]] = []
    states: Dict[str, state.DestState] = {}
    need_local = np.zeros(n, np.uint8)
    if layout.is_leader:
        try:
            _require_mpi_h5py()
            targets = _targets(plan, layout.name)
            for root, _, _ in targets:
                if root not in states:
                    states[root] = state.load(root)
            for i, (fp, (root, dest, rel)) in enumerate(zip(plan.files, targets)):
                current = _is_current(states[root].files.get(rel), fp, dest)
                need_local[i] = 1 if (force or not current) else 0
        except Exception as e:
            err = on_node(layout, e)
    agree(comm, err, "checking HDF5 destinations", default=TransferError)
    need_any = np.zeros_like(need_local)
    comm.Allreduce(need_local, need_any, op=MPI.MAX)
    moved = [i for i in range(n) if need_any[i]]

    _check_capacity(comm, layout, plan, targets, need_local)

    created: Dict[str, List[str]] = defaultdict(list)
    if layout.is_leader:
        try:
            for i in moved:
                if need_local[i]:
                    root, dest, _ = targets[i]
                    localfs.ensure_dir(root, os.path.dirname(dest), created[root])
                    localfs.check_dest(dest)
        except Exception as e:
            err = on_node(layout, e)
    agree(comm, err, "preparing HDF5 destinations", default=TransferError)

    stats = {"pieces": 0, "max_piece": 0, "written": 0}
    comm.Barrier()
    t0 = time.perf_counter()
    if layout.is_leader:
        done: Dict[int, H5Output] = {}
        try:
            for i in moved:
                mine = targets[i][1] if need_local[i] else None
                out = _stage_file(layout.leader_comm, plan.files[i], mine, cap, stats)
                if out is not None:
                    done[i] = out
                    stats["written"] += out.size
        except Exception as e:
            err = e
        try:
            _save_states(plan, targets, states, done, created)
        except Exception as e:
            err = err or e
        if err is not None:
            err = on_node(layout, err)
    agree(comm, err, "staging HDF5 selections", default=TransferError)
    comm.Barrier()
    seconds = comm.bcast(time.perf_counter() - t0, root=0)
    # every leader counts the same pieces: take rank 0's count (rank 0 is a leader)
    tot = comm.allreduce(np.array([stats["written"], stats["pieces"] if comm.rank == 0 else 0],
                                  np.int64), op=MPI.SUM)
    max_piece = comm.allreduce(stats["max_piece"], op=MPI.MAX)
    return H5Report(nodes=layout.names, files=n, files_staged=len(moved),
                    files_skipped=n - len(moved),
                    datasets=sum(len(f.datasets) for f in plan.files),
                    bytes_per_node=plan.nbytes, bytes_written=int(tot[0]), pieces=int(tot[1]),
                    max_piece_bytes=int(max_piece), memory_cap=cap, seconds=seconds,
                    plan_seconds=plan_seconds)


def _check_capacity(comm: Any, layout: NodeLayout, plan: H5Plan,
                    targets: List[Tuple[str, str, str]], need_local: np.ndarray) -> None:
    """Collective over `comm`: every rank must call. Fail everywhere if a filesystem lacks room.

    Output sizes are estimates (``H5FilePlan.est_bytes``: stored bytes per
    selected frame + 5 % for filtered data); :func:`stager.space.check_capacity`
    sums nodes sharing a (host, filesystem), as emulated nodes do.
    """
    sizes: Dict[str, List[int]] = defaultdict(list)
    if layout.is_leader:
        for i, fp in enumerate(plan.files):
            if need_local[i]:
                sizes[targets[i][0]].append(fp.est_bytes)
    space.check_capacity(comm, layout, sizes, "the HDF5 selections")


def _stage_file(lc: Any, fp: H5FilePlan, dest: Optional[str], cap: int,
                stats: Dict[str, int]) -> Optional[H5Output]:
    """Collective over `lc` (the leader communicator): every leader must call.

    Returns the committed output, or None on a leader that does not write
    ``fp``. Raises the same agreed error on every leader.
    """
    import h5py

    out: Optional[H5Output] = None
    err: Optional[BaseException] = None
    try:
        if dest is not None:
            try:
                out = H5Output(fp, dest)
            except Exception as e:
                err = e
        agree(lc, err, f"creating the copy of {fp.source}", default=TransferError)
        digests: Dict[str, str] = {}
        rows: Dict[str, int] = {}
        big = [d for d in fp.datasets if d.inline is None]
        if big:
            src = None
            try:
                st = os.stat(fp.source)
                if (st.st_size, st.st_mtime_ns) != (fp.size, fp.mtime_ns):
                    raise TransferError(f"{fp.source} changed since planning; stage again")
                src = h5py.File(fp.source, "r", driver="mpio", comm=lc)
            except Exception as e:
                err = e
            agree(lc, err, f"opening {fp.source} with parallel HDF5", default=TransferError)
            assert src is not None
            try:
                for d in big:
                    rows[d.path] = piece_rows(d, cap)
                    digests[d.path] = _copy_dataset(lc, src, fp, d, rows[d.path], out, stats)
            finally:
                src.close()
        if out is not None:
            try:
                out.commit(digests, rows)
            except Exception as e:
                err = e
        agree(lc, err, f"writing the copy of {fp.source}", default=TransferError)
        return out
    finally:
        if out is not None:
            out.abort()


def _copy_dataset(lc: Any, src: Any, fp: H5FilePlan, d: DatasetPlan, rows: int,
                  out: Optional[H5Output], stats: Dict[str, int]) -> str:
    """Collective over `lc`: every leader must call. Move one dataset piece by piece."""
    from h5py import h5fd, h5p, h5s
    from mpi4py import MPI

    err: Optional[BaseException] = None
    ds = None
    try:
        ds = src[d.path]
        if tuple(ds.shape) != d.shape or ds.dtype != d.dtype:
            raise TransferError(f"{fp.source}:{d.path} changed since planning (now shape "
                                f"{ds.shape}, dtype {ds.dtype}); stage again")
    except Exception as e:
        err = e
    agree(lc, err, f"opening {fp.source}:{d.path}", default=TransferError)
    assert ds is not None
    if chunk_copyable(d) and d.chunks is not None and rows >= d.chunks[0]:
        return _copy_chunks(lc, ds, fp, d, rows, out, stats)
    rest = tuple(d.shape[1:])
    rb = d.row_bytes
    buf = np.empty((rows,) + rest, dtype=d.dtype)
    flat = buf.reshape(-1).view(np.uint8)
    stats["max_piece"] = max(stats["max_piece"], buf.nbytes)
    dxpl = h5p.create(h5p.DATASET_XFER)
    dxpl.set_dxpl_mpio(h5fd.MPIO_COLLECTIVE)  # what `with dataset.collective:` sets
    mspace = h5s.create_simple(buf.shape)
    fspace = ds.id.get_space()
    L, me = lc.size, lc.rank
    hasher = None
    for first in range(0, d.rows, rows):
        count = min(rows, d.rows - first)
        share = [count * k // L for k in range(L + 1)]
        mine0, mine = share[me], share[me + 1] - share[me]
        try:
            if mine:
                fspace.select_hyperslab((d.start + (first + mine0) * d.step,) + (0,) * len(rest),
                                        (mine,) + rest, stride=(d.step,) + (1,) * len(rest))
                mspace.select_hyperslab((mine0,) + (0,) * len(rest), (mine,) + rest)
            else:
                fspace.select_none()
                mspace.select_none()
            ds.id.read(mspace, fspace, buf, dxpl=dxpl)
        except Exception as e:
            err = e
        agree(lc, err, f"reading {fp.source}:{d.path}", default=TransferError)
        counts = [(share[k + 1] - share[k]) * rb for k in range(L)]
        displs = [share[k] * rb for k in range(L)]
        lc.Allgatherv(MPI.IN_PLACE, [flat, counts, displs, MPI.BYTE])
        piece = buf[:count]
        hasher = array_digest(piece, hasher)
        stats["pieces"] += 1
        if out is not None:
            try:
                out.write(d, first, piece)
            except Exception as e:
                err = e
        agree(lc, err, f"writing {d.path} from {fp.source}", default=TransferError)
    assert hasher is not None
    hexd = hasher.hexdigest()
    seen = lc.allgather(hexd)
    if len(set(seen)) > 1:  # the exchange delivered different bytes to different leaders
        raise TransferError(f"{fp.source}:{d.path}: leaders hold different data after the "
                            f"exchange (checksums {sorted(set(seen))}); stage again")
    return hexd


def _copy_chunks(lc: Any, ds: Any, fp: H5FilePlan, d: DatasetPlan, rows: int,
                 out: Optional[H5Output], stats: Dict[str, int]) -> str:
    """Collective over `lc`: every leader must call. Move stored chunks, still compressed.

    Per piece, leader ``k`` reads a contiguous run of the piece's chunks with
    ``H5Dread_chunk`` (no decompression), the sizes and filter masks travel in
    one ``allgather``, the bytes in one ``Allgatherv``; every leader hashes
    (mask, bytes) of every chunk in order and stores them with
    ``H5Dwrite_chunk`` (no compression). This keeps gzip'd detector stacks
    from being decompressed and recompressed on every node.
    """
    from mpi4py import MPI

    L, me = lc.size, lc.rank
    c0 = d.chunks[0] if d.chunks else 1
    # own chunks + their joined copy + the exchanged piece must stay below the cap
    rows = max(c0, rows // 2 // c0 * c0)
    hasher = checksum_new()
    err: Optional[BaseException] = None
    for first in range(0, d.rows, rows):
        offs = list(chunk_offsets(d, first, rows))
        share = [len(offs) * k // L for k in range(L + 1)]
        mine: List[Tuple[int, bytes]] = []
        try:
            for src_off, _ in offs[share[me]:share[me + 1]]:
                mask, data = ds.id.read_direct_chunk(src_off)
                mine.append((int(mask), bytes(data)))
        except Exception as e:
            err = e
        agree(lc, err, f"reading chunks of {fp.source}:{d.path}", default=TransferError)
        meta = lc.allgather([(m, len(b)) for m, b in mine])
        counts = [sum(n for _, n in part) for part in meta]
        buf = np.empty(sum(counts), np.uint8)
        displs = [sum(counts[:k]) for k in range(L)]
        local = np.frombuffer(b"".join(b for _, b in mine), np.uint8)
        buf[displs[me]:displs[me] + counts[me]] = local
        stats["max_piece"] = max(stats["max_piece"], buf.nbytes)
        lc.Allgatherv(MPI.IN_PLACE, [buf, counts, displs, MPI.BYTE])
        stats["pieces"] += 1
        pos = 0
        flat = [x for part in meta for x in part]
        try:
            for (_, out_off), (mask, n) in zip(offs, flat):
                data = buf[pos:pos + n].tobytes()
                pos += n
                chunk_digest(hasher, mask, data)
                if out is not None:
                    out.write_chunk(d, out_off, mask, data)
        except Exception as e:
            err = e
        agree(lc, err, f"writing {d.path} from {fp.source}", default=TransferError)
    hexd = hasher.hexdigest()
    seen = lc.allgather(hexd)
    if len(set(seen)) > 1:
        raise TransferError(f"{fp.source}:{d.path}: leaders hold different chunks after the "
                            f"exchange (checksums {sorted(set(seen))}); stage again")
    return hexd


def _save_states(plan: H5Plan, targets: List[Tuple[str, str, str]],
                 states: Dict[str, state.DestState], done: Dict[int, H5Output],
                 created: Dict[str, List[str]]) -> None:
    """Record the committed copies (and the directories made) in each root's state file."""
    touched = set()
    for i, out in done.items():
        root, _, rel = targets[i]
        fp = plan.files[i]
        states[root].files[rel] = state.StagedFile(
            source=fp.key, size=out.size, mtime_ns=fp.mtime_ns, mode=fp.mode,
            checksum=out.checksum)
        touched.add(root)
    for root, dirs in created.items():
        st = states[root]
        st.created_dirs.extend(x for x in dirs if x not in st.created_dirs)
        touched.add(root)
    for root in sorted(touched):
        if os.path.isdir(root):
            state.save(states[root])
