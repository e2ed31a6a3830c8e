"""NF-HEDM stage-1 reduction as an analysis: the per-frame work of ``hedm/nf.py`` on any source.

Each frame is oriented (``ImTransOpt``), reduced with :func:`kernels.nf.reduce_frame`
against its distance's background and turned into spot tables (:class:`PerFrame`
partials); ``write`` gives the tables in frame order and the bit-packed binary
images. The file flow (:mod:`hedm.nf`) runs it on frame files, and a receiving job
on a live stream (``--analysis hedm.nfreduce``, ``docs/guide/hedm.md``).

The background is a required input (a stream cannot wait for the median over all
its frames): the file flow's ``work/`` folder, one ``.npy`` or a file of dark
frames. Frame ``f`` is file ``RawStartNr + f``. ``write_files`` adds
``<scan>_binary.npy`` (stage 2's input) and, with max projections, ``<scan>.png``.
Layout and reasons: ``docs/nf-files.md`` ("Stage 1 on a live stream").
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

import numpy as np

from hedm.common import as_records, cached, output_file
from hedm.output import NF_CENTROID_DTYPE, NF_FRAME_DTYPE, NF_PIXEL_DTYPE
from hedm.params import BINARY_SUFFIX, ParamError
from analyses.contract import Analysis, Chunk, PerFrame
from analyses.sources.frames import open_frame_file
from hedm.errors import HedmError
from streams.protocol import ScanGeometry

__all__ = ["NFReduce", "ANALYSIS", "BACKGROUND_NAME", "kernel_params", "spot_tables",
           "binary_images", "empty_distances"]

#: The file flow's background and max projection of distance ``d`` in ``OUT/work/``.
BACKGROUND_NAME, MAX_NAME = "nf_background_d{d}.npy", "nf_max_projection_d{d}.npy"


def kernel_params(p: Mapping[str, Any]):
    """The :class:`kernels.nf.NFParams` of a parameter set."""
    from kernels.nf import NFParams

    return NFParams(offset=p["BlanketSubtraction"], median_size=2 * p["MedFiltRadius"] + 1,
                    log_sigma=p["GaussFiltRadius"], log_radius=p["LoGMaskRadius"])


_WORKSPACES: Dict[tuple, Any] = {}


def _workspace(shape):
    from kernels.nf import NFWorkspace

    shape = tuple(shape)
    if shape not in _WORKSPACES:
        _WORKSPACES.clear()
        _WORKSPACES[shape] = NFWorkspace(shape)
    return _WORKSPACES[shape]


def spot_tables(frame: int, spots, distance: int = 0) -> Dict[str, np.ndarray]:
    """Pixel, centroid and per-frame tables of one frame's :class:`kernels.nf.NFSpots`
    (``frame`` counts from RawStartNr within its ``distance``)."""
    pixels = np.empty(len(spots.rows), NF_PIXEL_DTYPE)
    pixels["distance"] = distance
    pixels["frame"], pixels["y"], pixels["z"] = frame, spots.cols, spots.rows
    pixels["intensity"], pixels["label"] = spots.intensity, spots.labels
    n = spots.n_labels
    cent = np.empty(n, NF_CENTROID_DTYPE)
    if n:
        rc = spots.centroids()
        idx = spots.labels - 1
        cent["distance"], cent["frame"], cent["label"] = distance, frame, np.arange(1, n + 1)
        cent["z"], cent["y"] = rc[:, 0], rc[:, 1]
        cent["n_pixels"] = np.bincount(idx, None, n)
        cent["intensity_sum"] = np.bincount(idx, spots.intensity.astype(np.float64), n)
        mx = np.zeros(n, np.uint16)
        np.maximum.at(mx, idx, spots.intensity)
        cent["intensity_max"] = mx
    frames = as_records([(distance, frame, len(pixels), n)], NF_FRAME_DTYPE)
    return {"pixels": pixels, "centroids": cent, "frames": frames}


def empty_distances(distance: np.ndarray, n_pixels: np.ndarray, n_distances: int) -> List[int]:
    """The distances whose frames (each frame's ``distance`` and ``n_pixels``) hold no
    spot pixel at all, or were never seen: stage 2 can fit nothing from them."""
    found = np.bincount(np.asarray(distance, np.int64), weights=n_pixels,
                        minlength=n_distances)
    return [d for d in range(n_distances) if found[d] == 0]


def binary_images(pixels: np.ndarray, n_distances: int, n_frames: int, shape,
                  first: int = 0) -> np.ndarray:
    """The bit-packed binary images of spot pixels (``NF_PIXEL_DTYPE`` rows), laid out as
    :func:`kernels.nfconfidence.pack_images`; built with ``bincount`` over the
    distinct (byte, bit) pairs, never the 8x larger unpacked stack."""
    h, w = int(shape[0]), int(shape[1])
    wb = (w + 7) // 8
    out = np.zeros((n_distances, n_frames, h, wb), np.uint8)
    if len(pixels) == 0:
        return out
    d = pixels["distance"].astype(np.int64)
    f = pixels["frame"].astype(np.int64) - first
    y = pixels["y"].astype(np.int64)
    z = pixels["z"].astype(np.int64)
    if (d.min() < 0 or d.max() >= n_distances or f.min() < 0 or f.max() >= n_frames
            or y.min() < 0 or y.max() >= w or z.min() < 0 or z.max() >= h):
        raise ParamError(f"spot pixels outside {n_distances} distances x {n_frames} frames of "
                         f"{h}x{w}: check nDistances, NrFilesPerDistance, NrPixelsY/Z")
    byte = ((d * n_frames + f) * h + z) * wb + (y >> 3)
    key = np.unique(byte * 8 + (y & 7))
    cells, inverse = np.unique(key >> 3, return_inverse=True)
    values = np.bincount(inverse, weights=np.left_shift(1, key & 7)).astype(np.uint8)
    out.reshape(-1)[cells] = values
    return out


def _load_background(path: str, shape: Tuple[int, int], transforms: Tuple[int, ...]
                     ) -> np.ndarray:
    """A ``.npy`` as it is (already oriented); any other detector file: the lower median
    of its raw frames, oriented (``shape``: Z x Y after ``transforms``)."""
    if path.endswith(".npy"):
        return np.load(path)
    from kernels.nf import median_background

    from hedm.imtrans import apply, raw_shape

    reader = open_frame_file(path, raw_shape(shape, transforms), "uint16")
    stack = np.stack([apply(reader.read(i), transforms) for i in range(reader.n_frames)])
    return median_background(stack)


_HOW = ("pass background=DIR (the work/ folder of a hedm/nf.py run on this layer: "
        "nf_background_d<d>.npy), background=FILE.npy ((NrPixelsZ, NrPixelsY) or "
        "(nDistances, NrPixelsZ, NrPixelsY), oriented as after ImTransOpt) or "
        "background=DARK (a TIFF/GE/HDF5 file of dark or background frames)")


class NFReduce(Analysis):
    """Spot tables of every frame against a given background (see the module docstring).

    Parameters
    ----------
    params : str or dict
        The layer's parameter file, or :func:`hedm.nfparams.read_nf_params`'s values.
    background : str or list of str
        A folder, a ``.npy``, a dark-frames file, or one ``.npy`` per distance. Required.
    max_projection : str or list of str, optional
        Each distance's maximum (a folder or one ``.npy`` per distance), written as
        ``/max_projection`` and drawn in the PNG.
    **keys
        Stage-1 keys overriding the parameter file (``BlanketSubtraction=80``).

    Raises HedmError for no or a missing background, or an unknown key.
    """

    name = "nf_reduce"
    files = (BINARY_SUFFIX, ".png")

    def __init__(self, params: Union[str, Mapping[str, Any], None] = None,
                 background: Union[str, Sequence[str], None] = None,
                 max_projection: Union[str, Sequence[str], None] = None, **keys: Any) -> None:
        from hedm.nfparams import REDUCE_SCHEMA, read_nf_params

        if params is None:
            raise HedmError("nf_reduce needs the layer's parameter file: --set "
                            "params=LAYER/nf.params")
        unknown = sorted(set(keys) - {q.key for q in REDUCE_SCHEMA})
        if unknown:
            raise HedmError(f"nf_reduce: unknown option(s) {', '.join(unknown)}: give params, "
                            "background, max_projection or stage-1 keys of "
                            "hedm.nf.SCHEMA")
        p = read_nf_params(params, keys) if isinstance(params, str) else dict(params, **keys)
        if background is None:
            raise HedmError("nf_reduce needs a background: a live stream cannot wait for the "
                            "per-pixel median over all frames of a distance that hedm/nf.py "
                            f"subtracts; {_HOW}")
        self.p = p
        self.n_distances, self.per_distance = int(p["nDistances"]), int(p["NrFilesPerDistance"])
        self.shape = (int(p["NrPixelsZ"]), int(p["NrPixelsY"]))
        self.transforms = tuple(p["ImTransOpt"])
        self.sources = self._sources(background)
        self.max_projection = ([os.path.join(max_projection, MAX_NAME.format(d=d))
                                for d in range(self.n_distances)]
                               if isinstance(max_projection, str) else list(max_projection or []))

    def _sources(self, background: Union[str, Sequence[str]]) -> List[str]:
        """One file per distance (the same file for all when one file serves all)."""
        if isinstance(background, str) and os.path.isdir(background):
            paths = [os.path.join(background, BACKGROUND_NAME.format(d=d))
                     for d in range(self.n_distances)]
        elif isinstance(background, str):
            paths = [background] * self.n_distances
        else:
            paths = list(background)
            if len(paths) != self.n_distances:
                raise HedmError(f"nf_reduce: {len(paths)} background files for "
                                f"{self.n_distances} distances (nDistances)")
        for path in paths:
            if not os.path.isfile(path):
                raise HedmError(f"nf_reduce: background {path} does not exist on this node; "
                                f"{_HOW}")
        return paths

    def background(self, d: int) -> Tuple[np.ndarray, bool]:
        """Distance ``d``'s background (uint16, Z x Y) and whether this worker had it cached."""
        path = self.sources[d]
        arr, hit = cached(path, lambda p: _load_background(p, self.shape, self.transforms),
                          kind=f"nf-background:{self.transforms}")
        if arr.ndim == 3:
            if len(arr) != self.n_distances:
                raise HedmError(f"nf_reduce: background {path} holds {len(arr)} images for "
                                f"{self.n_distances} distances (nDistances)")
            arr = arr[d]
        if arr.shape != self.shape:
            raise HedmError(f"nf_reduce: background {path} is {arr.shape}, frames are "
                            f"{self.shape} (NrPixelsZ, NrPixelsY after ImTransOpt)")
        if arr.dtype != np.uint16:
            arr = np.clip(np.rint(arr), 0, 65535).astype(np.uint16)
        return arr, hit

    def backgrounds(self) -> np.ndarray:
        """(nDistances, Z, Y) uint16: what each distance's frames were reduced against."""
        return np.stack([self.background(d)[0] for d in range(self.n_distances)])

    def prepare(self, geometry: ScanGeometry) -> None:
        from hedm.imtrans import describe, raw_shape

        if np.dtype(geometry.dtype) != np.dtype(np.uint16):
            raise HedmError(f"nf_reduce reduces uint16 detector frames; scan {geometry.scan} "
                            f"sends {np.dtype(geometry.dtype).name}")
        raw = raw_shape(self.shape, self.transforms)
        if tuple(geometry.shape) != raw:
            raise HedmError(f"nf_reduce: scan {geometry.scan} sends frames of "
                            f"{tuple(geometry.shape)}; NrPixelsZ x NrPixelsY {self.shape} "
                            f"after {describe(self.transforms)} needs raw frames of {raw}")
        if geometry.frames > self.n_distances * self.per_distance:
            raise HedmError(f"nf_reduce: scan {geometry.scan} has {geometry.frames} frames, "
                            f"the layer {self.n_distances} x {self.per_distance} "
                            "(nDistances x NrFilesPerDistance)")
        self.backgrounds()  # load (and check) every background before the first frame

    def columns(self) -> Tuple[str, ...]:
        return ("n_pixels", "n_spots")

    def process_partition(self, frames: np.ndarray, positions: np.ndarray,
                          complete: np.ndarray) -> PerFrame:
        """Raw frames at layer positions ``positions`` (file ``RawStartNr + position``),
        oriented here -> a partial of one chunk."""
        from kernels.nf import reduce_frame

        from hedm.imtrans import apply

        kp = kernel_params(self.p)
        tables = []
        for frame, pos in zip(frames, np.asarray(positions).tolist()):
            image = apply(frame, self.transforms)
            d, j = divmod(int(pos), self.per_distance)
            spots = reduce_frame(image, self.background(d)[0], kp, _workspace(image.shape))
            tables.append(spot_tables(self.p["RawStartNr"] + j, spots, d))
        n_pixels = np.array([len(t["pixels"]) for t in tables], np.int64)
        n_spots = np.array([len(t["centroids"]) for t in tables], np.int64)

        def flat(name: str, dtype: np.dtype) -> np.ndarray:
            return np.concatenate([t[name] for t in tables]) if tables else np.zeros(0, dtype)
        return PerFrame([Chunk(np.asarray(positions, np.int64).copy(),
                               np.asarray(complete, bool).copy(),
                               {"n_pixels": n_pixels, "n_spots": n_spots},
                               {"pixels": (n_pixels.copy(), flat("pixels", NF_PIXEL_DTYPE)),
                                "centroids": (n_spots.copy(),
                                              flat("centroids", NF_CENTROID_DTYPE))})])

    def tables(self, partial: PerFrame, n_frames: int) -> Dict[str, np.ndarray]:
        """``pixels``, ``centroids`` and ``frames`` tables of the frames seen, in frame order
        (whatever order the partials were merged in)."""
        seen = np.flatnonzero(partial.seen(n_frames))
        frames = np.zeros(len(seen), NF_FRAME_DTYPE)
        if not partial.chunks:
            return {"pixels": np.zeros(0, NF_PIXEL_DTYPE),
                    "centroids": np.zeros(0, NF_CENTROID_DTYPE), "frames": frames}
        d, j = np.divmod(seen, self.per_distance)
        frames["distance"], frames["frame"] = d, self.p["RawStartNr"] + j
        frames["n_pixels"] = partial.column("n_pixels", n_frames)[seen]
        frames["n_spots"] = partial.column("n_spots", n_frames)[seen]
        return {"pixels": partial.ragged("pixels", n_frames, NF_PIXEL_DTYPE)[1],
                "centroids": partial.ragged("centroids", n_frames, NF_CENTROID_DTYPE)[1],
                "frames": frames}

    def live(self, partial: PerFrame) -> PerFrame:
        """The spot tables too (sparse): viewers see each distance's spot pixels."""
        return partial

    def live_images(self, partial: PerFrame, geometry: ScanGeometry
                    ) -> Tuple[Dict[str, np.ndarray], None]:
        """:meth:`images` (spots and spot pixels per frame, distance x frame) and
        ``spot_pixels_d<d>``: per detector pixel, in how many of distance d's frames
        received so far it is a spot pixel (the binary images, summed over frames)."""
        out = self.images(partial, geometry)
        pixels = partial.ragged("pixels", geometry.frames, NF_PIXEL_DTYPE)[1] \
            if partial.chunks else np.zeros(0, NF_PIXEL_DTYPE)
        h, w = int(self.shape[0]), int(self.shape[1])
        for d in range(self.n_distances):
            img = np.zeros((h, w), np.float64)
            px = pixels[pixels["distance"] == d]
            ok = (px["z"] >= 0) & (px["z"] < h) & (px["y"] >= 0) & (px["y"] < w)
            np.add.at(img, (px["z"][ok], px["y"][ok]), 1.0)
            out[f"spot_pixels_d{d}"] = img
        return out, None

    def binary(self, pixels: np.ndarray) -> np.ndarray:
        """The binary images of the layer (``docs/nf-files.md``) from a pixel table."""
        return binary_images(pixels, self.n_distances, self.per_distance, self.shape,
                             self.p["RawStartNr"])

    def problem(self, partial: PerFrame, geometry: ScanGeometry) -> str:
        """A distance with no spot pixel in any frame received: as the file flow, a failure
        (stage 2 can fit nothing from it)."""
        seen = np.flatnonzero(partial.seen(geometry.frames))
        n_pixels = partial.column("n_pixels", geometry.frames)[seen] if len(seen) else seen
        empty = empty_distances(seen // self.per_distance, n_pixels, self.n_distances)
        if not empty:
            return ""
        n, first = self.per_distance, self.p["RawStartNr"]
        files = ", ".join(f"{first + d * n}..{first + (d + 1) * n - 1}" for d in empty)
        return (f"no spot found at distance(s) {', '.join(map(str, empty))} in any of its {n} "
                f"frames (files {files} of {self.p['InputPattern']}) of scan {geometry.scan}: "
                "stage 2 cannot fit from empty images. Check that these files hold the "
                "layer's diffraction frames (DataDirectory, InputPattern, RawStartNr, "
                "NrFilesPerDistance, nDistances), the background, that BlanketSubtraction "
                f"({self.p['BlanketSubtraction']}) is below the spots' height above the "
                "background, the LoG settings (GaussFiltRadius, LoGMaskRadius) and ImTransOpt")

    def write(self, h5: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
        from hedm.output import _attr

        t = self.tables(partial, geometry.frames)
        h5.create_dataset("spots", data=t["pixels"])
        h5.create_dataset("spot_centroids", data=t["centroids"])
        h5.create_dataset("frames", data=t["frames"])
        h5.create_dataset("background", data=self.backgrounds())
        if self.max_projection:
            h5.create_dataset("max_projection", data=self._max_projection())
        packed = self.binary(t["pixels"])
        h5.create_dataset("binary_images", data=packed, compression="gzip",
                          chunks=(1, 1) + packed.shape[2:])
        for name, image in self.images(partial, geometry).items():
            h5.create_dataset(name, data=image)
        h5.attrs.update({k: _attr(v) for k, v in self.p.items() if v is not None})
        h5.attrs["workflow"] = "hedm_nf"

    def _max_projection(self) -> np.ndarray:
        return np.stack([np.load(p) for p in self.max_projection])

    def write_files(self, folder: str, partial: PerFrame, geometry: ScanGeometry) -> List[str]:
        """``<scan>_binary.npy`` (stage 2's input; the file flow's scan is
        ``ReducedFileName``) and, given the max projections, ``<scan>.png`` (spots circled
        on max projection minus background)."""
        from hedm.output import plot_nf

        t = self.tables(partial, geometry.frames)
        binary = os.path.join(folder, geometry.scan + BINARY_SUFFIX)
        with output_file(binary, binary=True) as fh:
            np.save(fh, self.binary(t["pixels"]))
        out = [binary]
        if self.max_projection:
            out.append(plot_nf(os.path.join(folder, geometry.scan + ".png"),
                               self._max_projection(), self.backgrounds(), t["centroids"],
                               self.per_distance))
        return out


#: What ``stager stream receive --analysis hedm.nfreduce`` runs (a class: --set gives options).
ANALYSIS = NFReduce
