"""Is a node-local HDF5 copy the same as its source? Every difference, as readable text.

Used by the h5 staging tests (``tests/mpi/test_stager_stage_h5*.py``,
``tests/e2e/test_stager_h5_*.py``).
Compared, independently of the stager's own code: HDF5 file types (``H5Tequal``:
string padding and character set, byte order, enum and compound layouts),
dataspace class, raw values in the file type (for a selection: the selected
rows), variable-length strings, references (by the path they lead to),
chunk shape, stored filter pipeline (ids, flags, client values; the leading
version fields of bitshuffle/Blosc/Blosc2/LZF ignored), fill value, and
attributes of every kind (``stager_*`` attributes of the copy excepted). Soft
links must stay soft links; external links and virtual datasets must have
become regular datasets holding the target's values.
"""
from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

VERSION_FIELDS = {32000: 2, 32001: 2, 32008: 2, 32026: 2}


def _raw(obj_id: Any, shape: Any) -> Optional[np.ndarray]:
    from h5py import h5s

    tid = obj_id.get_type()
    if obj_id.get_space().get_simple_extent_type() == h5s.NULL:
        return None
    buf = np.empty(tuple(shape), np.dtype((np.void, max(tid.get_size(), 1))))
    if buf.size:
        if hasattr(obj_id, "get_create_plist") and hasattr(obj_id, "read_direct_chunk"):
            obj_id.read(h5s.ALL, h5s.ALL, buf, mtype=tid)
        else:
            obj_id.read(buf, mtype=tid)
    return buf


def _kind(tid: Any) -> str:
    from h5py import h5t

    if tid.get_class() == h5t.REFERENCE:
        return "refs"
    if tid.get_class() == h5t.STRING and tid.is_variable_str():
        return "vlen"
    return "raw"


def _ref_names(values: Any, f: Any) -> List[str]:
    from h5py import h5r

    out = []
    for r in np.asarray(values, dtype=object).ravel():
        out.append(h5r.get_name(r, f.id).decode() if r else "")
    return out


def _pipeline(ds: Any) -> list:
    dcpl = ds.id.get_create_plist()
    out = []
    for i in range(dcpl.get_nfilters()):
        code, flags, values, _ = dcpl.get_filter(i)
        out.append((int(code), int(flags), tuple(values)[VERSION_FIELDS.get(int(code), 0):]))
    return out


def attrs_differ(s: Any, c: Any, where: str) -> List[str]:
    from h5py import h5a

    out = []
    sn = sorted(s.attrs)
    cn = sorted(n for n in c.attrs if not n.startswith("stager_"))
    if sn != cn:
        return [f"{where}: attributes {cn}, source has {sn}"]
    for n in sn:
        sa, ca = h5a.open(s.id, n.encode()), h5a.open(c.id, n.encode())
        st, ct = sa.get_type(), ca.get_type()
        if not st.equal(ct):
            out.append(f"{where}@{n}: type {c.attrs.get_id(n).dtype}, source "
                       f"{s.attrs.get_id(n).dtype}")
            continue
        kind = _kind(st)
        if kind == "refs":
            same = _ref_names(s.attrs[n], s.file) == _ref_names(c.attrs[n], c.file)
        elif kind == "vlen":
            same = np.array_equal(np.asarray(s.attrs[n], dtype=object),
                                  np.asarray(c.attrs[n], dtype=object))
        else:
            a, b = _raw(sa, sa.shape or ()), _raw(ca, ca.shape or ())
            same = (a is None and b is None) or (a is not None and b is not None and
                                                 a.shape == b.shape and a.tobytes() == b.tobytes())
        if not same:
            out.append(f"{where}@{n}: value differs")
    return out


def dataset_differs(s: Any, c: Any, where: str, sel: Any = None,
                    layout_from: Any = None) -> List[str]:
    """Differences between source dataset ``s`` (rows ``sel``, a slice, or all) and copy ``c``.

    ``layout_from``: the dataset whose chunks and filters the copy must have
    (a VDS's source dataset), default ``s``.
    """
    from h5py import h5s

    out = attrs_differ(s, c, where)
    st, ct = s.id.get_type(), c.id.get_type()
    if not st.equal(ct):
        return out + [f"{where}: type {c.dtype}, source {s.dtype} (H5Tequal false)"]
    if s.id.get_space().get_simple_extent_type() != c.id.get_space().get_simple_extent_type():
        return out + [f"{where}: dataspace class differs"]
    kind = _kind(st)
    idx = sel if sel is not None else slice(None)
    if kind == "refs":
        want = _ref_names(s[idx] if s.shape else s[()], s.file)
        if want != _ref_names(c[()], c.file):
            out.append(f"{where}: references lead to {_ref_names(c[()], c.file)}, "
                       f"source {want}")
    elif kind == "vlen":
        want = np.asarray(s[idx] if s.shape else s[()], dtype=object)
        if not np.array_equal(want, np.asarray(c[()], dtype=object)):
            out.append(f"{where}: variable-length strings differ")
    elif s.id.get_space().get_simple_extent_type() != h5s.NULL:
        a = _raw(s.id, s.shape)
        b = _raw(c.id, c.shape)
        assert a is not None and b is not None
        if s.shape:
            a = a[idx]
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            out.append(f"{where}: values differ (shape {b.shape}, source {a.shape})")
    lay = layout_from if layout_from is not None else s
    if lay.chunks and c.shape:
        want_chunks = tuple(lay.chunks)
        rows = c.shape[0]
        if s.maxshape and s.maxshape[0] is not None and rows and rows < want_chunks[0]:
            want_chunks = (rows,) + want_chunks[1:]  # clamped: a shorter selection
        if tuple(c.chunks or ()) != want_chunks:
            out.append(f"{where}: chunks {c.chunks}, source {lay.chunks}")
        sp, cp = _pipeline(lay), _pipeline(c)
        # a clamped chunk shape changes what set-up derives from it: ids and flags then
        differ = sp != cp if tuple(c.chunks or ()) == tuple(lay.chunks) else \
            [p[:2] for p in sp] != [p[:2] for p in cp]
        if differ:
            out.append(f"{where}: filters {cp}, source {sp}")
    elif not lay.chunks and c.chunks and not (s.maxshape and None in s.maxshape):
        out.append(f"{where}: copy is chunked {c.chunks}, source is not")
    if kind == "raw" and layout_from is None and s.fillvalue is not None and \
            s.id.get_space().get_simple_extent_type() != h5s.NULL:
        if np.asarray(s.fillvalue).tobytes() != np.asarray(c.fillvalue).tobytes():
            out.append(f"{where}: fill value {c.fillvalue!r}, source {s.fillvalue!r}")
    return out


def _vds_first_source(ds: Any) -> Any:
    import os

    import h5py

    dcpl = ds.id.get_create_plist()
    name, path = dcpl.get_virtual_filename(0), dcpl.get_virtual_dsetname(0)
    f = ds.file if name == "." else h5py.File(
        os.path.join(os.path.dirname(ds.file.filename), name), "r")
    return f[path]


def dataset_same(s: Any, c: Any, where: str, sel: Any = None) -> List[str]:
    from h5py import h5d

    if s.id.get_create_plist().get_layout() == h5d.VIRTUAL:
        src = _vds_first_source(s)
        try:
            return dataset_differs(s, c, where, sel, layout_from=src)
        finally:
            if src.file != s.file:
                src.file.close()
    return dataset_differs(s, c, where, sel)


def group_differs(s: Any, c: Any, where: str) -> List[str]:
    """Differences between source group ``s`` (links followed) and copy group ``c``."""
    import h5py

    out = attrs_differ(s, c, where)
    if sorted(s.keys()) != sorted(c.keys()):
        return out + [f"{where}: holds {sorted(c.keys())}, source {sorted(s.keys())}"]
    for name in sorted(s.keys()):
        w = f"{where.rstrip('/')}/{name}"
        link = s.get(name, getlink=True)
        clink = c.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            if not isinstance(clink, h5py.SoftLink) or clink.path != link.path:
                out.append(f"{w}: soft link to {link.path} became {clink}")
            continue
        if isinstance(clink, (h5py.SoftLink, h5py.ExternalLink)):
            out.append(f"{w}: is a {type(clink).__name__} in the copy")
            continue
        so, co = s[name], c[name]
        if isinstance(so, h5py.Group):
            out += group_differs(so, co, w) if isinstance(co, h5py.Group) else \
                [f"{w}: not a group in the copy"]
        elif isinstance(so, h5py.Dataset):
            out += dataset_same(so, co, w) if isinstance(co, h5py.Dataset) else \
                [f"{w}: not a dataset in the copy"]
    return out
