"""Describe one HDF5 dataset or attribute for the plan: exact type, storage, values, references.

Called by :mod:`stager.kinds.h5.plan` on the planning rank (serial h5py). Every value
that travels in the plan is read *raw*, with the object's own file type as the memory
type (:mod:`stager.kinds.h5.types`), so a 20-byte null-terminated string keeps its 20
bytes and a big-endian integer its byte order. What cannot be staged (variable-length
sequences, references or variable-length strings inside compounds or arrays, HDF5
1.12's ``H5T_STD_REF``, references whose target the copy will not hold: :class:`RefCheck`)
is refused here, saying why (docs/hook-spec.md, "References"). Top-level references are
*translated*: the plan records each target's path in the copy, and the writer creates
new references to the copy's objects.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hooks.h5entry import Slice
from stager.errors import PlanError
from stager.kinds.h5.filters import (MissingFilter, ensure_available, lossy_filter,
                                       missing_advice, setup_values, stored_pipeline)
from stager.kinds.h5.links import LinkedFiles, find_file, vds_sources, vds_storage
from stager.kinds.h5.types import (OBJECT_OVERHEAD, Attr, DatasetPlan, RefTarget, raw_dtype,
                                     region_summary)

__all__ = ["Ctx", "RefCheck", "Unsupported", "classify", "describe", "read_attrs",
           "INLINE_BYTES", "VLEN_LIMIT", "REF_LIMIT"]

#: Datasets with at most this many selected bytes are read while planning.
INLINE_BYTES = 64 << 10
#: Largest variable-length string dataset staged (it is read while planning).
VLEN_LIMIT = 1 << 20
#: Most references one dataset may hold (they are translated while planning).
REF_LIMIT = 100_000


class Unsupported(Exception):
    """A type the stager cannot copy (the message says why)."""


@dataclass(frozen=True)
class Ctx:
    """The file an object is read from, and how its paths map into the copy.

    For the plan's own source file the mapping is the identity; for an object
    reached through an external link, ``prefix`` (its path in the target file)
    maps to ``copy_prefix`` (the link's path in the copy).
    """

    file: Any
    name: str
    read_file: str = ""
    prefix: str = "/"
    copy_prefix: str = "/"

    def to_copy(self, path: str) -> Optional[str]:
        """The copy's path of ``path`` (in this file), or None if the copy cannot hold it."""
        if not self.read_file:
            return path
        if path == self.prefix:
            return self.copy_prefix
        if path.startswith(self.prefix.rstrip("/") + "/"):
            return self.copy_prefix.rstrip("/") + path[len(self.prefix.rstrip("/")):]
        return None


@dataclass(frozen=True)
class RefCheck:
    """A reference the copy must be able to hold: its target must be staged (whole, for a
    region reference). ``what`` names the reference for the message."""

    where: str
    what: str
    target: str
    region: bool


def classify(tid: Any) -> str:
    """How values of HDF5 type ``tid`` move: "raw", "vlen" or "refs".

    Raises
    ------
    Unsupported
    """
    from h5py import h5t

    cls = tid.get_class()
    if cls == h5t.REFERENCE:
        if tid.equal(h5t.STD_REF_OBJ) or tid.equal(h5t.STD_REF_DSETREG):
            return "refs"
        raise Unsupported("an HDF5 1.12 reference (H5T_STD_REF), which h5py cannot read")
    if cls == h5t.STRING and tid.is_variable_str():
        return "vlen"
    if cls == h5t.VLEN:
        raise Unsupported("a variable-length sequence")
    if cls == h5t.COMPOUND:
        for i in range(tid.get_nmembers()):
            if classify(tid.get_member_type(i)) != "raw":
                name = tid.get_member_name(i).decode(errors="replace")
                raise Unsupported(f"field {name!r} is a reference or variable-length string "
                                  "(only top-level ones are copied)")
    if cls == h5t.ARRAY and classify(tid.get_super()) != "raw":
        raise Unsupported("an array of references or variable-length strings")
    return "raw"


def _encode(tid: Any) -> bytes:
    """``H5Tencode`` of a type; a committed (named) type is encoded as a transient copy."""
    return tid.copy().encode()


def _translate(refs: Any, file: Any, ctx: Ctx, where: str, what: str,
               checks: List[RefCheck]) -> Tuple[RefTarget, ...]:
    """References of the source → :class:`RefTarget` in the copy's namespace."""
    import h5py
    from h5py import h5r

    out = []
    for k, ref in enumerate(np.asarray(refs, dtype=object).ravel()):
        if not ref:
            out.append(RefTarget(""))
            continue
        name = h5r.get_name(ref, file.id)
        name = name.decode(errors="surrogateescape") if isinstance(name, bytes) else str(name)
        target = ctx.to_copy(name)
        label = f"{what}[{k}]"
        if target is None:
            raise PlanError(f"{where}: {label} is a reference to {name} in {ctx.name}, outside "
                            "the externally linked object being copied; the copy cannot hold "
                            "it: leave the reference out of the selection")
        region = isinstance(ref, h5py.RegionReference)
        checks.append(RefCheck(where, label, target, region))
        if region:
            space = h5r.get_region(ref, file.id)
            out.append(RefTarget(target, space.encode(), region_summary(space)))
        else:
            out.append(RefTarget(target))
    return tuple(out)


def read_attrs(obj: Any, where: str, ctx: Ctx, checks: List[RefCheck]) -> Tuple[Attr, ...]:
    """Every attribute of ``obj``, raw in its exact type (references translated)."""
    import h5py
    from h5py import h5a, h5s

    out = []
    for name in obj.attrs:
        label = f"attribute {name!r} of {ctx.name}:{obj.name}"
        try:
            aid = h5a.open(obj.id, name.encode())
            tid = aid.get_type()
            kind = classify(tid)
            if aid.get_space().get_simple_extent_type() == h5s.NULL:
                out.append(Attr(name, _encode(tid), None, "null"))
                continue
            shape = tuple(aid.shape)
            if kind == "raw":
                value: Any = np.empty(shape, raw_dtype(tid.get_size()))
                aid.read(value, mtype=tid)
            elif kind == "vlen":
                value = np.empty(shape, dtype=h5py.string_dtype("ascii"))  # bytes, exact
                aid.read(value)
            else:
                value = _translate(obj.attrs[name], obj.file, ctx, where, label, checks)
            out.append(Attr(name, _encode(tid), shape, kind, value))
        except Unsupported as e:
            raise PlanError(f"{where}: {label} cannot be copied: unsupported dtype ({e})") from e
        except (TypeError, OSError, ValueError, KeyError) as e:
            raise PlanError(f"{where}: {label} cannot be read: {e}") from e
    return tuple(out)


def read_raw(dsid: Any, tid: Any, shape: Tuple[int, ...], start: int, stop: int,
             step: int) -> np.ndarray:
    """Rows ``start:stop:step`` of a dataset, raw in its file type (no conversion)."""
    from h5py import h5s

    if not shape:
        buf = np.empty((), raw_dtype(tid.get_size()))
        dsid.read(h5s.ALL, h5s.ALL, buf, mtype=tid)
        return buf
    rows = len(range(start, stop, step))
    buf = np.empty((rows,) + tuple(shape[1:]), raw_dtype(tid.get_size()))
    if buf.size == 0:
        return buf
    fspace = dsid.get_space()
    fspace.select_hyperslab((start,) + (0,) * (len(shape) - 1), (rows,) + tuple(shape[1:]),
                            stride=(step,) + (1,) * (len(shape) - 1))
    dsid.read(h5s.create_simple(buf.shape), fspace, buf, mtype=tid)
    return buf


def _stat(path: str) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _virtual(ds: Any, dcpl: Any, where: str, ctx: Ctx, files: LinkedFiles,
             linked: Dict[str, Tuple[int, int]]) -> Tuple[str, Any, Any, int]:
    """Check a VDS's sources exist; the copy's (layout, chunks, filters) and the sources'
    stored bytes."""
    srcs = []
    for s in vds_sources(dcpl, ctx.name):
        if s.path is None:
            raise PlanError(
                f"{where} is a virtual dataset whose source file {s.file} (dataset "
                f"{s.dataset}) does not exist (looked in: {', '.join(s.looked)}); HDF5 would "
                "silently return the fill value for its frames, so the stager refuses: make "
                "the file available there (or set HDF5_VDS_PREFIX), or leave this dataset out")
        f = ctx.file if s.file == "." else files.open(s.path)
        target = f.get(s.dataset)
        if target is None:
            raise PlanError(f"{where} is a virtual dataset whose source {s.path} has no "
                            f"dataset {s.dataset}; HDF5 would silently return the fill value "
                            "for its frames: fix the data file, or leave this dataset out")
        if s.file != ".":
            linked[s.path] = _stat(s.path)
        srcs.append(target)
    layout, chunks, filters = vds_storage(srcs, tuple(ds.shape), tuple(ds.maxshape))
    return layout, chunks, filters, sum(int(t.id.get_storage_size()) for t in srcs)


def _external_storage(dcpl: Any, where: str, linked: Dict[str, Tuple[int, int]]) -> None:
    """Contiguous data kept in external raw files (``H5Pset_external``): they must exist."""
    prefix = os.environ.get("HDF5_EXTFILE_PREFIX", "")
    for i in range(dcpl.get_external_count()):
        name = dcpl.get_external(i)[0]
        name = name.decode(errors="surrogateescape") if isinstance(name, bytes) else name
        path = name if os.path.isabs(name) else os.path.join(prefix or os.getcwd(), name)
        if not os.path.isfile(path):
            raise PlanError(f"{where} keeps its data in the external raw file {name}, which "
                            f"does not exist at {path}; run from the folder HDF5 resolves it "
                            "against (or set HDF5_EXTFILE_PREFIX)")
        linked[os.path.abspath(path)] = _stat(path)


def describe(ds: Any, copy_path: str, sl: Optional[Slice], where: str, ctx: Ctx,
             inline_bytes: int, files: LinkedFiles, linked: Dict[str, Tuple[int, int]],
             checks: List[RefCheck]) -> DatasetPlan:
    """Plan one dataset selection (``where`` = ``FILE:LINE:COL: SOURCE:/path``).

    Raises
    ------
    PlanError
        Unsupported type, slice out of range or on a scalar, a missing filter, a
        missing VDS source or external raw file.
    """
    from h5py import h5d, h5s

    tid = ds.id.get_type()
    try:
        kind = classify(tid)
    except Unsupported as e:
        raise PlanError(f"{where} has unsupported dtype {ds.dtype} ({e}); numbers, booleans, "
                        "enums, strings, compounds, arrays, opaque types and references can be "
                        "staged") from e
    space_type = ds.id.get_space().get_simple_extent_type()
    space = {h5s.NULL: "null", h5s.SCALAR: "scalar"}.get(space_type, "simple")
    shape = () if space == "null" else tuple(int(n) for n in ds.shape)
    if sl is not None and not shape:
        raise PlanError(f"{where} is a {space} dataset; the slice {sl} needs at least one axis")
    try:
        start, stop, step = sl.resolve(shape[0]) if sl is not None else \
            (0, shape[0] if shape else 0, 1)
    except ValueError as e:
        raise PlanError(f"{where}: slice {sl} out of range: {e} ({copy_path} has shape "
                        f"{shape}); fix the slice") from e
    dcpl = ds.id.get_create_plist()
    layout_id = dcpl.get_layout()
    origin = "external" if ctx.read_file else ""
    chunks = tuple(ds.chunks) if ds.chunks else None
    filters = stored_pipeline(dcpl) if layout_id == h5d.CHUNKED else ()
    layout = {h5d.CHUNKED: "chunked", h5d.COMPACT: "compact"}.get(layout_id, "contiguous")
    stored = -1
    if layout_id == h5d.VIRTUAL:
        layout, chunks, filters, stored = _virtual(ds, dcpl, where, ctx, files, linked)
        origin = "virtual"
    elif layout_id == h5d.CONTIGUOUS and dcpl.get_external_count():
        _external_storage(dcpl, where, linked)
        origin = "efile"
    if filters:
        try:
            missing = ensure_available(f.code for f in filters)
            if missing:
                flt = next(f for f in filters if f.code == missing[0])
                raise MissingFilter(missing_advice(flt.code, flt.name))
            assert chunks is not None
            filters = setup_values(_encode(tid), chunks, filters)
        except (MissingFilter, ValueError) as e:
            raise PlanError(f"{where}: {e}") from e
    lossy = lossy_filter(filters)
    if lossy is not None:
        _only_stored_chunks(lossy, origin, chunks, shape, start, stop, step,
                            tuple(ds.maxshape) if shape else (), where)
    fill = None
    if kind == "raw" and dcpl.fill_value_defined() == h5d.FILL_VALUE_USER_DEFINED:
        fill = ds.fillvalue
    d = DatasetPlan(path=copy_path, shape=shape, dtype=ds.dtype, h5type=_encode(tid),
                    layout=layout, chunks=chunks,
                    maxshape=tuple(ds.maxshape) if shape else (),
                    filters=filters, fillvalue=fill,
                    attrs=read_attrs(ds, where, ctx, checks), start=start, stop=stop,
                    step=step, sliced=sl is not None, space=space, values=kind,
                    itemsize=int(tid.get_size()), origin=origin,
                    read_file=ctx.read_file,
                    read_path=ds.name if (ctx.read_file or ds.name != copy_path) else "",
                    fill_time=int(dcpl.get_fill_time()) if origin != "virtual" else -1,
                    alloc_time=int(dcpl.get_alloc_time()) if origin != "virtual" else -1)
    # a lossy dataset moves as its stored chunks only (never re-encoded): not inline
    inline = None if lossy is not None else \
        _inline(ds, d, tid, kind, where, ctx, inline_bytes, checks)
    return replace(d, inline=inline, est_bytes=_estimate(ds, d, stored))


def _only_stored_chunks(flt: Any, origin: str, chunks: Optional[Tuple[int, ...]],
                        shape: Tuple[int, ...], start: int, stop: int, step: int,
                        maxshape: Tuple[Optional[int], ...], where: str) -> None:
    """Refuse a lossy dataset's selection that could not move as stored chunks."""
    what = f"HDF5 filter {flt.code} ({flt.name}) is lossy"
    if origin == "virtual":
        raise PlanError(f"{where}: {what}, and a virtual dataset has no stored chunks of its "
                        "own: its values would be compressed again and lose precision a "
                        "second time; stage the source files' datasets instead")
    if not chunks or not shape:
        return
    c0 = chunks[0]
    clamped = maxshape and maxshape[0] is not None and len(range(start, stop, step)) < c0
    if step != 1 or start % c0 or (stop % c0 and stop != shape[0]) or clamped:
        raise PlanError(f"{where}: {what}: the selection [{start}:{stop}:{step}] does not "
                        f"start and end on chunk boundaries ({c0} frames per chunk) with "
                        "step 1, so its values would be compressed again and lose precision "
                        f"a second time; select [a:b] with a and b multiples of {c0}, or the "
                        "whole dataset")


def _inline(ds: Any, d: DatasetPlan, tid: Any, kind: str, where: str, ctx: Ctx,
            inline_bytes: int, checks: List[RefCheck]) -> Any:
    """The selected values, read now, for small, scalar, null, vlen and reference datasets."""
    if d.space == "null":
        return np.empty((0,), raw_dtype(d.itemsize))
    if kind == "refs":
        if d.rows * max(1, int(np.prod(d.shape[1:], dtype=np.int64))) > REF_LIMIT:
            raise PlanError(f"{where} holds more than {REF_LIMIT} references (unsupported "
                            "dtype for staging at this size); stage the whole file with a "
                            "'files' block")
        values = ds[d.start:d.stop:d.step] if d.shape else ds[()]
        return _translate(values, ds.file, ctx, where, ds.name, checks)
    if kind == "vlen":
        values = np.asarray(ds[d.start:d.stop:d.step] if d.shape else ds[()], dtype=object)
        values = np.vectorize(lambda v: v.encode("utf-8", "surrogateescape")
                              if isinstance(v, str) else bytes(v), otypes=[object])(values) \
            if values.size else values
        if sum(len(v) for v in values.ravel()) > VLEN_LIMIT:
            raise PlanError(f"{where} is a variable-length string dataset larger than "
                            f"{VLEN_LIMIT >> 20} MiB (unsupported dtype for staging at this "
                            "size); select other datasets or stage the whole file with a "
                            "'files' block")
        return values
    if not d.shape or d.nbytes <= inline_bytes:
        return read_raw(ds.id, tid, d.shape, d.start, d.stop, d.step)
    return None


def _estimate(ds: Any, d: DatasetPlan, stored: int = -1) -> int:
    """Bytes the output dataset is expected to occupy (capacity check).

    Filtered data take the stored bytes per selected frame of the source (of
    its sources, ``stored``, for a VDS), plus 5 %, as compressed sizes of
    different frames vary; unfiltered data take their raw size.
    """
    raw = d.nbytes
    if d.filters and d.shape and d.shape[0]:
        if stored < 0:
            stored = int(ds.id.get_storage_size())
        raw = math.ceil(stored * d.rows / d.shape[0] * 1.05)
    chunks = 1
    if d.chunks:
        chunks = math.prod(math.ceil(n / c) for n, c in zip(d.out_shape, d.chunks) if c)
    return raw + OBJECT_OVERHEAD + 64 * chunks


def external_target(ctx: Ctx, link: Any, copy_path: str, where: str,
                    files: LinkedFiles) -> Tuple[Any, str]:
    """The opened file and path an external link at ``copy_path`` points to.

    Raises
    ------
    PlanError
        The target file or the object in it does not exist (exit 2 at ``stager stage``).
    """
    path, looked = find_file(link.filename, ctx.name, "HDF5_EXT_PREFIX")
    if path is None:
        raise PlanError(f"{where} is an external link to {link.filename}:"
                        f"{link.path}, and {link.filename} does not exist (looked in: "
                        f"{', '.join(looked)}); make the data file available there (or set "
                        "HDF5_EXT_PREFIX), or leave this link out of the selection")
    f = files.open(path)
    if f.get(link.path) is None:
        raise PlanError(f"{where} is an external link to {path}:{link.path}, "
                        f"which holds no object {link.path}; fix the data file, or leave "
                        "this link out of the selection")
    return f, path
