"""Corpus files of HDF5 types, filters and a filter that is not installed.

* ``strings.h5``: fixed-length strings of every padding (null-terminated,
  null-padded, space-padded) in ASCII and UTF-8, scalar and 1-D, as datasets and
  as attributes; variable-length strings (ASCII, UTF-8).
* ``types.h5``: enums, booleans (h5py's enum), compounds (with array, string and
  nested fields), array and opaque types, null and zero-size dataspaces, scalars,
  big-endian numbers, a compact dataset, attributes of every kind, object and
  region references, soft and hard links.
* ``filters.h5``: the same (8, 24, 20) uint16 stack under every lossless filter
  available here, chunks of 3 frames so ``[1:5]`` is not chunk-aligned.
* ``missing_filter.h5``: chunks stored through filter 305 (LZO), which neither
  HDF5, h5py nor hdf5plugin provides: reading needs a plugin that is not there.
* h5py's own test files (real files from other machines, incl. big-endian s390x).
"""
from __future__ import annotations

import os
import shutil

import numpy as np

from .h5util import describe, frames_digest, write_fixed_string, write_raw_chunks

UTF8 = "Ångström µ-beam ✓".encode()     # 21 bytes, multi-byte characters
STACK_SHAPE = (8, 24, 20)


def _all_datasets(f) -> dict:
    import h5py

    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out["/" + name] = describe(obj)
    f.visititems(visit)
    return out


def build_strings(path: str) -> dict:
    import h5py

    expect = {}
    with h5py.File(path, "w") as f:
        g = f.create_group("fixed")
        for pad in ("nullterm", "nullpad", "spacepad"):
            for cset, value in (("ascii", b"Simulated Synchrotr"), ("utf-8", UTF8)):
                size = len(value) + 1 if pad == "nullterm" else len(value) + 3
                name = f"{pad}_{cset}"
                write_fixed_string(g, name, value, size, pad, cset)
                write_fixed_string(g, name + "_1d", [value, value[:5], b""], size, pad, cset)
                write_fixed_string(g, name, value, size, pad, cset, attr=True)
                expect[f"/fixed/{name}"] = {"value": value.decode(), "size": size,
                                            "pad": pad, "cset": cset}
        # a null-terminated string that fills its whole width (no NUL: real files have it)
        write_fixed_string(g, "nullterm_full_width", b"12345678901234567890", 20,
                           "nullterm", "ascii")
        v = f.create_group("vlen")
        v.create_dataset("ascii", data=np.array([b"one", b"", b"three"], dtype=object),
                         dtype=h5py.string_dtype("ascii"))
        v.create_dataset("utf8", data=[UTF8.decode(), "zwei"], dtype=h5py.string_dtype())
        v["scalar"] = UTF8.decode()
        v.attrs["vlen_utf8"] = UTF8.decode()
        v.attrs.create("vlen_ascii", b"ascii attr", dtype=h5py.string_dtype("ascii"))
        v.attrs["vlen_list"] = ["a", "bb", UTF8.decode()]
        datasets = _all_datasets(f)
    return {"datasets": datasets, "strings": expect}


def build_types(path: str) -> dict:
    import h5py
    from h5py import h5d, h5p, h5s, h5t

    with h5py.File(path, "w") as f:
        e = h5py.enum_dtype({"OFF": 0, "ON": 1, "FAULT": 7}, basetype="i1")
        f.create_dataset("enum", data=np.array([0, 1, 7, 1], np.int8), dtype=e)
        f["bool"] = np.array([True, False, True])              # h5py: enum FALSE/TRUE
        comp = np.dtype([("id", "<i4"), ("pos", "<f8", (3,)), ("label", "S8"),
                         ("flag", "?"), ("inner", [("a", "<u2"), ("b", "<f4")])])
        rec = np.zeros(3, comp)
        rec["id"] = [1, 2, 3]
        rec["pos"] = np.arange(9).reshape(3, 3) / 4
        rec["label"] = [b"spot", b"ring", b"bg"]
        rec["flag"] = [True, False, True]
        rec["inner"]["a"] = [7, 8, 9]
        f["compound"] = rec
        arr_t = h5t.array_create(h5t.IEEE_F32LE, (3,))
        dsid = h5d.create(f.id, b"array_type", arr_t, h5s.create_simple((4,)))
        dsid.write(h5s.ALL, h5s.ALL, np.arange(12, dtype="<f4").reshape(4, 3), mtype=arr_t)
        f["opaque"] = np.array([b"\x00\x01\x02\x03"], dtype="V4")
        f.create_dataset("null_space", data=h5py.Empty("<f4"))
        f.create_dataset("zero_size", shape=(0, 24, 20), dtype="<u2", maxshape=(None, 24, 20),
                         chunks=(1, 24, 20))
        f["scalar"] = np.float64(3.5)
        f["scalar_int"] = np.int64(-7)
        f.create_dataset("big_endian", data=np.arange(2 * 24 * 20).reshape(2, 24, 20),
                         dtype=">u2", chunks=(1, 24, 20))
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.COMPACT)
        small = h5d.create(f.id, b"compact", h5t.STD_I16LE, h5s.create_simple((4, 4)),
                           dcpl=dcpl)
        small.write(h5s.ALL, h5s.ALL, np.arange(16, dtype="<i2").reshape(4, 4))
        a = f["scalar"].attrs
        a["int"] = np.int32(5)
        a["float_array"] = np.linspace(0, 1, 4)
        a["bytes"] = np.bytes_("fixed ascii")
        a["vlen_str"] = "vlen utf-8"
        a["enum"] = np.array(1, np.int8).astype(e)
        a.create("enum_typed", np.int8(7), dtype=e)
        a["bool"] = np.bool_(True)
        a["compound"] = rec[0]
        a["empty"] = h5py.Empty("<i4")
        a["str_array"] = np.array([b"x", b"yy"], dtype="S2")
        refs = f.create_dataset("object_refs", (2,), dtype=h5py.ref_dtype)
        refs[0] = f["compound"].ref
        refs[1] = f["/"].ref
        rrefs = f.create_dataset("region_refs", (1,), dtype=h5py.regionref_dtype)
        rrefs[0] = f["big_endian"].regionref[0, 2:5, 3:7]
        f["compound"].attrs["ref"] = f["enum"].ref
        f["soft"] = h5py.SoftLink("/compound")
        f["hard"] = f["enum"]
        datasets = _all_datasets(f)
    return {"datasets": datasets,
            "links": {"/soft": {"kind": "soft", "path": "/compound"},
                      "/hard": {"kind": "hard", "path": "/enum"}}}


def filter_variants() -> list:
    """(name, create_dataset kwargs, requires) for each lossless filter, hdf5plugin's
    only where it is installed (imported here; none are lossy)."""
    from h5py import h5z

    out = [("gzip", {"compression": "gzip", "compression_opts": 4}, []),
           ("shuffle_gzip", {"compression": "gzip", "shuffle": True}, []),
           ("lzf", {"compression": "lzf"}, []),
           ("fletcher32_gzip", {"compression": "gzip", "fletcher32": True}, []),
           ("scaleoffset", {"scaleoffset": 0}, [])]
    if h5z.filter_avail(4):
        out.append(("szip", {"compression": "szip", "compression_opts": ("nn", 8)}, []))
    try:
        import hdf5plugin
    except ImportError:
        return out
    out += [("bitshuffle_lz4", dict(hdf5plugin.Bitshuffle(cname="lz4")), ["hdf5plugin"]),
            ("bitshuffle_zstd", dict(hdf5plugin.Bitshuffle(cname="zstd")), ["hdf5plugin"]),
            ("lz4", dict(hdf5plugin.LZ4()), ["hdf5plugin"]),
            ("zstd", dict(hdf5plugin.Zstd(clevel=5)), ["hdf5plugin"]),
            ("blosc_lz4_shuffle", dict(hdf5plugin.Blosc(cname="lz4", clevel=5,
                                                        shuffle=hdf5plugin.Blosc.SHUFFLE)),
             ["hdf5plugin"]),
            ("blosc2_zstd", dict(hdf5plugin.Blosc2(cname="zstd", clevel=3)), ["hdf5plugin"]),
            ("bzip2", dict(hdf5plugin.BZip2(blocksize=5)), ["hdf5plugin"])]
    return out


def build_filters(path: str) -> dict:
    import h5py

    stack = np.random.default_rng(8).poisson(30, STACK_SHAPE).astype(np.uint16)
    variants = filter_variants()
    with h5py.File(path, "w") as f:
        for name, kwargs, _ in variants:
            f.create_dataset(name, data=stack, chunks=(3, *STACK_SHAPE[1:]), **kwargs)
        datasets = _all_datasets(f)
    for name, _kwargs, requires in variants:
        datasets["/" + name]["requires"] = requires
    return {"datasets": datasets, "stack": stack}


def build_missing_filter(path: str) -> dict:
    import h5py

    with h5py.File(path, "w") as f:
        entry = f.create_group("entry")
        entry.attrs["NX_class"] = np.bytes_("NXentry")
        data = entry.create_group("data")
        data.attrs["NX_class"] = np.bytes_("NXdata")
        data.attrs["signal"] = np.bytes_("data")
        # the chunk bytes are not LZO output: nothing can decode them, which is the point
        chunk = np.arange(24 * 20, dtype="<u2").tobytes()
        write_raw_chunks(data, "data", (2, 24, 20), "<u2", (1, 24, 20), 305,
                         chunk_bytes=[((0, 0, 0), chunk), ((1, 0, 0), chunk)])
        datasets = _all_datasets(f)
    return {"datasets": datasets}


def h5py_test_files() -> list:
    """Paths of the real HDF5 files h5py ships in its test suite (may be empty)."""
    import importlib.util

    # h5py.tests, wherever this h5py keeps it (Debian: h5py/_debian_h5py_*/tests)
    spec = importlib.util.find_spec("h5py.tests")
    if spec is None or not spec.origin:
        return []
    folder = os.path.join(os.path.dirname(spec.origin), "data_files")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".h5"))


def entries(root: str) -> list:
    import h5py

    out = []
    s = build_strings(os.path.join(root, "strings.h5"))
    out.append({"name": "strings", "path": "strings.h5", "format": "hdf5",
                "origin": "built from the HDF5 specification's string types", "requires": [],
                "files": ["strings.h5"], "datasets": s["datasets"], "strings": s["strings"],
                "reads": [{"options": {}, "expect": "error", "match": "no frame dataset"}],
                "stage": {"expect": "copy", "note": "every padding, cset and size kept"}})
    t = build_types(os.path.join(root, "types.h5"))
    out.append({"name": "types", "path": "types.h5", "format": "hdf5",
                "origin": "built from the HDF5 specification's datatypes and dataspaces",
                "requires": [], "files": ["types.h5"], "datasets": t["datasets"],
                "links": t["links"],
                "reads": [
                    {"options": {"dataset": "/big_endian"}, "expect": "frames",
                     "frame_axis": 0, "n_frames": 2, "frame_shape": [24, 20],
                     "dtype": "uint16", "sha256": frames_digest(
                         np.arange(2 * 24 * 20, dtype=np.uint16).reshape(2, 24, 20))},
                    {"options": {"dataset": "/zero_size"}, "expect": "error",
                     "match": "no frames"},
                    {"options": {"dataset": "/compound"}, "expect": "error",
                     "match": "compound"},
                    {"options": {"dataset": "/null_space"}, "expect": "error",
                     "match": "no data"},
                    {"options": {"dataset": "/soft"}, "expect": "error", "match": "compound"},
                ],
                "stage": {"expect": "translate-or-refuse",
                          "note": "object/region references are translated to the copy or "
                                  "refused at planning naming /object_refs, /region_refs and "
                                  "the attribute /compound@ref"}})
    fl = build_filters(os.path.join(root, "filters.h5"))
    reads = []
    for name, d in fl["datasets"].items():
        # chunks of 3 frames and no NeXus attributes: the frame axis must be given
        reads.append({"options": {"dataset": name, "frame_axis": 0}, "expect": "frames",
                      "frame_axis": 0,
                      "n_frames": STACK_SHAPE[0], "frame_shape": list(STACK_SHAPE[1:]),
                      "dtype": "uint16", "sha256": frames_digest(fl["stack"]),
                      "requires": d["requires"]})
    out.append({"name": "filters", "path": "filters.h5", "format": "hdf5",
                "origin": "h5py and hdf5plugin encoders, one dataset per lossless filter",
                "requires": sorted({r for d in fl["datasets"].values() for r in d["requires"]}),
                "files": ["filters.h5"], "datasets": fl["datasets"], "reads": reads,
                "stage": {"expect": "copy",
                          "selections": [f"{n}[1:5]" for n in fl["datasets"]],
                          "note": "chunks are 3 frames: [1:5] is not chunk-aligned"}})
    m = build_missing_filter(os.path.join(root, "missing_filter.h5"))
    out.append({"name": "missing_filter", "path": "missing_filter.h5", "format": "hdf5",
                "origin": "raw chunks written under filter 305 (LZO), available nowhere here",
                "requires": [], "files": ["missing_filter.h5"], "datasets": m["datasets"],
                "reads": [{"options": {}, "expect": "error", "match": "305"}],
                "stage": {"expect": "refuse", "exit": 2, "match": ["305", "LZO"]}})
    real = os.path.join(root, "h5py_test_files")
    for src in h5py_test_files():
        os.makedirs(real, exist_ok=True)
        name = os.path.basename(src)
        shutil.copyfile(src, os.path.join(real, name))
        with h5py.File(os.path.join(real, name), "r") as f:
            datasets = _all_datasets(f)
        out.append({"name": f"h5py_{name[:-3]}", "path": f"h5py_test_files/{name}",
                    "format": "hdf5", "origin": f"real file shipped with h5py {h5py.__version__} "
                    f"({src})", "requires": [], "files": [f"h5py_test_files/{name}"],
                    "datasets": datasets,
                    "reads": [{"options": {}, "expect": "error", "match": "no frame dataset"}],
                    "stage": {"expect": "copy"}})
    return out
