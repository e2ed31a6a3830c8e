"""Corpus files of frame layouts: where the frame axis is, which dtype, which container.

HDF5 (h5py): a Velox EMD frames-last stack ``(16, 16, 5)`` with no NeXus
attributes (chunked per frame as Velox writes it; read unaided by
RosettaSciIO), the same stack as a plain chunked dataset, a frames-last NXdata
whose ``@axes`` names the scan axis, an ``@interpretation = "image"`` int32
stack, a 2-D uint32 Eiger-like single frame, float32 frames with NaNs,
EDAX-H5EBSD-like uint8 patterns.  TIFF (tifffile): multi-page uint8, BigTIFF
float32, big-endian uint16, a 2-D uint32 page, a one-file-per-frame series.  GE
raw with the blanked 8192-byte header APS detectors write (GE 2048x2048
uint16).  EDF and CBF written by fabio when it is installed.
"""
from __future__ import annotations

import os

import numpy as np

from .h5util import describe, frames_digest


def _nx(group, cls):
    group.attrs["NX_class"] = np.bytes_(cls)
    return group


def _read(axis, frames, **extra):
    return {"options": extra.pop("options", {}), "expect": "frames", "frame_axis": axis,
            "n_frames": int(frames.shape[0]), "frame_shape": list(frames.shape[1:]),
            "dtype": frames.dtype.name, "sha256": frames_digest(frames), **extra}


def _h5_entry(name, path, datasets, reads, origin, stage=None, requires=()):
    return {"name": name, "path": path, "format": "hdf5", "origin": origin,
            "requires": list(requires), "files": [path], "datasets": datasets, "reads": reads,
            "stage": stage or {"expect": "copy"}}


def write_velox_emd(path: str, images: dict, keys=None, chunks: bool = True) -> list:
    """An EMD file laid out as Thermo Fisher Velox writes it (what RosettaSciIO's Velox
    reader, ``rsciio/emd/_emd_velox.py``, reads): ``/Version`` holds JSON with ``format``
    ``Velox``; each detector's image stack ``(n, ny, nx)`` is stored frames-last as
    ``/Data/Image/<uuid>/Data`` ``(ny, nx, n)`` (chunked one frame per chunk, as Velox
    does, when ``chunks``) beside ``Metadata``: the JSON metadata as uint8 bytes, one
    zero-padded column per frame.  Returns the group keys (uuids) in order."""
    import json
    import uuid

    import h5py

    keys = list(keys) if keys else [uuid.uuid4().hex for _ in images]
    with h5py.File(path, "w") as f:
        f.create_dataset("Version", data=np.array(
            [json.dumps({"format": "Velox", "version": "11"}).encode()]))
        for key, (name, stack) in zip(keys, images.items()):
            n, ny, nx = stack.shape
            group = f.create_group(f"Data/Image/{key}")
            group.create_dataset("Data", data=np.moveaxis(stack, 0, 2),
                                 chunks=(ny, nx, 1) if chunks else None)
            meta = {"Core": {"MetadataDefinitionVersion": "7.9"},
                    "BinaryResult": {"PixelSize": {"width": "1e-10", "height": "1e-10"},
                                     "PixelUnitX": "m", "PixelUnitY": "m",
                                     "Offset": {"x": "0", "y": "0"}, "DetectorIndex": "0"},
                    "Detectors": {"Detector-0": {"DetectorName": name,
                                                 "ExposureTime": "0.01"}},
                    "Scan": {"FrameTime": "0.5"},
                    "Acquisition": {"AcquisitionStartDatetime": {"DateTime": "1700000000"}}}
            raw = np.frombuffer(json.dumps(meta).encode(), np.uint8)
            column = np.zeros((len(raw) + 64, n), np.uint8)
            column[:len(raw)] = raw[:, None]
            group.create_dataset("Metadata", data=column)
    return keys


def hdf5_entries(root: str) -> list:
    import h5py

    out = []
    rng = np.random.default_rng(11)
    # (16, 16, 5): 5 frames of 16x16 stored frames-last, as Velox writes EMD
    last = rng.integers(0, 4000, (16, 16, 5)).astype(np.uint16)
    frames = np.moveaxis(last, 2, 0)
    keys = write_velox_emd(os.path.join(root, "velox_like.emd"), {"HAADF": frames},
                           keys=["6a1c2b3d4e5f"])
    ds = f"/Data/Image/{keys[0]}/Data"
    with h5py.File(os.path.join(root, "velox_like.emd"), "r") as f:
        desc = {ds: describe(f[ds])}
    out.append(_h5_entry(
        "velox_like_frames_last", "velox_like.emd", desc,
        [_read(2, frames, options={"dataset": ds}),
         _read(2, frames, options={}, requires=["rsciio"]),
         _read(2, frames, options={"dataset": ds, "frame_axis": 2}),
         _read(2, frames, options={"dataset": ds, "frame_axis": -1})],
        "Velox EMD layout (frames last, one frame per chunk, no NeXus attributes; "
        "RosettaSciIO's Velox reader's layout): a dataset asked for is ours to read (frame "
        "axis from the chunks), the file unaided is RosettaSciIO's"))
    with h5py.File(os.path.join(root, "frames_last_chunked.h5"), "w") as f:
        d = f.create_dataset("stack", data=last, chunks=(16, 16, 1))
        desc = {"/stack": describe(d)}
    out.append(_h5_entry("frames_last_chunked", "frames_last_chunked.h5", desc,
                         [_read(2, frames, options={"dataset": "/stack"}),
                          {"options": {"dataset": "/stack", "frame_axis": 0},
                           "expect": "frames", "frame_axis": 0, "n_frames": 16,
                           "frame_shape": [16, 5],
                           "dtype": "uint16",
                           "sha256": frames_digest(last)}],
                         "one chunk per frame along the last axis"))
    with h5py.File(os.path.join(root, "nxdata_axes_last.nxs"), "w") as f:
        entry = _nx(f.create_group("entry"), "NXentry")
        f.attrs["default"] = np.bytes_("entry")
        entry.attrs["default"] = np.bytes_("scan")
        data = _nx(entry.create_group("scan"), "NXdata")
        data.attrs["signal"] = np.bytes_("counts")
        data.attrs["axes"] = np.array([b".", b".", b"time"], dtype="S4")
        data.attrs["time_indices"] = np.int32(2)
        d = data.create_dataset("counts", data=last)
        data["time"] = np.arange(5, dtype=np.float64) * 0.1
        desc = {"/entry/scan/counts": describe(d)}
    out.append(_h5_entry("nxdata_axes_frames_last", "nxdata_axes_last.nxs", desc,
                         [_read(2, frames)], "NeXus NXdata: @default chain, @signal, @axes "
                         "naming only the scan axis"))
    ints = rng.integers(-2, 3000, (4, 16, 16)).astype(np.int32)
    floats = rng.normal(100, 10, (3, 16, 16)).astype(np.float32)
    floats[:, 0, 0] = np.nan
    single = rng.poisson(50, (16, 20)).astype(np.uint32)
    single[0, :3] = [70_000, 2**32 - 1, 65_536]
    with h5py.File(os.path.join(root, "interpretation_image_i32.h5"), "w") as f:
        data = _nx(_nx(f.create_group("entry"), "NXentry").create_group("data"), "NXdata")
        data.attrs["signal"] = np.bytes_("data")
        d = data.create_dataset("data", data=ints)
        d.attrs["interpretation"] = np.bytes_("image")
        desc = {"/entry/data/data": describe(d)}
    out.append(_h5_entry("interpretation_image_i32", "interpretation_image_i32.h5", desc,
                         [_read(0, ints),
                          {"options": {"dtype": "uint16"}, "expect": "error",
                           "match": "below 0"}],
                         "NeXus @interpretation='image': the last two axes are the image"))
    with h5py.File(os.path.join(root, "float32_frames.h5"), "w") as f:
        d = f.create_dataset("entry/data/data", data=floats, chunks=(1, 16, 16))
        desc = {"/entry/data/data": describe(d)}
    out.append(_h5_entry("float32_frames", "float32_frames.h5", desc,
                         [_read(0, floats),
                          {"options": {"dtype": "uint16"}, "expect": "error",
                           "match": "float32"}],
                         "float32 frames with NaN, one chunk per frame"))
    with h5py.File(os.path.join(root, "eiger_single_frame_u32.h5"), "w") as f:
        entry = _nx(f.create_group("entry"), "NXentry")
        data = _nx(entry.create_group("data"), "NXdata")
        data.attrs["signal"] = np.bytes_("data")
        d = data.create_dataset("data", data=single)
        desc = {"/entry/data/data": describe(d)}
    out.append(_h5_entry(
        "single_frame_u32", "eiger_single_frame_u32.h5", desc,
        [_read(None, single[None], masked_value=2**32 - 1, max_unmasked=70_000),
         {"options": {"dtype": "uint16"}, "expect": "error", "match": "do not fit uint16"},
         {"options": {"dtype": "uint16", "overflow": "clip"}, "expect": "frames",
          "n_frames": 1, "frame_shape": [16, 20], "dtype": "uint16",
          "first_row_head": [65534, 65535, 65534]}],
        "a 2-D uint32 Eiger frame (values above 65535, the inactive-pixel marker 2**32-1)"))
    patterns = rng.integers(0, 256, (6, 30, 30)).astype(np.uint8)
    with h5py.File(os.path.join(root, "ebsd_like.h5"), "w") as f:
        f["Manufacturer"] = np.bytes_("EDAX")
        f["Version"] = np.bytes_("OIM Analysis 8.6 x64 [09-01-2021]")
        d = f.create_dataset("Scan 1/EBSD/Data/Pattern", data=patterns)
        desc = {"/Scan 1/EBSD/Data/Pattern": describe(d)}
    ds = "/Scan 1/EBSD/Data/Pattern"
    out.append(_h5_entry("ebsd_like_u8", "ebsd_like.h5", desc,
                         [{"options": {"dataset": ds}, "expect": "error", "match": "frame_axis"},
                          _read(0, patterns, options={"dataset": ds, "frame_axis": 0})],
                         "EDAX-H5EBSD-like uint8 patterns (contiguous, no NeXus attributes)"))
    return out


def tiff_entries(root: str) -> list:
    import tifffile

    from kernels.io import write_tiff_series

    rng = np.random.default_rng(12)
    out = []

    def one(name, frames, origin, **kw):
        tifffile.imwrite(os.path.join(root, name), frames, photometric="minisblack", **kw)
        out.append({"name": name.split(".")[0], "path": name, "format": "tiff",
                    "origin": origin, "requires": [], "files": [name],
                    "reads": [_read(0, frames if frames.ndim == 3 else frames[None])],
                    "stage": {"expect": "copy"}})

    one("patterns_u8.tif", rng.integers(0, 256, (5, 30, 30)).astype(np.uint8),
        "multi-page uint8 TIFF (tifffile)")
    one("stack_f32.btf", rng.normal(0, 1, (3, 16, 16)).astype(np.float32),
        "BigTIFF float32 pages (tifffile, bigtiff=True)", bigtiff=True)
    one("big_endian_u16.tiff", rng.integers(0, 60000, (2, 16, 16)).astype(">u2"),
        "big-endian ('MM') uint16 TIFF (tifffile)", byteorder=">")
    one("single_u32.tif", rng.integers(0, 2**20, (16, 20)).astype(np.uint32),
        "a 2-D uint32 page")
    series = rng.integers(0, 60000, (4, 16, 16)).astype(np.uint16)
    os.makedirs(os.path.join(root, "series"), exist_ok=True)
    write_tiff_series(os.path.join(root, "series", "frame_%04d.tif"), series, first=1)
    out.append({"name": "tiff_series", "path": "series/frame_%04d.tif", "format": "tiff-series",
                "origin": "one TIFF per frame (kernels.io.write_tiff_series)", "requires": [],
                "files": [f"series/frame_{i:04d}.tif" for i in range(1, 5)],
                "reads": [_read(0, series, options={"first": 1})],
                "stage": {"expect": "copy"}})
    return out


def ge_entries(root: str) -> list:
    frames = (np.arange(2 * 2048 * 2048, dtype=np.uint32) % 65521).astype(np.uint16)
    frames = frames.reshape(2, 2048, 2048)
    with open(os.path.join(root, "scan.ge2"), "wb") as f:
        f.write(b"\0" * 8192)                       # APS's blanked GE header
        f.write(frames.astype("<u2").tobytes())
    return [{"name": "ge_blank_header", "path": "scan.ge2", "format": "ge",
             "origin": "GE raw with the blanked 8192-byte header (APS, as fabio's GEimage "
                       "documents it): 2048x2048 little-endian uint16 frames",
             "requires": [], "files": ["scan.ge2"], "reads": [_read(0, frames)],
             "stage": {"expect": "copy"}}]


def fabio_entries(root: str) -> list:
    try:
        import fabio.cbfimage
        import fabio.edfimage
    except ImportError:
        return []
    rng = np.random.default_rng(13)
    edf = rng.integers(0, 60000, (20, 16)).astype(np.uint16)
    cbf = rng.integers(-1, 2**20, (20, 16)).astype(np.int32)
    fabio.edfimage.EdfImage(data=edf).write(os.path.join(root, "frame.edf"))
    fabio.cbfimage.CbfImage(data=cbf).write(os.path.join(root, "frame.cbf"))
    return [{"name": "edf", "path": "frame.edf", "format": "edf",
             "origin": f"ESRF data format, written by fabio {fabio.version}",
             "requires": ["fabio"], "files": ["frame.edf"], "reads": [_read(0, edf[None])],
             "stage": {"expect": "copy"}},
            {"name": "cbf", "path": "frame.cbf", "format": "cbf",
             "origin": f"IUCr CBF (byte-offset), written by fabio {fabio.version}",
             "requires": ["fabio"], "files": ["frame.cbf"], "reads": [_read(0, cbf[None])],
             "stage": {"expect": "copy"}}]


def write_mib(path: str, frames: np.ndarray, frames_per_line: int) -> None:
    """A Quantum Detectors Merlin MIB file: per frame a 384-byte ASCII header of
    comma-separated fields (MQ1, sequence number, data offset, chips, width,
    height, pixel depth, sensor layout, chip select, time, shutter, counter,
    colour, gain, thresholds, DACs, ..., extended timestamp, exposure in ns,
    bit depth), then the pixels big-endian.  A line of the scan starts after a
    longer pause, which is how readers find the scan's width without a .hdr."""
    n, h, w = frames.shape
    depth = {np.dtype(np.uint8): "U08", np.dtype(np.uint16): "U16",
             np.dtype(np.uint32): "U32"}[frames.dtype]
    t0 = np.datetime64("2026-11-21T10:00:00.000000000")
    with open(path, "wb") as f:
        for i, frame in enumerate(frames):
            line, col = divmod(i, frames_per_line)
            t = t0 + np.timedelta64(line * 50_000_000 + col * 1_000_000, "ns")
            fields = ["MQ1", f"{i + 1:06d}", "00384", "01", f"{w:04d}", f"{h:04d}", depth,
                      "   1x1", "01", str(t).replace("T", " ")[:26], "0.001000", "0", "0",
                      "0"] + ["0.000000E+0"] * 8 + ["3RX"] + ["000"] * 27 + [
                      "MQ1A", f"{t}Z", "1000000.000000ns", "12", ""]
            header = ",".join(fields).encode()
            f.write(header.ljust(384, b"\0"))
            f.write(frame.astype(frames.dtype.newbyteorder(">")).tobytes())


def rsciio_entries(root: str) -> list:
    frames = np.random.default_rng(14).integers(0, 4000, (6, 32, 32)).astype(np.uint16)
    frames[:, 0, 0] = np.arange(6)                 # acquisition order is visible
    write_mib(os.path.join(root, "scan.mib"), frames, frames_per_line=3)
    return [{"name": "mib", "path": "scan.mib", "format": "mib",
             "origin": "Quantum Detectors Merlin MIB (frame headers as the Merlin manual and "
                       "RosettaSciIO's reader describe them), a 3x2 scan of 32x32 frames",
             "requires": ["rsciio"], "files": ["scan.mib"],
             # RosettaSciIO returns Merlin frames flipped vertically (np.flip(axis=-2)):
             # stored row 0 is the image's last row in its orientation; we follow it
             "reads": [_read(0, np.ascontiguousarray(frames[:, ::-1]),
                             orientation="rows flipped from the stored order, as RosettaSciIO")],
             "stage": {"expect": "copy"}}]


def entries(root: str) -> list:
    return (hdf5_entries(root) + tiff_entries(root) + ge_entries(root) + fabio_entries(root)
            + rsciio_entries(root))
