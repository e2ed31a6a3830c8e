"""Moving HDF5 selections between leaders: each byte read once, every leader gets it all.

Collective over the leader communicator (one rank per node), called by the ``h5`` kind
inside the staging pipeline, which has already planned, resumed, checked capacity and
prepared directories. Two ways to read the source, the same exchange:

``mpio``
    With the MPI build of h5py the leaders open the file together (``driver='mpio'``)
    and read each piece with one collective ``H5Dread``; its transfer property list is
    built explicitly because a leader with no rows must still take part, and h5py's
    high-level read skips empty selections.
``independent``
    With the serial h5py (and, with any h5py, for virtual datasets and external raw
    storage, which HDF5 1.10-1.14 cannot read through MPI-IO) each leader opens the
    file read-only on its own and reads only its disjoint run of rows.

Per dataset, in pieces of at most half the memory cap (and at most 1 GiB, so every MPI
byte count fits in an int), each leader reads a disjoint run of rows *raw*, then
``Allgatherv`` in place completes the piece on every leader, which hashes it and writes
it (:class:`stager.kinds.h5.write.H5Output`); leaders agree after every piece. Filtered
selections on chunk boundaries with step 1 move as stored chunks (``H5Dread_chunk``,
each decoded once where it was read for the digest,
:func:`stager.kinds.h5.write.chunk_copyable`).

Before the opens the leaders agree on a check that the source and its linked files still
have their planned identity: a leader that failed alone would otherwise skip a
collective open while the others wait inside it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from stager.errors import KEPT, TransferError
from core.mpi.agree import agreed
from core import checksum
from stager.kinds.h5.check import ChunkDecoder, digest_values
from stager.kinds.h5.types import DatasetPlan, H5FilePlan, raw_dtype
from stager.kinds.h5.write import (H5Output, check_filters, chunk_copyable, chunk_offsets,
                                     sources_changed)

__all__ = ["MAX_PIECE", "piece_rows", "read_mode", "stage_file"]

MAX_PIECE = 1 << 30


def read_mode(d: DatasetPlan, mpi_h5py: bool) -> str:
    """``"mpio"`` or ``"independent"``: how the leaders read ``d`` (see the module). Pure."""
    return "mpio" if mpi_h5py and not d.independent else "independent"


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
               stats: Dict[str, Any], node: Optional[str] = None) -> Optional[H5Output]:
    """Collective over `lc` (the leader communicator): every leader must call.

    Returns the committed output, or None on a leader that does not write
    ``fp``. Raises the same agreed error on every leader. ``stats["read"]``
    (a set) receives the read paths used ("mpio", "independent").
    """
    import h5py

    out: Optional[H5Output] = None
    mpi = bool(h5py.get_config().mpi)
    try:
        with agreed(lc, f"creating the copy of {fp.source}", base=KEPT, default=TransferError,
                    node=node):
            check_filters(fp)
            if dest is not None:
                out = H5Output(fp, dest, node or "")
        digests: Dict[str, str] = {}
        rows: Dict[str, int] = {}
        big = [d for d in fp.datasets if d.inline is None]
        if big:
            with agreed(lc, f"checking {fp.source}", base=KEPT, default=TransferError, node=node):
                diff = sources_changed(fp)
                if diff is not None:
                    raise TransferError(f"{diff} changed since planning; stage again once the "
                                        "data is complete")
        groups: Dict[Tuple[str, str], List[DatasetPlan]] = {}
        for d in big:  # the plan's order: the same on every leader
            groups.setdefault((d.read_file or fp.source, read_mode(d, mpi)), []).append(d)
        for (path, mode), dsets in groups.items():
            src = None
            how = "parallel HDF5 (MPI-IO)" if mode == "mpio" else "read-only independent opens"
            with agreed(lc, f"opening {path} with {how}", base=KEPT, default=TransferError,
                        node=node):
                src = h5py.File(path, "r", driver="mpio", comm=lc) if mode == "mpio" \
                    else h5py.File(path, "r")
            assert src is not None
            stats.setdefault("read", set()).add(mode)
            try:
                for d in dsets:
                    rows[d.path] = piece_rows(d, cap)
                    digests[d.path] = _copy_dataset(lc, src, fp, d, rows[d.path], out, stats,
                                                    node, mode)
            finally:
                src.close()
        with agreed(lc, f"writing the copy of {fp.source}", base=KEPT, default=TransferError,
                    node=node):
            if out is not None:
                out.commit(digests, rows)
        return out
    finally:
        if out is not None:
            out.abort()


def _open_source(lc: Any, src: Any, fp: H5FilePlan, d: DatasetPlan,
                 node: Optional[str]) -> Any:
    """Collective over `lc`: open the dataset ``d`` reads, checking it did not change."""
    from h5py import h5t

    ds = None
    where = f"{src.filename}:{d.source_path}"
    with agreed(lc, f"opening {where}", base=KEPT, default=TransferError, node=node):
        ds = src[d.source_path]
        if tuple(ds.shape or ()) != d.shape or \
                not ds.id.get_type().equal(h5t.decode(d.h5type)):
            raise TransferError(f"{where} changed since planning (now shape {ds.shape}, "
                                f"dtype {ds.dtype}); stage again")
    return ds


def _copy_dataset(lc: Any, src: Any, fp: H5FilePlan, d: DatasetPlan, rows: int,
                  out: Optional[H5Output], stats: Dict[str, Any], node: Optional[str],
                  mode: str) -> str:
    """Collective over `lc`: every leader must call. Move one dataset piece by piece."""
    from h5py import h5fd, h5p, h5s, h5t
    from mpi4py import MPI

    ds = _open_source(lc, src, fp, d, node)
    if chunk_copyable(d) and d.chunks is not None and rows >= d.chunks[0]:
        return _copy_chunks(lc, ds, fp, d, rows, out, stats, node)
    tid = h5t.decode(d.h5type)
    rest = tuple(d.shape[1:])
    rb = d.row_bytes
    buf = np.empty((rows,) + rest, dtype=raw_dtype(d.itemsize))
    flat = buf.reshape(-1).view(np.uint8)
    stats["max_piece"] = max(stats["max_piece"], buf.nbytes)
    dxpl = None
    if mode == "mpio":
        dxpl = h5p.create(h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5fd.MPIO_COLLECTIVE)  # what `with dataset.collective:` sets
    mspace = h5s.create_simple(buf.shape)
    fspace = ds.id.get_space()
    L, me = lc.size, lc.rank
    hasher = checksum.new()
    for first in range(0, d.rows, rows):
        count = min(rows, d.rows - first)
        share = [count * k // L for k in range(L + 1)]
        mine0, mine = share[me], share[me + 1] - share[me]
        with agreed(lc, f"reading {src.filename}:{d.source_path}", base=KEPT, default=TransferError,
                    node=node):
            if mine:
                fspace.select_hyperslab((d.start + (first + mine0) * d.step,) + (0,) * len(rest),
                                        (mine,) + rest, stride=(d.step,) + (1,) * len(rest))
                mspace.select_hyperslab((mine0,) + (0,) * len(rest), (mine,) + rest)
                ds.id.read(mspace, fspace, buf, mtype=tid, dxpl=dxpl)
            elif mode == "mpio":  # a collective read: every leader takes part
                fspace.select_none()
                mspace.select_none()
                ds.id.read(mspace, fspace, buf, mtype=tid, dxpl=dxpl)
        counts = [(share[k + 1] - share[k]) * rb for k in range(L)]
        displs = [share[k] * rb for k in range(L)]
        lc.Allgatherv(MPI.IN_PLACE, [flat, counts, displs, MPI.BYTE])
        piece = buf[:count]
        digest_values(piece, hasher)
        stats["pieces"] += 1
        with agreed(lc, f"writing {d.path} from {fp.source}", base=KEPT, default=TransferError,
                    node=node):
            if out is not None:
                out.write(d, first, piece)
    return _agree_digest(lc, fp, d, hasher.hexdigest(), "data")


def _agree_digest(lc: Any, fp: H5FilePlan, d: DatasetPlan, hexd: str, what: str) -> str:
    seen = lc.allgather(hexd)
    if len(set(seen)) > 1:  # the exchange delivered different bytes to different leaders
        raise TransferError(f"{fp.source}:{d.path}: leaders hold different {what} after the "
                            f"exchange (checksums {sorted(set(seen))}); stage again")
    return hexd


def _copy_chunks(lc: Any, ds: Any, fp: H5FilePlan, d: DatasetPlan, rows: int,
                 out: Optional[H5Output], stats: Dict[str, Any], node: Optional[str]) -> str:
    """Collective over `lc`: every leader must call. Move stored chunks, still compressed.

    Per piece, leader ``k`` reads a contiguous run of the piece's chunks with
    ``H5Dread_chunk`` (no decompression) and decodes each in memory for its
    digest of decoded values; sizes, filter masks and digests travel in one
    ``allgather``, the bytes in one ``Allgatherv``; every leader folds the
    chunk digests in order and stores the chunks with ``H5Dwrite_chunk`` (no
    compression). This keeps compressed detector stacks from being
    decompressed and recompressed on every node.
    """
    from h5py import h5t
    from mpi4py import MPI

    L, me = lc.size, lc.rank
    assert d.chunks is not None
    c0 = d.chunks[0]
    # own chunks + their joined copy + the exchanged piece must stay below the cap
    rows = max(c0, rows // 2 // c0 * c0)
    hasher = checksum.new()
    out_shape = d.out_shape
    decoder: Optional[ChunkDecoder] = None
    try:
        with agreed(lc, f"setting up a decoder for {fp.source}:{d.path}",
                    base=KEPT, default=TransferError, node=node):
            decoder = ChunkDecoder(h5t.decode(d.h5type), d.chunks,
                                   [(f.code, f.flags, f.setup) for f in d.filters])
        assert decoder is not None
        for first in range(0, d.rows, rows):
            offs = list(chunk_offsets(d, first, rows))
            share = [len(offs) * k // L for k in range(L + 1)]
            mine: List[Tuple[int, bytes, bytes]] = []
            with agreed(lc, f"reading chunks of {ds.file.filename}:{d.source_path}",
                        base=KEPT, default=TransferError, node=node):
                for src_off, out_off in offs[share[me]:share[me + 1]]:
                    mask, data = ds.id.read_direct_chunk(src_off)
                    ext = tuple(min(c, n - o) for o, c, n in zip(out_off, d.chunks, out_shape))
                    try:
                        values = decoder.decode(int(mask), bytes(data), ext)
                    except Exception as e:
                        raise TransferError(f"{ds.file.filename}:{d.source_path}: the stored "
                                            f"chunk at {src_off} does not decode ({e}); the "
                                            "source is damaged or its filter differs here") \
                            from e
                    mine.append((int(mask), bytes(data), digest_values(values).digest()))
            meta = lc.allgather([(m, len(b), h) for m, b, h in mine])
            counts = [sum(n for _, n, _ in part) for part in meta]
            buf = np.empty(sum(counts), np.uint8)
            displs = [sum(counts[:k]) for k in range(L)]
            local = np.frombuffer(b"".join(b for _, b, _ in mine), np.uint8)
            buf[displs[me]:displs[me] + counts[me]] = local
            stats["max_piece"] = max(stats["max_piece"], buf.nbytes)
            lc.Allgatherv(MPI.IN_PLACE, [buf, counts, displs, MPI.BYTE])
            stats["pieces"] += 1
            pos = 0
            flat = [x for part in meta for x in part]
            with agreed(lc, f"writing {d.path} from {fp.source}", base=KEPT, default=TransferError,
                        node=node):
                for (_, out_off), (mask, n, h) in zip(offs, flat):
                    data = buf[pos:pos + n].tobytes()
                    pos += n
                    hasher.update(h)
                    if out is not None:
                        out.write_chunk(d, out_off, mask, data)
    finally:
        if decoder is not None:
            decoder.close()
    return _agree_digest(lc, fp, d, hasher.hexdigest(), "chunks")
