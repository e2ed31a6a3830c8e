"""One node-local HDF5 output file, written by one leader (serial h5py, default driver).

The ``h5`` kind's transfer (:mod:`stager.kinds.h5.read`) hands the pieces to an
:class:`H5Output`, which writes them to a temporary file next to the destination, then
on :meth:`H5Output.commit`: records each dataset's digest of *decoded* values in
``stager_checksum`` (:mod:`stager.kinds.h5.check`); re-opens the file read-only, checks
every dataset's HDF5 type and filter pipeline and reads every value back against that
digest (a copy that does not decode is removed, the error naming node, file and
dataset); checks that the source did not change; sets mode and mtime (the source's,
which resume compares) and renames the file into place.

What an exact copy keeps (type from ``H5Tencode``, dataspace, layout, chunks, filter
set-up values, fill, attributes, references anew, links, the ``stager_*`` attributes):
docs/hook-spec.md, "HDF5 selections". Values move raw in the file type, so HDF5
converts nothing.

Output files use the default (sec2) driver, not MPI-IO: each leader writes its own
file, and HDF5 1.10 can only write filtered datasets through MPI-IO collectively across
all writers of one file.
"""
from __future__ import annotations

import itertools
import os
import stat as _stat
from typing import Any, Dict, Optional, Tuple

import numpy as np

from stager.errors import TransferError
from core import checksum, commit, localfs
from stager.kinds.h5 import check as h5check
from stager.kinds.h5.filters import (ensure_available, import_hdf5plugin, missing_advice,
                                       pipeline_difference, stored_pipeline)
from stager.kinds.h5.types import Attr, DatasetPlan, H5FilePlan, RefTarget
from stager.planning.plan import unit_source_id
from stager.planning.sources import changed

__all__ = ["H5Output", "check_filters", "chunk_copyable", "chunk_offsets", "scheme_of",
           "sources_changed"]

_O_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def chunk_copyable(ds: DatasetPlan) -> bool:
    """True if ``ds`` can move as stored (compressed) chunks: H5Dread_chunk/H5Dwrite_chunk.

    That needs a filtered, chunked dataset with chunks of its own (not a
    virtual dataset), step 1, a selection starting on a chunk boundary and
    ending on one (or at the end of the axis), and an output chunk shape equal
    to the source's. The filters then run neither on read nor on write: the
    bytes that were compressed once stay compressed.
    """
    if ds.layout != "chunked" or not ds.filters or not ds.chunks or ds.step != 1 \
            or ds.inline is not None or not ds.shape or ds.origin == "virtual" \
            or ds.values != "raw":
        return False
    c0 = ds.chunks[0]
    clamped = ds.maxshape[0] is not None and ds.rows < c0
    return ds.start % c0 == 0 and (ds.stop % c0 == 0 or ds.stop == ds.shape[0]) and not clamped


def chunk_offsets(ds: DatasetPlan, first: int, rows: int):
    """(source offset, output offset) of every chunk holding output rows ``first..first+rows``.

    ``first`` and ``rows`` are multiples of the first-axis chunk size (except
    at the end); order is C order of the chunk grid, the same for every caller
    (and :func:`stager.kinds.h5.check.chunk_grid`'s).
    """
    assert ds.chunks is not None
    c = ds.chunks
    grids = [range(0, n, k) for n, k in zip(ds.shape[1:], c[1:])]
    for r in range(first, min(first + rows, ds.rows), c[0]):
        for rest in itertools.product(*grids):
            yield (ds.start + r,) + rest, (r,) + rest


def scheme_of(ds: DatasetPlan, chunked: bool) -> str:
    """The digest scheme of a staged dataset (see :mod:`stager.kinds.h5.check`)."""
    if ds.values in ("vlen", "refs"):
        return ds.values
    return "chunks" if chunked else "values"


def check_filters(fp: H5FilePlan) -> None:
    """Make ``fp``'s filters available here (hdf5plugin imported on demand), or raise.

    A virtual dataset's sources may use filters its (unfiltered) copy does not
    name; hdf5plugin is then imported if installed (planning read them already).
    """
    if any(d.origin == "virtual" for d in fp.datasets):
        import_hdf5plugin()
    for d in fp.datasets:
        missing = ensure_available(f.code for f in d.filters)
        if missing:
            flt = next(f for f in d.filters if f.code == missing[0])
            raise TransferError(f"{fp.source}:{d.path} uses "
                                f"{missing_advice(flt.code, flt.name)}")


def sources_changed(fp: H5FilePlan) -> Optional[str]:
    """What changed in ``fp``'s source or linked files since planning, or None. Local."""
    diff = changed(unit_source_id(fp), os.stat(fp.source))
    if diff is not None:
        return f"{fp.source} ({diff})"
    for path, size, mtime in fp.linked:
        try:
            st = os.stat(path)
        except OSError as e:
            return f"{path}, which {fp.source} links to ({e.strerror})"
        d2 = changed((size, mtime, -1, -1), st)
        if d2 is not None:
            return f"{path}, which {fp.source} links to ({d2})"
    return None


class H5Output:
    """The node-local copy of one :class:`~stager.kinds.h5.types.H5FilePlan`, under a
    temporary name.

    Parameters
    ----------
    fp : H5FilePlan
    dest : str
        Final path; its directory exists and was checked (``localfs.check_dest``).
    node : str, optional
        This node's name (for messages).
    """

    def __init__(self, fp: H5FilePlan, dest: str, node: str = "") -> None:
        import h5py

        localfs.check_dest(dest)
        check_filters(fp)
        self.fp, self.dest, self.node = fp, dest, node
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
        """Groups, datasets (inline ones filled), attributes, links and references."""
        fp, f = self.fp, self.file
        assert f is not None
        refs = []
        for g in fp.groups:
            grp = f.require_group(g.path) if g.path != "/" else f["/"]
            refs += _write_attrs(grp, g.attrs)
        f.attrs["stager_source"] = fp.source
        for ds in fp.datasets:
            obj = _create_dataset(f, ds)
            refs += _write_attrs(obj, ds.attrs)
            obj.attrs["stager_source"] = f"{ds.read_file}:{ds.source_path}" if ds.read_file \
                else f"{fp.source}:{ds.path}"
            obj.attrs["stager_slice"] = f"[{ds.start}:{ds.stop}:{ds.step}]" if ds.sliced else ""
            if ds.inline is not None:
                if ds.values == "refs":
                    refs.append((obj, None, ds))
                    continue
                _write_inline(obj, ds)
                self.digests[ds.path] = h5check.digest_values(ds.inline).hexdigest()
        for link in fp.links:
            if link.path in f or f.get(link.path, getlink=True) is not None:
                continue
            parent = link.path.rsplit("/", 1)[0] or "/"
            f.require_group(parent)
            if link.kind == "hard":
                f[link.path] = f[link.target]
            else:
                f[link.path] = h5py.SoftLink(link.target)
        for obj, name, what in refs:  # every target exists now
            if name is None:
                ds = what
                arr = _make_refs(f, ds.inline, ds.out_shape, _is_region(ds.h5type))
                obj[()] = arr
                tokens = np.empty(len(ds.inline), dtype=object)
                tokens[:] = [h5check.target_token(f, t.path, t.summary) for t in ds.inline]
                self.digests[ds.path] = h5check.digest_values(tokens).hexdigest()
            else:
                a: Attr = what
                region = _is_region(a.h5type)
                arr = _make_refs(f, a.value, a.shape or (), region)
                dt = h5py.regionref_dtype if region else h5py.ref_dtype
                obj.attrs.create(name, data=arr, shape=a.shape, dtype=dt)

    def write(self, ds: DatasetPlan, first: int, piece: np.ndarray) -> None:
        """Write output rows ``first .. first+len(piece)`` of ``ds`` (raw, in its file type)."""
        from h5py import h5s, h5t

        assert self.file is not None
        if not len(piece):
            return
        dsid = self.file[ds.path].id
        fspace = dsid.get_space()
        fspace.select_hyperslab((first,) + (0,) * (piece.ndim - 1), piece.shape)
        dsid.write(h5s.create_simple(piece.shape), fspace, np.ascontiguousarray(piece),
                   mtype=h5t.decode(ds.h5type))

    def write_chunk(self, ds: DatasetPlan, offset: tuple, mask: int, data: bytes) -> None:
        """Store one chunk as read from the source (still compressed)."""
        assert self.file is not None
        self.chunked[ds.path] = True
        self.file[ds.path].id.write_direct_chunk(offset, data, filter_mask=mask)

    def commit(self, digests: Dict[str, str], piece_rows: Dict[str, int]) -> None:
        """Close, check by decoding, and rename into place (see the module docstring).

        Parameters
        ----------
        digests : dict
            Digest of each collectively read dataset's decoded values.
        piece_rows : dict
            Rows per read when re-checking each such dataset (bounds memory).

        Raises
        ------
        TransferError
            A dataset of the copy has another type or pipeline than planned, does
            not decode, or decodes to other values than were read; or the
            source changed since planning.
        """
        import h5py

        assert self.file is not None
        self.digests.update(digests)
        for ds in self.fp.datasets:
            scheme = scheme_of(ds, self.chunked.get(ds.path, False))
            self.file[ds.path].attrs[h5check.ATTR] = h5check.tag(scheme, self.digests[ds.path])
        self.file.close()
        self.file = None
        where = f"node {self.node}: " if self.node else ""
        with h5py.File(self.tmp, "r") as f:
            for ds in self.fp.datasets:
                why = _structure_problem(f[ds.path], ds)
                if why is not None:
                    raise TransferError(f"{where}the copy {self.dest}:{ds.path} of "
                                        f"{self.fp.source} {why}; it was removed. This is a "
                                        "type or filter problem, not a disk one: report it "
                                        "with the file's h5dump -H output")
        bad = h5check.check_file(self.tmp, [d.path for d in self.fp.datasets], piece_rows)
        if bad:
            b = bad[0]
            more = f" (and {len(bad) - 1} more datasets)" if len(bad) > 1 else ""
            raise TransferError(f"{where}the copy {self.dest}:{b.path} of {self.fp.source} "
                                f"{b.reason}{more}; it was removed. Check that every node has "
                                "the same filter plugins (hdf5plugin), then stage again")
        diff = sources_changed(self.fp)
        if diff is not None:
            raise TransferError(f"{diff} changed while being staged; stage again when it is "
                                "stable")
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


def _structure_problem(obj: Any, ds: DatasetPlan) -> Optional[str]:
    """How the written dataset's type or pipeline differs from the plan, or None."""
    from h5py import h5t

    if not obj.id.get_type().equal(h5t.decode(ds.h5type)):
        return (f"has HDF5 type {obj.dtype} (class {obj.id.get_type().get_class()}) instead "
                f"of the source's {ds.dtype}")
    if ds.layout == "chunked" and ds.filters:
        got = stored_pipeline(obj.id.get_create_plist())
        same = tuple(obj.chunks or ()) == tuple(ds.chunks or ())
        diff = pipeline_difference(ds.filters, got, same_chunks=same)
        if diff is not None:
            return f"has filter pipeline {diff}"
    return None


def _space(shape: Optional[Tuple[int, ...]], maxshape: Any = None) -> Any:
    from h5py import h5s

    if shape is None:
        return h5s.create(h5s.NULL)
    if shape == ():
        return h5s.create(h5s.SCALAR)
    return h5s.create_simple(tuple(shape), maxshape)


def _write_attrs(obj: Any, attrs: Tuple[Attr, ...]) -> list:
    """Create ``attrs`` on ``obj`` exactly; reference attributes are returned for later."""
    import h5py
    from h5py import h5a, h5t

    later = []
    for a in attrs:
        if a.values == "refs":
            later.append((obj, a.name, a))
            continue
        tid = h5t.decode(a.h5type)
        aid = h5a.create(obj.id, a.name.encode(), tid, _space(a.shape))
        if a.values == "raw":
            aid.write(np.ascontiguousarray(a.value), mtype=tid)
        elif a.values == "vlen":
            enc = "utf-8" if tid.get_cset() == h5t.CSET_UTF8 else "ascii"
            dt = h5py.string_dtype(enc)
            val = np.empty(a.shape or (), dtype=dt)
            val[...] = a.value
            aid.write(val)  # h5py's vlen conversion, into the exact file type
    return later


def _is_region(h5type: bytes) -> bool:
    from h5py import h5t

    return bool(h5t.decode(h5type).equal(h5t.STD_REF_DSETREG))


def _make_refs(f: Any, targets: Any, shape: Tuple[int, ...], region: bool) -> np.ndarray:
    import h5py
    from h5py import h5r, h5s

    out = np.empty(len(targets), dtype=h5py.regionref_dtype if region else h5py.ref_dtype)
    t: RefTarget
    for k, t in enumerate(targets):
        if not t.path:
            out[k] = h5r.Reference() if not region else h5r.RegionReference()
        elif t.region is not None:
            out[k] = h5r.create(f.id, t.path.encode(), h5r.DATASET_REGION, h5s.decode(t.region))
        else:
            out[k] = h5r.create(f.id, t.path.encode(), h5r.OBJECT)
    return out.reshape(shape)


def _write_inline(obj: Any, ds: DatasetPlan) -> None:
    from h5py import h5s, h5t

    if ds.space == "null":
        return
    values = np.asarray(ds.inline, dtype=object if ds.values == "vlen" else None)
    if ds.values == "vlen":
        if values.size:
            obj[()] = values
        return
    buf = np.ascontiguousarray(values)
    if buf.size:
        obj.id.write(h5s.ALL, h5s.ALL, buf, mtype=h5t.decode(ds.h5type))


def _create_dataset(f: Any, ds: DatasetPlan) -> Any:
    """Create ``ds`` with the source's type, dataspace, layout, chunks, filters and fill."""
    import h5py
    from h5py import h5d, h5p, h5s, h5t

    parent, _, name = ds.path.rpartition("/")
    group = f.require_group(parent or "/")
    tid = h5t.decode(ds.h5type)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if ds.space == "null":
        space = _space(None)
    elif ds.space == "scalar" or not ds.shape:
        space = _space(())
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
                dcpl.set_filter(flt.code, flt.flags, flt.setup)
        elif ds.layout == "compact":
            dcpl.set_layout(h5d.COMPACT)
        space = _space(shape, tuple(maxshape))
    if ds.fillvalue is not None:
        dcpl.set_fill_value(np.array(ds.fillvalue, dtype=ds.dtype))
    if ds.fill_time >= 0:
        dcpl.set_fill_time(ds.fill_time)
    compact_late = ds.layout == "compact" and ds.alloc_time != h5d.ALLOC_TIME_EARLY
    if ds.alloc_time >= 0 and not compact_late:
        dcpl.set_alloc_time(ds.alloc_time)
    dsid = h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    return h5py.Dataset(dsid)
