"""A check of node-local HDF5 copies that decodes: values read through the filter pipeline.

Comparing stored bytes proves a copy holds what was written, not that it can be read:
bitshuffle chunks stored under doubled set-up parameters compared equal byte for byte
and decoded to nothing. So every staged dataset carries ``stager_checksum =
"xxh3_128:SCHEME:HEX"``, a digest of its *decoded* values computed on the leader that
read them (schemes ``values``, ``chunks``, ``vlen``, ``refs``: docs/hook-spec.md, "A check
that decodes"), and this module recomputes it from the copy through HDF5, so through
every filter of the copy's pipeline. Values are hashed in the dataset's own file type,
so no conversion hides a type change; a chunk moved stored is decoded once, in memory
(:class:`ChunkDecoder`), by the leader that read it.

:func:`check_file` is what ``commit`` (after writing) and ``stager verify`` run; it
needs only the copy, not the plan.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from core import checksum
from stager.kinds.h5.types import raw_dtype, region_summary

__all__ = ["ATTR", "BadDataset", "ChunkDecoder", "check_file", "chunk_grid", "digest_values",
           "SIGNATURE", "is_staged_h5", "read_rows",
           "tag", "target_token"]

#: The attribute holding a staged dataset's digest.
ATTR = "stager_checksum"
#: The first 8 bytes of an HDF5 file (without a user block).
SIGNATURE = b"\x89HDF\r\n\x1a\n"


def tag(scheme: str, hexd: str) -> str:
    """The ``stager_checksum`` value: ``ALGORITHM:SCHEME:HEX``."""
    return f"{checksum.ALGORITHM}:{scheme}:{hexd}"


@dataclass(frozen=True)
class BadDataset:
    """One dataset of a copy that fails the check (``reason`` says how)."""

    path: str
    reason: str


def digest_values(arr: np.ndarray, h: Optional[checksum.Hasher] = None) -> checksum.Hasher:
    """Feed an array's raw bytes (C order) to ``h``; object arrays length-prefixed."""
    h = h or checksum.new()
    a = np.asarray(arr)
    if a.dtype.kind == "O":
        for v in a.ravel():
            b = v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v)
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    elif a.size:
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h


def chunk_grid(shape: Sequence[int], chunks: Sequence[int]) -> Iterator[Tuple[int, ...]]:
    """Offsets of every chunk of ``shape`` in C order of the chunk grid."""
    return itertools.product(*(range(0, n, c) for n, c in zip(shape, chunks)))


def read_rows(dsid: Any, tid: Any, shape: Sequence[int], offset: Sequence[int],
              count: Sequence[int]) -> np.ndarray:
    """The block ``offset``/``count`` of a dataset, raw in file type ``tid`` (decoded)."""
    from h5py import h5s

    buf = np.empty(tuple(count), raw_dtype(tid.get_size()))
    if buf.size == 0:
        return buf
    fspace = dsid.get_space()
    fspace.select_hyperslab(tuple(offset), tuple(count))
    dsid.read(h5s.create_simple(buf.shape), fspace, buf, mtype=tid)
    return buf


class ChunkDecoder:
    """Decodes stored chunks with a dataset's pipeline, in memory (core driver, no file).

    Parameters
    ----------
    tid : h5py.h5t.TypeID
        The dataset's file type.
    chunks : tuple
    filters : sequence of (code, flags, setup values)
        The pipeline as ``H5Pset_filter`` takes it.
    """

    def __init__(self, tid: Any, chunks: Tuple[int, ...],
                 filters: Sequence[Tuple[int, int, Tuple[int, ...]]]) -> None:
        from h5py import h5d, h5f, h5p, h5s

        fapl = h5p.create(h5p.FILE_ACCESS)
        fapl.set_fapl_core(backing_store=False)
        self.fid = h5f.create(f"stager-decode-{id(self)}".encode(), h5f.ACC_TRUNC, fapl=fapl)
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk(tuple(chunks))
        for code, flags, setup in filters:
            dcpl.set_filter(code, flags, tuple(setup))
        self.tid, self.chunks = tid, tuple(chunks)
        self.ds = h5d.create(self.fid, b"c", tid, h5s.create_simple(self.chunks), dcpl=dcpl)

    def decode(self, mask: int, data: bytes, extent: Sequence[int]) -> np.ndarray:
        """One chunk's values (raw, file type), clipped to ``extent`` (its in-bounds size)."""
        from h5py import h5s

        self.ds.write_direct_chunk((0,) * len(self.chunks), data, filter_mask=mask)
        buf = np.empty(self.chunks, raw_dtype(self.tid.get_size()))
        self.ds.read(h5s.ALL, h5s.ALL, buf, mtype=self.tid)
        return buf[tuple(slice(0, n) for n in extent)]

    def close(self) -> None:
        self.ds.close()
        self.fid.close()


def target_token(f: Any, target: Any, summary: str = "") -> bytes:
    """What a ``refs`` digest covers for one reference: the address of its target (a path
    or a reference in ``f``) in the copy, so two names of one object agree, and a region's
    selection summary."""
    from h5py import h5o

    if not target:
        return b"|"
    return f"{h5o.get_info(f[target].id).addr}|{summary}".encode()


def _ref_tokens(obj: Any) -> np.ndarray:
    import h5py
    from h5py import h5r

    out = []
    for ref in np.asarray(obj[()], dtype=object).ravel():
        summary = ""
        if ref and isinstance(ref, h5py.RegionReference):
            summary = region_summary(h5r.get_region(ref, obj.file.id))
        out.append(target_token(obj.file, ref, summary))
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    return arr


def dataset_digest(obj: Any, scheme: str, rows_per_read: int = 0) -> str:
    """Recompute a dataset's digest under ``scheme`` by decoding the copy (see module)."""
    from h5py import h5s

    dsid = obj.id
    tid = dsid.get_type()
    if scheme == "vlen":
        return digest_values(np.asarray(obj[()] if obj.shape is not None else [],
                                        dtype=object)).hexdigest()
    if scheme == "refs":
        return digest_values(_ref_tokens(obj)).hexdigest()
    h = checksum.new()
    if dsid.get_space().get_simple_extent_type() == h5s.NULL:
        return h.hexdigest()
    shape = tuple(obj.shape)
    if scheme == "chunks":
        chunks = tuple(obj.chunks)
        for off in chunk_grid(shape, chunks):
            ext = tuple(min(c, n - o) for o, c, n in zip(off, chunks, shape))
            # a chunks digest folds the digests of the decoded chunks, clipped to the extent
            h.update(digest_values(read_rows(dsid, tid, shape, off, ext)).digest())
        return h.hexdigest()
    if not shape:
        buf = np.empty((), raw_dtype(tid.get_size()))
        dsid.read(h5s.ALL, h5s.ALL, buf, mtype=tid)
        return digest_values(buf, h).hexdigest()
    row = max(int(np.prod(shape[1:], dtype=np.int64)) * tid.get_size(), 1)
    step = rows_per_read or max(1, (64 << 20) // row)
    if obj.chunks:
        step = max(obj.chunks[0], step - step % obj.chunks[0])
    for r in range(0, shape[0], step):
        n = min(step, shape[0] - r)
        digest_values(read_rows(dsid, tid, shape, (r,) + (0,) * (len(shape) - 1),
                                (n,) + shape[1:]), h)
    return h.hexdigest()


def _filters_missing(obj: Any) -> Optional[str]:
    """Import hdf5plugin if the copy's pipeline needs a filter HDF5 lacks; what is missing."""
    from stager.kinds.h5.filters import ensure_available, missing_advice, stored_pipeline

    try:
        pipeline = stored_pipeline(obj.id.get_create_plist())
    except Exception:  # not chunked, or a property list HDF5 cannot read: decoding tells
        return None
    missing = ensure_available(f.code for f in pipeline)
    if not missing:
        return None
    flt = next(f for f in pipeline if f.code == missing[0])
    return f"cannot be decoded here: it uses {missing_advice(flt.code, flt.name)}"


def check_dataset(obj: Any, rows_per_read: int = 0) -> Optional[str]:
    """Why dataset ``obj`` of a copy fails the decoding check, or None if it passes."""
    value = obj.attrs.get(ATTR)
    if value is None:
        return f"has no {ATTR} attribute (not written by this stager version?)"
    value = value.decode() if isinstance(value, bytes) else str(value)
    parts = value.split(":")
    if len(parts) != 3 or parts[0] != checksum.ALGORITHM:
        return f"{ATTR} is {value!r}, expected {checksum.ALGORITHM}:SCHEME:HEX; stage again"
    scheme, want = parts[1], parts[2]
    why = _filters_missing(obj)
    if why is not None:
        return why
    try:
        got = dataset_digest(obj, scheme, rows_per_read)
    except Exception as e:  # HDF5 raises OSError/ValueError/RuntimeError from filters
        return f"does not decode ({type(e).__name__}: {e})"
    if got != want:
        return (f"decoded values differ from those read from the source (digest {got}, "
                f"source {want})")
    return None


def is_staged_h5(path: str) -> bool:
    """True if ``path`` is an HDF5 file (signature at offset 0) the stager wrote."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != SIGNATURE:
                return False
    except OSError:
        return False
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return "stager_source" in f.attrs
    except OSError:
        return False


def check_file(path: str, only: Optional[Sequence[str]] = None,
               rows: Optional[dict] = None) -> List[BadDataset]:
    """Decode every staged dataset of the copy at ``path`` and compare digests. Local.

    Parameters
    ----------
    only : sequence of str, optional
        Dataset paths to check (default: every dataset holding ``stager_checksum``;
        hard links to one dataset are checked once).
    rows : dict, optional
        Rows per read, by dataset path (bounds memory).

    Returns
    -------
    list of BadDataset
        Empty when every dataset decodes to its recorded digest. A file that HDF5
        cannot open at all is one entry with path ``"/"``.
    """
    import h5py

    bad: List[BadDataset] = []
    try:
        f = h5py.File(path, "r")
    except Exception as e:
        return [BadDataset("/", f"cannot be opened as HDF5 ({e})")]
    try:
        names: List[str] = list(only) if only is not None else []
        if only is None:
            seen = set()

            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset) and ATTR in obj.attrs:
                    addr = h5py.h5o.get_info(obj.id).addr
                    if addr not in seen:
                        seen.add(addr)
                        names.append("/" + name)
            try:
                f.visititems(visit)
            except Exception as e:
                return [BadDataset("/", f"its objects cannot be listed ({e})")]
        for name in names:
            try:
                obj = f[name]
            except Exception as e:
                bad.append(BadDataset(name, f"cannot be opened ({e})"))
                continue
            why = check_dataset(obj, (rows or {}).get(name, 0))
            if why is not None:
                bad.append(BadDataset(name, why))
    finally:
        f.close()
    return bad
