"""One node-local HDF5 output file, written by one leader (serial h5py, default driver).

The ``h5`` kind's transfer (:mod:`stager.staging.h5.read`) reads the selections
from the shared source and hands the pieces to an
:class:`H5Output`, which writes them to a temporary file next to the
destination, then on :meth:`H5Output.commit`:

1. records each dataset's checksum (XXH3-128 of its selected bytes in C order,
   as read from the source) in the attribute ``stager_checksum``;
2. closes the file, re-opens it read-only and checks every dataset's bytes
   against that checksum (the filters ran: this is the end-to-end check);
3. checks that the source did not change since planning (size, mtime);
4. sets mode and mtime (the source's, which resume compares), refuses a
   symlink at the destination and renames the file into place — atomic.

Every output object keeps its source's internal path, HDF5 file type (so
endianness, enums and string padding survive), layout, chunk shape (the first
axis clamped to the selected length when the source axis is not extendable),
filter pipeline in order, fill value and attributes. Each staged dataset gets
``stager_source`` (``FILE:/path``) and ``stager_slice`` (``[start:stop:step]``,
empty for a whole dataset); the root group gets ``stager_source`` (the file).

Output files use the default (sec2) driver, not MPI-IO: each leader writes its
own file, and HDF5 1.10 can only write filtered datasets through MPI-IO
collectively across all writers of one file.
"""
from __future__ import annotations

import os
import stat as _stat
from typing import Any, Dict, Optional

import numpy as np

from stager.errors import TransferError
from stager.nodelocal import checksum, commit, localfs
from stager.planning.h5types import Attr, DatasetPlan, H5FilePlan
from stager.planning.plan import unit_source_id
from stager.planning.sources import changed

__all__ = ["H5Output", "array_digest", "check_filters", "chunk_copyable", "chunk_offsets"]

_O_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def array_digest(arr: np.ndarray, hasher: Optional[checksum.Hasher] = None) -> checksum.Hasher:
    """Feed an array's bytes (C order) to ``hasher``; strings of object arrays length-prefixed."""
    h = hasher or checksum.new()
    a = np.asarray(arr)
    if a.dtype.kind == "O":
        for v in a.ravel():
            b = v.encode() if isinstance(v, str) else bytes(v)
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    else:
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h


def chunk_copyable(ds: DatasetPlan) -> bool:
    """True if ``ds`` can move as stored (compressed) chunks: H5Dread_chunk/H5Dwrite_chunk.

    That needs a filtered, chunked dataset, step 1, a selection starting on a
    chunk boundary and ending on one (or at the end of the axis), and an output
    chunk shape equal to the source's. The filters then run neither on read
    nor on write: the bytes that were compressed once stay compressed.
    """
    if ds.layout != "chunked" or not ds.filters or not ds.chunks or ds.step != 1 \
            or ds.inline is not None or not ds.shape:
        return False
    c0 = ds.chunks[0]
    clamped = ds.maxshape[0] is not None and ds.rows < c0
    return ds.start % c0 == 0 and (ds.stop % c0 == 0 or ds.stop == ds.shape[0]) and not clamped


def chunk_offsets(ds: DatasetPlan, first: int, rows: int):
    """(source offset, output offset) of every chunk holding output rows ``first..first+rows``.

    ``first`` and ``rows`` are multiples of the first-axis chunk size (except
    at the end); order is C order of the chunk grid, the same for every caller.
    """
    import itertools

    assert ds.chunks is not None
    c = ds.chunks
    grids = [range(0, n, k) for n, k in zip(ds.shape[1:], c[1:])]
    for r in range(first, min(first + rows, ds.rows), c[0]):
        for rest in itertools.product(*grids):
            yield (ds.start + r,) + rest, (r,) + rest


def chunk_digest(h: checksum.Hasher, mask: int, data: bytes) -> None:
    """Feed one stored chunk (its filter mask, then its bytes) to ``h``."""
    h.update(int(mask).to_bytes(4, "little"))
    h.update(data)


def check_filters(fp: H5FilePlan) -> None:
    """Raise if a filter of ``fp``'s datasets is not available to this process's HDF5."""
    from h5py import h5z

    for d in fp.datasets:
        for flt in d.filters:
            if not h5z.filter_avail(flt.code):
                raise TransferError(
                    f"{fp.source}:{d.path} uses HDF5 filter {flt.code} ({flt.name}), which is not "
                    "available here: install its plugin (e.g. the hdf5plugin package, and point "
                    "HDF5_PLUGIN_PATH at it) on every node, or stage the whole file")


class H5Output:
    """The node-local copy of one :class:`~stager.planning.h5types.H5FilePlan`, under a
    temporary name.

    Parameters
    ----------
    fp : H5FilePlan
    dest : str
        Final path; its directory exists and was checked (``localfs.ensure_dir``).
    """

    def __init__(self, fp: H5FilePlan, dest: str) -> None:
        import h5py

        localfs.check_dest(dest)
        check_filters(fp)
        self.fp, self.dest = fp, dest
        self.tmp = commit.temp_path(dest)  # short whatever the name; the run decides where
        self.digests: Dict[str, str] = {}
        self.chunked: Dict[str, bool] = {}  # datasets moved as stored chunks
        self.checksum = ""
        self.size = 0
        self.file: Optional[Any] = None
        # Created exclusively, so mode 'w' below truncates our own empty file; the
        # directory is ours and 0700, so nobody can swap the name meanwhile.
        os.close(os.open(self.tmp, _O_NEW, 0o600))
        try:
            self.file = h5py.File(self.tmp, "w")
            self._create(h5py)
        except BaseException:
            self.abort()  # the caller never gets the object, so nobody else would
            raise

    def _create(self, h5py: Any) -> None:
        """Groups, datasets (inline ones filled), attributes and soft links of the copy."""
        fp, f = self.fp, self.file
        assert f is not None
        for g in fp.groups:
            grp = f.require_group(g.path)
            _write_attrs(grp, g.attrs)
        f.attrs["stager_source"] = fp.source
        for ds in fp.datasets:
            obj = _create_dataset(f, ds)
            _write_attrs(obj, ds.attrs)
            obj.attrs["stager_source"] = f"{fp.source}:{ds.path}"
            obj.attrs["stager_slice"] = f"[{ds.start}:{ds.stop}:{ds.step}]" if ds.sliced else ""
            if ds.inline is not None:
                obj[...] = ds.inline
                self.digests[ds.path] = array_digest(ds.inline).hexdigest()
        for link in fp.links:
            if link.path not in f:
                f[link.path] = h5py.SoftLink(link.target)

    def write(self, ds: DatasetPlan, first: int, piece: np.ndarray) -> None:
        """Write output rows ``first .. first+len(piece)`` of dataset ``ds``."""
        assert self.file is not None
        self.file[ds.path][first:first + len(piece)] = piece

    def write_chunk(self, ds: DatasetPlan, offset: tuple, mask: int, data: bytes) -> None:
        """Store one chunk as read from the source (still compressed)."""
        assert self.file is not None
        self.chunked[ds.path] = True
        self.file[ds.path].id.write_direct_chunk(offset, data, filter_mask=mask)

    def commit(self, digests: Dict[str, str], piece_rows: Dict[str, int]) -> None:
        """Close, check, and rename into place (see the module docstring).

        Parameters
        ----------
        digests : dict
            Checksum of each collectively read dataset's selected bytes.
        piece_rows : dict
            Rows per read when re-checking each such dataset (bounds memory).

        Raises
        ------
        TransferError
            A dataset read back differs from what was read from the source, or
            the source changed since planning.
        """
        import h5py

        assert self.file is not None
        self.digests.update(digests)
        for path, hexd in self.digests.items():
            kind = ":stored-chunks" if self.chunked.get(path) else ""
            self.file[path].attrs["stager_checksum"] = f"{checksum.ALGORITHM}{kind}:{hexd}"
        self.file.close()
        self.file = None
        with h5py.File(self.tmp, "r") as f:
            for ds in self.fp.datasets:
                got = _reread(f[ds.path], ds, piece_rows.get(ds.path, 0),
                              self.chunked.get(ds.path, False))
                if got != self.digests[ds.path]:
                    raise TransferError(f"checksum mismatch in {self.dest}:{ds.path} after writing "
                                        f"(read {self.digests[ds.path]}, file holds {got}); "
                                        "the node-local disk may be failing: stage again")
        diff = changed(unit_source_id(self.fp), os.stat(self.fp.source))
        if diff is not None:
            raise TransferError(f"{self.fp.source} changed while being staged ({diff}); "
                                "stage again when it is stable")
        self.checksum = checksum.file_hexdigest(self.tmp)
        os.chmod(self.tmp, _stat.S_IMODE(self.fp.mode) & 0o777 or 0o600)
        os.utime(self.tmp, ns=(self.fp.mtime_ns, self.fp.mtime_ns))
        localfs.check_dest(self.dest)  # a symlink planted while we wrote is refused too
        commit.rename(self.tmp, self.dest, checksum=self.checksum)  # journaled, then renamed
        self.size = os.lstat(self.dest).st_size

    def abort(self) -> None:
        """Close and remove the temporary file (idempotent; a no-op after commit)."""
        if self.file is not None:
            try:
                self.file.close()
            finally:
                self.file = None
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass


def _reread(obj: Any, ds: DatasetPlan, rows: int, chunked: bool) -> str:
    if ds.inline is not None or not ds.shape:
        return array_digest(obj[()]).hexdigest()
    h = checksum.new()
    if chunked:
        for _, out in chunk_offsets(ds, 0, ds.rows):
            chunk_digest(h, *obj.id.read_direct_chunk(out))
        return h.hexdigest()
    step = max(rows, 1)
    for r in range(0, ds.rows, step):
        array_digest(obj[r:r + step], h)
    return h.hexdigest()


def _write_attrs(obj: Any, attrs: Any) -> None:
    import h5py

    a: Attr
    for a in attrs:
        if isinstance(a.value, h5py.Empty):
            obj.attrs[a.name] = a.value
        else:
            obj.attrs.create(a.name, data=a.value, dtype=a.dtype)


def _create_dataset(f: Any, ds: DatasetPlan) -> Any:
    """Create ``ds`` with the source's file type, layout, chunks, filters and fill value."""
    import h5py
    from h5py import h5d, h5p, h5s, h5t

    parent, _, name = ds.path.rpartition("/")
    group = f.require_group(parent or "/")
    tid = h5t.decode(ds.h5type)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if not ds.shape:
        space = h5s.create(h5s.SCALAR)
    else:
        shape = ds.out_shape
        maxshape = [h5s.UNLIMITED if m is None else n for m, n in zip(ds.maxshape, shape)]
        if ds.layout == "chunked" and ds.chunks:
            chunks = list(ds.chunks)
            if shape[0] == 0:
                maxshape[0] = h5s.UNLIMITED
            elif maxshape[0] != h5s.UNLIMITED:
                chunks[0] = min(chunks[0], shape[0])
            dcpl.set_chunk(tuple(chunks))
            for flt in ds.filters:
                dcpl.set_filter(flt.code, flt.flags, flt.values)
        elif ds.layout == "compact":
            dcpl.set_layout(h5d.COMPACT)
        space = h5s.create_simple(shape, tuple(maxshape))
    if ds.fillvalue is not None:
        dcpl.set_fill_value(np.array(ds.fillvalue, dtype=ds.dtype))
    dsid = h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    return h5py.Dataset(dsid)
