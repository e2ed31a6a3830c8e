"""Eiger-like and NXmx-with-VDS corpus files (see :mod:`tests.data.corpus` for the sources).

* DECTRIS Eiger file-writer layout: ``<prefix>_master.h5`` holds the metadata
  (``/entry/instrument/detector`` with ``bit_depth_image``, ``pixel_mask``,
  ``detectorSpecific``, ...) and ``/entry/data/data_NNNNNN`` **external links**
  to ``<prefix>_data_NNNNNN.h5`` files whose ``/entry/data/data`` is a
  ``(n, H, W)`` uint32 or uint16 stack, one chunk per frame, bitshuffle+LZ4
  (HDF5 filter 32008), with ``image_nr_low``/``image_nr_high`` (1-based) attributes.
  Pixels the detector marks as inactive hold ``2**bit_depth - 1``.
* NXmx master with ``/entry/data/data`` as a **virtual dataset** over several data
  files, ``/entry/definition = "NXmx"``, frame number first (NXmx: ``data[np, i, j]``).
"""
from __future__ import annotations

import os

import numpy as np

from .h5util import describe, frames_digest, write_fixed_string

H, W = 24, 20


def eiger_frames(n: int, dtype, seed: int) -> np.ndarray:
    """Counts with a few hot pixels above 65535 (uint32 only) and the inactive-pixel
    marker ``2**bits - 1`` on a module gap row, as an Eiger writes them."""
    rng = np.random.default_rng(seed)
    big = np.iinfo(dtype).max
    frames = rng.poisson(20, (n, H, W)).astype(dtype)
    frames[:, 11, :] = big                      # horizontal module gap
    if np.dtype(dtype).itemsize >= 4:
        frames[:, 3, 5] = 70_000 + np.arange(n)  # more counts than uint16 holds
    return frames


def _nxclass(group, cls: str):
    group.attrs["NX_class"] = np.bytes_(cls)
    return group


def _master_metadata(f, bits: int, n_images: int) -> None:
    entry = _nxclass(f.require_group("entry"), "NXentry")
    write_fixed_string(entry, "definition", b"NXmx", 4, "nullpad", "ascii")
    entry["start_time"] = np.bytes_("2026-11-21T10:00:00Z")
    inst = _nxclass(entry.create_group("instrument"), "NXinstrument")
    write_fixed_string(inst, "name", b"SIM-BL 1", 16, "nullterm", "ascii")
    write_fixed_string(inst["name"], "short_name", b"SIMBL", 8, "nullterm", "ascii", attr=True)
    det = _nxclass(inst.create_group("detector"), "NXdetector")
    det["bit_depth_image"] = np.uint32(bits)
    det["bit_depth_readout"] = np.uint32(bits)
    det["count_time"] = np.float32(0.01)
    det["count_time"].attrs["units"] = np.bytes_("s")
    write_fixed_string(det, "description", b"Dectris EIGER2 Si 500K (simulated)", 34,
                       "nullterm", "ascii")
    det["sensor_material"] = np.bytes_("Si")
    det["sensor_thickness"] = np.float32(0.00045)
    det["sensor_thickness"].attrs["units"] = np.bytes_("m")
    det["saturation_value"] = np.int64(2**bits - 2)
    mask = np.zeros((H, W), np.uint32)
    mask[11, :] = 1                            # bit 0: gap
    det.create_dataset("pixel_mask", data=mask, compression="gzip", chunks=(H, W))
    spec = _nxclass(det.create_group("detectorSpecific"), "NXcollection")
    spec["nimages"] = np.uint32(n_images)
    spec["ntrigger"] = np.uint32(1)
    spec["x_pixels_in_detector"] = np.uint32(W)
    spec["y_pixels_in_detector"] = np.uint32(H)
    beam = _nxclass(inst.create_group("beam"), "NXbeam")
    beam["incident_wavelength"] = np.float64(0.9763)
    beam["incident_wavelength"].attrs["units"] = np.bytes_("angstrom")
    src = _nxclass(entry.create_group("source"), "NXsource")
    # the case: NXmx source/name as a 20-byte null-terminated string
    write_fixed_string(src, "name", b"Simulated Synchrotr", 20, "nullterm", "ascii")
    sample = _nxclass(entry.create_group("sample"), "NXsample")
    sample["depends_on"] = np.bytes_(".")
    _nxclass(entry.create_group("data"), "NXdata")


def _data_file(path: str, frames: np.ndarray, first: int, dtype_note: str) -> dict:
    import h5py
    import hdf5plugin

    with h5py.File(path, "w") as f:
        entry = _nxclass(f.create_group("entry"), "NXentry")
        data = _nxclass(entry.create_group("data"), "NXdata")
        d = data.create_dataset("data", data=frames, chunks=(1, H, W),
                                **hdf5plugin.Bitshuffle(cname="lz4"))
        d.attrs["image_nr_low"] = np.int32(first)
        d.attrs["image_nr_high"] = np.int32(first + len(frames) - 1)
        desc = describe(d)
    desc["note"] = dtype_note
    return desc


def build_eiger(root: str, prefix: str, n_per_file=(3, 2), dtype=np.uint32, seed: int = 1,
                drop_file: int | None = None) -> dict:
    """An Eiger series; ``drop_file`` (1-based) is linked from the master but not written."""
    import h5py

    os.makedirs(root, exist_ok=True)
    bits = np.dtype(dtype).itemsize * 8
    frames = eiger_frames(sum(n_per_file), dtype, seed)
    master = os.path.join(root, f"{prefix}_master.h5")
    datasets, links, files = {}, {}, [os.path.basename(master)]
    first = 1
    with h5py.File(master, "w") as f:
        _master_metadata(f, bits, len(frames))
        for k, n in enumerate(n_per_file, 1):
            name = f"{prefix}_data_{k:06d}.h5"
            link = f"/entry/data/data_{k:06d}"
            f[link] = h5py.ExternalLink(name, "/entry/data/data")
            exists = k != drop_file
            links[link] = {"kind": "external", "file": name, "path": "/entry/data/data",
                           "target_exists": exists}
            if exists:
                files.append(name)
                datasets[link] = _data_file(os.path.join(root, name),
                                            frames[first - 1:first - 1 + n], first,
                                            f"{bits}-bit Eiger frames")
            first += n
        # NXmx asks for the detector's data; the Eiger master links it softly
        f["/entry/instrument/detector/data"] = h5py.SoftLink("/entry/data/data_000001")
        links["/entry/instrument/detector/data"] = {"kind": "soft",
                                                    "path": "/entry/data/data_000001"}
        for path in ("/entry/instrument/detector/pixel_mask",
                     "/entry/source/name", "/entry/definition"):
            datasets[path] = describe(f[path])
    return {"frames": frames, "master": os.path.basename(master), "datasets": datasets,
            "links": links, "files": files, "bits": bits}


def build_nxmx_vds(root: str, prefix: str, n_per_file=(2, 3, 2), seed: int = 2,
                   drop_file: int | None = None) -> dict:
    """NXmx master whose ``/entry/data/data`` is a VDS over one stack per data file."""
    import h5py
    import hdf5plugin

    os.makedirs(root, exist_ok=True)
    frames = eiger_frames(sum(n_per_file), np.uint16, seed)
    layout = h5py.VirtualLayout((len(frames), H, W), np.uint16)
    files, sources, first = [], [], 0
    for k, n in enumerate(n_per_file, 1):
        name = f"{prefix}_data_{k:06d}.h5"
        if k != drop_file:
            with h5py.File(os.path.join(root, name), "w") as f:
                f.create_dataset("entry/data/data", data=frames[first:first + n],
                                 chunks=(1, H, W), **hdf5plugin.Bitshuffle(cname="lz4"))
            files.append(name)
        sources.append({"file": name, "path": "/entry/data/data", "frames": [first, first + n],
                        "exists": k != drop_file})
        # relative name: HDF5 resolves it against the master file's directory
        layout[first:first + n] = h5py.VirtualSource(name, "/entry/data/data", (n, H, W))
        first += n
    master = f"{prefix}_master.h5"
    with h5py.File(os.path.join(root, master), "w") as f:
        _master_metadata(f, 16, len(frames))
        data = f["/entry/data"]
        data.attrs["signal"] = np.bytes_("data")
        data.create_virtual_dataset("data", layout, fillvalue=0)
        f["/entry/instrument/detector/data"] = h5py.SoftLink("/entry/data/data")
        datasets = {"/entry/data/data": describe(f["/entry/data/data"])}
    datasets["/entry/data/data"]["vds_sources"] = sources
    return {"frames": frames, "master": master, "files": [master] + files,
            "datasets": datasets,
            "links": {"/entry/instrument/detector/data": {"kind": "soft",
                                                          "path": "/entry/data/data"}}}


def entries(root: str) -> list:
    """Manifest entries of the NXmx/Eiger part of the corpus (writes the files)."""
    out = []
    for name, dtype, seed in (("eiger_u32", np.uint32, 1), ("eiger_u16", np.uint16, 3)):
        e = build_eiger(os.path.join(root, name), "series_1", dtype=dtype, seed=seed)
        bits = e["bits"]
        out.append({
            "name": name, "path": f"{name}/{e['master']}", "format": "hdf5",
            "origin": "built from the NXmx definition and the DECTRIS Eiger file-writer layout",
            "requires": ["hdf5plugin"], "files": [f"{name}/{p}" for p in e["files"]],
            "datasets": e["datasets"], "links": e["links"],
            "reads": [{
                "options": {}, "expect": "frames", "frame_axis": 0, "parts": 2,
                "n_frames": len(e["frames"]), "frame_shape": [H, W],
                "dtype": np.dtype(dtype).name, "sha256": frames_digest(e["frames"]),
                "masked_value": 2**bits - 1,
                "max_unmasked": int(e["frames"][e["frames"] != 2**bits - 1].max()),
            }, {
                "options": {"dtype": "uint16"},
                "expect": "error" if bits == 32 else "frames",
                "match": "do not fit uint16" if bits == 32 else None,
                "n_frames": len(e["frames"]), "frame_shape": [H, W], "dtype": "uint16",
                "sha256": None if bits == 32 else frames_digest(e["frames"]),
            }, {
                "options": {"dtype": "float32"}, "expect": "frames",
                "n_frames": len(e["frames"]), "frame_shape": [H, W], "dtype": "float32",
                "masked_to": "nan",
            }],
            "stage": {"expect": "copy", "selections": ["/entry/data/data_000001[1:3]"],
                      "note": "external links followed: the copy holds regular datasets"},
        })
    e = build_eiger(os.path.join(root, "eiger_missing"), "series_2", drop_file=2, seed=4)
    out.append({
        "name": "eiger_missing_data_file", "path": f"eiger_missing/{e['master']}",
        "format": "hdf5", "origin": "as eiger_u32, its second data file not written",
        "requires": ["hdf5plugin"], "files": [f"eiger_missing/{p}" for p in e["files"]],
        "datasets": e["datasets"], "links": e["links"],
        "reads": [{"options": {}, "expect": "error",
                   "match": "series_2_data_000002.h5"}],
        "stage": {"expect": "refuse", "exit": 2,
                  "match": ["/entry/data/data_000002", "series_2_data_000002.h5"]},
    })
    v = build_nxmx_vds(os.path.join(root, "nxmx_vds"), "scan")
    out.append({
        "name": "nxmx_vds", "path": f"nxmx_vds/{v['master']}", "format": "hdf5",
        "origin": "built from the NXmx definition (/entry/data/data as a VDS over data files)",
        "requires": ["hdf5plugin"], "files": [f"nxmx_vds/{p}" for p in v["files"]],
        "datasets": v["datasets"], "links": v["links"],
        "reads": [{"options": {}, "expect": "frames", "frame_axis": 0,
                   "n_frames": len(v["frames"]), "frame_shape": [H, W], "dtype": "uint16",
                   "sha256": frames_digest(v["frames"]), "masked_value": 65535,
                   "max_unmasked": int(v["frames"][v["frames"] != 65535].max())}],
        "stage": {"expect": "copy", "selections": ["/entry/data/data[2:6]"],
                  "note": "VDS followed: the copy holds /entry/data/data as a regular dataset"},
    })
    v = build_nxmx_vds(os.path.join(root, "nxmx_vds_missing"), "scan", drop_file=3, seed=5)
    out.append({
        "name": "nxmx_vds_missing_source", "path": f"nxmx_vds_missing/{v['master']}",
        "format": "hdf5", "origin": "as nxmx_vds, its third data file not written (HDF5 would "
        "silently return the fill value for its frames)",
        "requires": ["hdf5plugin"], "files": [f"nxmx_vds_missing/{p}" for p in v["files"]],
        "datasets": v["datasets"], "links": v["links"],
        "reads": [{"options": {}, "expect": "error", "match": "scan_data_000003.h5"}],
        "stage": {"expect": "refuse", "exit": 2,
                  "match": ["/entry/data/data", "scan_data_000003.h5"]},
    })
    return out
