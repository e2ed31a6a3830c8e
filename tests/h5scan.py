"""A small NeXus-like scan file shared by the HDF5 planning and staging tests."""
import h5py
import numpy as np

FRAMES, NY, NX = 24, 128, 96


def make_scan(path, frames=FRAMES, ny=NY, nx=NX, seed=0):
    """A scan file: a chunked (one chunk per frame) gzip+shuffle uint16 stack and metadata."""
    rng = np.random.default_rng(seed)
    stack = rng.poisson(100, size=(frames, ny, nx)).astype(np.uint16)
    with h5py.File(path, "w") as f:
        f.attrs["NX_class"] = "NXroot"
        entry = f.create_group("entry")
        entry.attrs["NX_class"] = "NXentry"
        data = entry.create_group("data")
        data.attrs["NX_class"] = "NXdata"
        data.attrs["signal"] = "data"
        d = data.create_dataset("data", data=stack, chunks=(1, ny, nx), compression="gzip",
                                compression_opts=4, shuffle=True)
        d.attrs["units"] = "counts"
        d.attrs["exposure_s"] = np.float32(0.1)
        inst = entry.create_group("instrument")
        inst.attrs["NX_class"] = "NXinstrument"
        inst["name"] = "1-ID-E"                       # variable-length string
        det = inst.create_group("detector")
        det["distance"] = 1.25
        det["distance"].attrs["units"] = "m"
        det.create_dataset("flatfield", data=rng.random((ny, nx), dtype=np.float32))
        det["data"] = h5py.SoftLink("/entry/data/data")
        entry.create_dataset("angles", data=np.linspace(0, 180, frames), chunks=(8,))
        rec = np.zeros(frames, dtype=[("t", "<f8"), ("i", "<i4")])
        rec["i"] = np.arange(frames)
        entry.create_dataset("log", data=rec)
        entry.create_dataset("refs", data=np.array([f.ref, f.ref], dtype=h5py.ref_dtype))
    return stack
