"""Low-level HDF5 helpers for the corpus builders: exact string types, raw chunks, descriptions.

h5py's high-level API picks string types for you (vlen, or null-padded fixed);
real files use every padding and character set, so the corpus writes those
through the low-level ``h5t``/``h5d``/``h5a`` calls.  :func:`describe` reads a
dataset's storage facts back (layout, chunks, the stored filter pipeline, the
HDF5 type of strings) for the manifest.
"""
from __future__ import annotations

import hashlib

import numpy as np

# HDF Group's registered filter identifiers (support.hdfgroup.org, "Registered
# Filter Plugins") for the filters the corpus uses or refers to.
FILTER_NAMES = {
    1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
    305: "LZO", 307: "bzip2", 32000: "LZF", 32001: "Blosc", 32004: "LZ4",
    32008: "bitshuffle", 32013: "zfp", 32015: "Zstandard", 32017: "SZ", 32024: "SZ3",
    32026: "Blosc2",
}

PADS = {"nullterm": 0, "nullpad": 1, "spacepad": 2}    # H5T_STR_NULLTERM/NULLPAD/SPACEPAD
CSETS = {"ascii": 0, "utf-8": 1}                      # H5T_CSET_ASCII/UTF8


def _string_type(size: int, pad: str, cset: str):
    from h5py import h5t

    tid = h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(PADS[pad])
    tid.set_cset(CSETS[cset])
    return tid


def padded(value: bytes, size: int, pad: str) -> bytes:
    """The ``size`` stored bytes of ``value`` under HDF5 padding ``pad``."""
    if len(value) > size:
        raise ValueError(f"{value!r} is longer than {size} bytes")
    return value.ljust(size, b" " if pad == "spacepad" else b"\0")


def write_fixed_string(obj, name: str, values, size: int, pad: str, cset: str,
                       attr: bool = False) -> None:
    """Write a fixed-length string dataset (or attribute of ``obj``) of exact type.

    ``values`` is one ``bytes`` (scalar dataspace) or a list of them (1-D);
    they are stored padded as ``pad`` says, byte for byte.
    """
    from h5py import h5a, h5d, h5s

    tid = _string_type(size, pad, cset)
    items = [values] if isinstance(values, bytes) else list(values)
    raw = np.array([padded(v, size, pad) for v in items], dtype=f"S{size}")
    if isinstance(values, bytes):
        space = h5s.create(h5s.SCALAR)
        raw = raw.reshape(())
    else:
        space = h5s.create_simple((len(items),))
    key = name.encode()
    if attr:
        aid = h5a.create(obj.id, key, tid, space)
        aid.write(np.ascontiguousarray(raw), mtype=tid)
    else:
        dsid = h5d.create(obj.id, key, tid, space)
        dsid.write(h5s.ALL, h5s.ALL, np.ascontiguousarray(raw), mtype=tid)


def write_raw_chunks(group, name: str, shape, dtype, chunks, filter_id: int,
                     values=(), chunk_bytes=()) -> None:
    """A chunked dataset whose pipeline names ``filter_id`` and whose chunks are stored
    as given, marked as filtered (filter mask 0).

    The filter is set optional so HDF5 accepts it even when it is not available;
    with a 0 filter mask every chunk still needs the filter to be read, which is
    what a file from a machine with the plugin looks like on one without it.
    """
    from h5py import h5d, h5p, h5s, h5t, h5z

    import h5py

    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk(tuple(chunks))
    dcpl.set_filter(filter_id, h5z.FLAG_OPTIONAL, tuple(values))
    tid = h5t.py_create(np.dtype(dtype))
    dsid = h5d.create(group.id, name.encode(), tid, h5s.create_simple(tuple(shape)), dcpl=dcpl)
    dset = h5py.Dataset(dsid)
    for offset, data in chunk_bytes:
        dset.id.write_direct_chunk(tuple(offset), data, filter_mask=0)


def filters_of(dset) -> list:
    """The stored filter pipeline: [{"id", "name", "flags", "values"}] in order."""
    plist = dset.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        fid, flags, values, name = plist.get_filter(i)
        out.append({"id": int(fid), "name": FILTER_NAMES.get(int(fid), name.decode() or "?"),
                    "flags": int(flags), "values": [int(v) for v in values]})
    return out


def string_type_of(tid) -> dict | None:
    """Padding/cset/size of a string HDF5 type, ``None`` for other classes."""
    from h5py import h5t

    if tid.get_class() != h5t.STRING:
        return None
    pads = {v: k for k, v in PADS.items()}
    csets = {v: k for k, v in CSETS.items()}
    vlen = tid.is_variable_str()
    return {"vlen": bool(vlen), "size": None if vlen else int(tid.get_size()),
            "pad": pads.get(tid.get_strpad()), "cset": csets.get(tid.get_cset())}


def describe(dset) -> dict:
    """Storage facts of an h5py dataset for the manifest."""
    from h5py import h5d, h5s, h5t

    layout = {h5d.COMPACT: "compact", h5d.CONTIGUOUS: "contiguous", h5d.CHUNKED: "chunked",
              h5d.VIRTUAL: "virtual"}[dset.id.get_create_plist().get_layout()]
    space = dset.id.get_space().get_simple_extent_type()
    tid = dset.id.get_type()
    classes = {h5t.INTEGER: "integer", h5t.FLOAT: "float", h5t.STRING: "string",
               h5t.COMPOUND: "compound", h5t.ENUM: "enum", h5t.ARRAY: "array",
               h5t.REFERENCE: "reference", h5t.OPAQUE: "opaque", h5t.VLEN: "vlen",
               h5t.BITFIELD: "bitfield"}
    out = {
        "shape": None if dset.shape is None else list(dset.shape),
        "dataspace": {h5s.SCALAR: "scalar", h5s.SIMPLE: "simple", h5s.NULL: "null"}[space],
        "dtype": dset.dtype.str if dset.dtype.names is None else "compound",
        "type_class": classes.get(tid.get_class(), str(tid.get_class())),
        "layout": layout,
        "chunks": None if dset.chunks is None else list(dset.chunks),
        "filters": filters_of(dset) if layout == "chunked" else [],
        "attrs": sorted(dset.attrs.keys()),
    }
    st = string_type_of(tid)
    if st:
        out["string"] = st
    return out


def frames_digest(frames: np.ndarray) -> str:
    """sha256 of a (n, H, W) frame stack as little-endian C-order bytes: the value a
    reader's frames in order must hash to, whatever the file's byte order or layout."""
    arr = np.ascontiguousarray(frames)
    return hashlib.sha256(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()).hexdigest()
