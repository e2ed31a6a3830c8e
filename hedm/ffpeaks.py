"""FF-HEDM peak search as an analysis: one implementation for staged files and live streams.

:data:`SCHEMA` (the parameter file), the dark (the mean of a dark file's frames) and
:func:`kernels.ff.find_peaks` behind :mod:`analyses.contract`: ``hedm/ff.py`` runs it
on staged frames, a receiving job on frames as they arrive -- no new code::

    mpirun -n 4 stager stream receive --analysis hedm.ffpeaks \\
        --set params=/path/ff.params --rendezvous RV --out OUT

Frame ``f`` of a stream is frame ``RawStartNr + f`` of the sweep. ``<scan>.h5`` holds
``/peaks``, ``/frames``, ``/dark`` and ``/n_peaks_image`` (:mod:`hedm.output`; the file
flow's scan is ``OutputFileName``), ``write_files`` the CSV and the PNG; the live view
shows ``n_peaks``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from hedm.common import cached
from hedm.ffparams import GRAINS_SCHEMA
from hedm.ffparams import PEAKS_SCHEMA as SCHEMA
from hedm.output import _attr
from hedm.params import (MIDAS_FF_KEYS, ParamError, load_params, relative_to,
                         resolve_params)
from analyses.contract import Analysis, Chunk, PerFrame
from analyses.sources.frames import open_frame_file
from hedm.errors import HedmError
from streams.protocol import ScanGeometry

__all__ = ["FFPeaks", "ANALYSIS", "SCHEMA", "read_ff_params", "kernel_params", "load_dark",
           "sweep_frames"]

def _checked(values: Dict[str, Any], path: str) -> Dict[str, Any]:
    from hedm.imtrans import check_codes

    try:
        values["ImTransOpt"] = check_codes(values.get("ImTransOpt") or ())
    except ValueError as exc:
        raise ParamError(f"{path}: {exc}") from None
    if values["MinNrPx"] > values["MaxNrPx"]:
        raise ParamError(f"{path}: MinNrPx ({values['MinNrPx']}) must not exceed MaxNrPx "
                         f"({values['MaxNrPx']})")
    if "/" in values["OutputFileName"] or not values["OutputFileName"]:
        raise ParamError(f"{path}: OutputFileName must be a plain file name, "
                         f"got {values['OutputFileName']!r}")
    return values


def read_ff_params(path: str, flags: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """Parameters from the file ``path`` and flag overrides, checked together.

    Stage 2's keys (:data:`hedm.ffparams.GRAINS_SCHEMA`) and every key of MIDAS's FF
    programs may be in the file too (one file per sweep, :mod:`hedm.params`); they are
    left to their readers.
    """
    from hedm.ffparams import fold_aliases, without_aliases

    foreign = MIDAS_FF_KEYS | {q.key for q in GRAINS_SCHEMA}
    raw = fold_aliases(load_params(path, SCHEMA, foreign), path)
    return _checked(resolve_params(without_aliases(SCHEMA), raw,
                                   fold_aliases(flags or {}, "flags"), path), path)


def sweep_frames(p: Mapping[str, Any], first_file: str, series: bool,
                 path: str = "<params>") -> int:
    """The number of frames of the sweep, as MIDAS counts them.

    MIDAS's ``NrFilesPerSweep`` counts *files* (a sweep split over several files). A TIFF
    series has one frame per file: the files are the frames (``NrFrames``, if given, must
    agree). One GE/HDF5 file holds the whole sweep: ``NrFilesPerSweep`` must be 1 (a sweep
    over several such files is refused), and the frames are ``NrFrames`` or every frame of
    the file from ``RawStartNr`` on.

    Raises
    ------
    ParamError
        The two meanings would differ, or the file holds fewer frames than asked.
    """
    files, frames = p["NrFilesPerSweep"], p.get("NrFrames", 0)
    if series:
        if frames and frames != files:
            raise ParamError(f"{path}: NrFrames {frames} but NrFilesPerSweep {files}: a TIFF "
                             "series has one frame per file; give one of them")
        return int(files)
    if files != 1:
        raise ParamError(
            f"{path}: NrFilesPerSweep {files}, but MIDAS's NrFilesPerSweep counts files per "
            f"sweep and {first_file} is one file holding the sweep: a sweep split over several "
            "GE/HDF5 files is not supported. Set NrFilesPerSweep 1 and NrFrames to the frames "
            "to use (0 or absent: every frame of the file from RawStartNr)")
    reader = open_frame_file(first_file, (p["NrPixelsZ"], p["NrPixelsY"]), "uint16")
    have = int(reader.n_frames) - int(p["RawStartNr"])
    if frames > have or have < 1:
        raise ParamError(f"{path}: {first_file} holds {reader.n_frames} frames; from RawStartNr "
                         f"{p['RawStartNr']} there are {max(have, 0)}, NrFrames asks {frames}")
    return int(frames or have)


def kernel_params(p: Mapping[str, Any]):
    """The :class:`kernels.ff.FFParams` of a parameter set."""
    from kernels.ff import FFParams

    return FFParams(threshold=p["Threshold"], min_pixels=p["MinNrPx"], max_pixels=p["MaxNrPx"])


def load_dark(path: str, shape) -> np.ndarray:
    """Mean of every frame of the dark file (float32), read frame by frame."""
    reader = open_frame_file(path, shape, "uint16")
    total = np.zeros(reader.shape, np.float64)
    for i in range(reader.n_frames):
        total += reader.read(i)
    return (total / reader.n_frames).astype(np.float32)


class FFPeaks(Analysis):
    """Peaks of every frame (see the module docstring).

    Parameters
    ----------
    params : str or dict, optional
        The FF parameter file (as ``hedm/ff.py --params``), or its values as
        :func:`read_ff_params` returns them; default the defaults of :data:`SCHEMA`.
    dark : str, optional
        Dark file (GE/HDF5/TIFF; the mean of its frames); default ``Dark`` of a
        parameter file, else no dark (zeros).
    threshold, min_pixels, max_pixels, first_frame : optional
        ``Threshold``, ``MinNrPx``, ``MaxNrPx``, ``RawStartNr``.

    Raises
    ------
    ParamError
        A bad parameter file, ``min_pixels`` above ``max_pixels``.
    HedmError
        The dark file does not exist.
    """

    name = "ff_peaks"
    files = (".csv", ".png")

    def __init__(self, params: Union[str, Mapping[str, Any], None] = None,
                 dark: Optional[str] = None, threshold: Optional[float] = None,
                 min_pixels: Optional[int] = None, max_pixels: Optional[int] = None,
                 first_frame: Optional[int] = None) -> None:
        given = {k: v for k, v in (("Threshold", threshold), ("MinNrPx", min_pixels),
                                   ("MaxNrPx", max_pixels), ("RawStartNr", first_frame))
                 if v is not None}
        if isinstance(params, str):
            p = read_ff_params(params, given)
            if dark is None and p["Dark"]:
                dark = os.path.join(relative_to(p["DataDirectory"], params), p["Dark"])
        else:
            from hedm.ffparams import without_aliases

            p = _checked({**{q.key: q.default for q in without_aliases(SCHEMA)},
                          **(params or {}), **given}, "ff_peaks")
        if dark is not None and not os.path.isfile(dark):
            raise HedmError(f"ff_peaks: dark file {dark} does not exist on this node")
        self.p, self.dark_path = p, dark

    def dark(self, shape: Tuple[int, ...]) -> Tuple[np.ndarray, bool]:
        """The dark for frames of ``shape`` and whether this worker had it cached."""
        shape = tuple(shape)
        if self.dark_path is None:
            return np.zeros(shape, np.float32), False
        arr, hit = cached(self.dark_path, lambda p: load_dark(p, shape), kind=f"dark:{shape}")
        if arr.shape != shape:
            raise HedmError(f"ff_peaks: dark {self.dark_path} is {arr.shape}, frames are "
                            f"{shape}")
        return arr, hit

    def prepare(self, geometry: ScanGeometry) -> None:
        if np.dtype(geometry.dtype) != np.dtype(np.uint16):
            raise HedmError(f"ff_peaks searches uint16 detector frames; scan {geometry.scan} "
                            f"sends {np.dtype(geometry.dtype).name}")
        shape = tuple(geometry.shape)
        if 3 in self.p["ImTransOpt"] and shape[0] != shape[1]:
            raise HedmError(f"ff_peaks: ImTransOpt 3 (transpose) needs square frames, as "
                            f"MIDAS's; scan {geometry.scan} has {shape}")
        self.dark(geometry.shape)

    def columns(self) -> Tuple[str, ...]:
        return ("n_peaks",)

    def process_partition(self, frames: np.ndarray, positions: np.ndarray,
                          complete: np.ndarray) -> PerFrame:
        """Frames at sweep positions ``positions`` (frame ``RawStartNr + position``)."""
        from kernels.ff import PEAK_DTYPE, find_peaks

        from hedm.imtrans import apply

        # MIDAS's ImTransOpt on the raw frame and the dark before the peak search
        # (PeaksFittingOMPZarrRefactor.c 1283, 1425): peaks are in the transformed frame
        codes = self.p["ImTransOpt"]
        dark = apply(self.dark(frames.shape[1:])[0], codes)
        kp, first = kernel_params(self.p), int(self.p["RawStartNr"])
        tables = [find_peaks(np.ascontiguousarray(apply(f, codes)), dark, kp,
                             frame_index=first + int(pos))
                  for f, pos in zip(frames, positions)]
        counts = np.array([len(t) for t in tables], np.int64)
        flat = np.concatenate(tables) if tables else np.zeros(0, PEAK_DTYPE)
        return PerFrame([Chunk(np.asarray(positions, np.int64).copy(),
                               np.asarray(complete, bool).copy(), {"n_peaks": counts},
                               {"peaks": (counts.copy(), flat)})])

    def problem(self, partial: PerFrame, geometry: ScanGeometry) -> str:
        """No peak in any frame received: nothing to index, a failure (as NF stage 1's empty
        distance), not an empty table with exit 0."""
        seen = np.flatnonzero(partial.seen(geometry.frames))
        if len(seen) and partial.column("n_peaks", geometry.frames)[seen].any():
            return ""
        first = int(self.p["RawStartNr"])
        frames = (f"{len(seen)} frame(s) received ({first + seen[0]}..{first + seen[-1]})"
                  if len(seen) else "no frame received")
        return (f"no peak found in scan {geometry.scan}: {frames}. Check that they are the "
                "sweep's diffraction frames (DataDirectory, InputPattern, RawStartNr, "
                f"NrPixelsY/NrPixelsZ), the dark ({self.dark_path or 'none'}), and that "
                f"Threshold ({self.p['Threshold']}) is below the peaks' height above it and "
                f"MinNrPx/MaxNrPx ({self.p['MinNrPx']}/{self.p['MaxNrPx']}) admit their size")

    def tables(self, partial: PerFrame, n_frames: int) -> Dict[str, np.ndarray]:
        """``peaks`` and ``frames`` (``FF_FRAME_DTYPE``) of the frames seen, in frame order
        (whatever order the partials were merged in)."""
        from hedm.output import FF_FRAME_DTYPE
        from kernels.ff import PEAK_DTYPE

        seen = np.flatnonzero(partial.seen(n_frames))
        frames = np.zeros(len(seen), FF_FRAME_DTYPE)
        frames["frame"] = seen + int(self.p["RawStartNr"])
        frames["n_peaks"] = partial.column("n_peaks", n_frames)[seen]
        return {"peaks": partial.ragged("peaks", n_frames, PEAK_DTYPE)[1], "frames": frames}

    def live(self, partial: PerFrame) -> PerFrame:
        """The peak tables too (a few rows per frame): viewers see where the peaks are."""
        return partial

    def live_images(self, partial: PerFrame, geometry: ScanGeometry
                    ) -> Tuple[Dict[str, np.ndarray], None]:
        """:meth:`images` (peaks per frame) and ``peaks``: the detector, each pixel the
        number of peaks centred there in the frames received so far."""
        from kernels.ff import PEAK_DTYPE

        out = self.images(partial, geometry)
        peaks = partial.ragged("peaks", geometry.frames, PEAK_DTYPE)[1] if partial.chunks \
            else np.zeros(0, PEAK_DTYPE)
        h, w = int(geometry.shape[0]), int(geometry.shape[1])
        img = np.zeros((h, w), np.float64)
        r, c = np.rint(peaks["row"]).astype(np.int64), np.rint(peaks["col"]).astype(np.int64)
        ok = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        np.add.at(img, (r[ok], c[ok]), 1.0)
        out["peaks"] = img
        return out, None

    def write(self, h5: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
        t = self.tables(partial, geometry.frames)
        h5.create_dataset("peaks", data=t["peaks"])
        h5.create_dataset("frames", data=t["frames"])
        h5.create_dataset("dark", data=self.dark(geometry.shape)[0])
        for name, image in self.images(partial, geometry).items():
            h5.create_dataset(name, data=image)
        h5.attrs.update({k: _attr(v) for k, v in self.p.items() if v is not None})
        h5.attrs["workflow"] = "hedm_ff"

    def write_files(self, folder: str, partial: PerFrame, geometry: ScanGeometry) -> List[str]:
        """``<scan>.csv`` (the peaks) and ``<scan>.png`` (peaks on the detector, per frame)."""
        from hedm.output import plot_ff, write_csv

        t = self.tables(partial, geometry.frames)
        base = os.path.join(folder, geometry.scan)
        return [write_csv(base + ".csv", t["peaks"]),
                plot_ff(base + ".png", t["peaks"], tuple(geometry.shape), t["frames"])]


#: What ``stager stream receive --analysis hedm.ffpeaks`` runs (a class: --set gives options).
ANALYSIS = FFPeaks
