"""Moving HDF5 selections between leaders: each byte read once, every leader gets it all.

Collective over the leader communicator (one rank per node), called by the
``h5`` kind (:mod:`stager.staging.h5`) inside the staging pipeline, which has
already planned, resumed, checked capacity and prepared directories. Per
source file the leaders open it with ``driver='mpio'`` on the leader
communicator and, per dataset, in pieces of at most half the memory cap
(whole output chunks along the first axis when they fit): each leader reads a
disjoint run of rows with one collective ``H5Dread`` (the transfer property
list that ``Dataset.collective`` sets, built explicitly because a leader with
no rows must still take part, and h5py's high-level read skips empty
selections), then ``Allgatherv`` in place completes the piece on every leader,
which hashes it and writes it to its own file
(:class:`stager.staging.h5.write.H5Output`). Leaders agree after every piece,
so a failed write stops all of them at the same point. Filtered selections on
chunk boundaries with step 1 skip the filters: leaders read disjoint runs of
stored chunks (``H5Dread_chunk``), exchange them, and store them as they are
(``H5Dwrite_chunk``) -- see :func:`stager.staging.h5.write.chunk_copyable`.

Before the collective open every leader checks that the source still has its
planned size and mtime, and the leaders agree on that check first: a leader
that failed alone would otherwise skip the open while the others wait inside it.

Memory per rank: one piece buffer (at most ``memory/2``, and at most 1 GiB so
every MPI byte count fits in an int) plus HDF5's chunk buffers.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from stager.errors import TransferError
from stager.mpi.agree import agreed
from stager.nodelocal.checksum import new as checksum_new
from stager.planning.h5types import DatasetPlan, H5FilePlan
from stager.planning.plan import unit_source_id
from stager.planning.sources import changed
from stager.staging.h5.write import (H5Output, array_digest, chunk_copyable, chunk_digest,
                                     chunk_offsets)

__all__ = ["MAX_PIECE", "piece_rows", "stage_file"]

MAX_PIECE = 1 << 30


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


def stage_file(lc: Any, fp: H5FilePlan, dest: Optional[str], cap: int,
               stats: Dict[str, int], node: Optional[str] = None) -> Optional[H5Output]:
    """Collective over `lc` (the leader communicator): every leader must call.

    Returns the committed output, or None on a leader that does not write
    ``fp``. Raises the same agreed error on every leader.
    """
    import h5py

    out: Optional[H5Output] = None
    try:
        with agreed(lc, f"creating the copy of {fp.source}", default=TransferError, node=node):
            if dest is not None:
                out = H5Output(fp, dest)
        digests: Dict[str, str] = {}
        rows: Dict[str, int] = {}
        big = [d for d in fp.datasets if d.inline is None]
        if big:
            with agreed(lc, f"checking {fp.source}", default=TransferError, node=node):
                diff = changed(unit_source_id(fp), os.stat(fp.source))
                if diff is not None:
                    raise TransferError(f"{fp.source} changed since planning ({diff}); stage "
                                        "again once the data is complete")
            src = None
            with agreed(lc, f"opening {fp.source} with parallel HDF5", default=TransferError,
                        node=node):
                src = h5py.File(fp.source, "r", driver="mpio", comm=lc)
            assert src is not None
            try:
                for d in big:
                    rows[d.path] = piece_rows(d, cap)
                    digests[d.path] = _copy_dataset(lc, src, fp, d, rows[d.path], out, stats,
                                                    node)
            finally:
                src.close()
        with agreed(lc, f"writing the copy of {fp.source}", default=TransferError, node=node):
            if out is not None:
                out.commit(digests, rows)
        return out
    finally:
        if out is not None:
            out.abort()


def _copy_dataset(lc: Any, src: Any, fp: H5FilePlan, d: DatasetPlan, rows: int,
                  out: Optional[H5Output], stats: Dict[str, int], node: Optional[str]) -> str:
    """Collective over `lc`: every leader must call. Move one dataset piece by piece."""
    from h5py import h5fd, h5p, h5s
    from mpi4py import MPI

    ds = None
    with agreed(lc, f"opening {fp.source}:{d.path}", default=TransferError, node=node):
        ds = src[d.path]
        if tuple(ds.shape) != d.shape or ds.dtype != d.dtype:
            raise TransferError(f"{fp.source}:{d.path} changed since planning (now shape "
                                f"{ds.shape}, dtype {ds.dtype}); stage again")
    assert ds is not None
    if chunk_copyable(d) and d.chunks is not None and rows >= d.chunks[0]:
        return _copy_chunks(lc, ds, fp, d, rows, out, stats, node)
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
        with agreed(lc, f"reading {fp.source}:{d.path}", default=TransferError, node=node):
            if mine:
                fspace.select_hyperslab((d.start + (first + mine0) * d.step,) + (0,) * len(rest),
                                        (mine,) + rest, stride=(d.step,) + (1,) * len(rest))
                mspace.select_hyperslab((mine0,) + (0,) * len(rest), (mine,) + rest)
            else:
                fspace.select_none()
                mspace.select_none()
            ds.id.read(mspace, fspace, buf, dxpl=dxpl)
        counts = [(share[k + 1] - share[k]) * rb for k in range(L)]
        displs = [share[k] * rb for k in range(L)]
        lc.Allgatherv(MPI.IN_PLACE, [flat, counts, displs, MPI.BYTE])
        piece = buf[:count]
        hasher = array_digest(piece, hasher)
        stats["pieces"] += 1
        with agreed(lc, f"writing {d.path} from {fp.source}", default=TransferError, node=node):
            if out is not None:
                out.write(d, first, piece)
    assert hasher is not None
    hexd = hasher.hexdigest()
    seen = lc.allgather(hexd)
    if len(set(seen)) > 1:  # the exchange delivered different bytes to different leaders
        raise TransferError(f"{fp.source}:{d.path}: leaders hold different data after the "
                            f"exchange (checksums {sorted(set(seen))}); stage again")
    return hexd


def _copy_chunks(lc: Any, ds: Any, fp: H5FilePlan, d: DatasetPlan, rows: int,
                 out: Optional[H5Output], stats: Dict[str, int], node: Optional[str]) -> str:
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
    for first in range(0, d.rows, rows):
        offs = list(chunk_offsets(d, first, rows))
        share = [len(offs) * k // L for k in range(L + 1)]
        mine: List[Tuple[int, bytes]] = []
        with agreed(lc, f"reading chunks of {fp.source}:{d.path}", default=TransferError,
                    node=node):
            for src_off, _ in offs[share[me]:share[me + 1]]:
                mask, data = ds.id.read_direct_chunk(src_off)
                mine.append((int(mask), bytes(data)))
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
        with agreed(lc, f"writing {d.path} from {fp.source}", default=TransferError, node=node):
            for (_, out_off), (mask, n) in zip(offs, flat):
                data = buf[pos:pos + n].tobytes()
                pos += n
                chunk_digest(hasher, mask, data)
                if out is not None:
                    out.write_chunk(d, out_off, mask, data)
    hexd = hasher.hexdigest()
    seen = lc.allgather(hexd)
    if len(set(seen)) > 1:
        raise TransferError(f"{fp.source}:{d.path}: leaders hold different chunks after the "
                            f"exchange (checksums {sorted(set(seen))}); stage again")
    return hexd
