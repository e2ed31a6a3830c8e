"""FF-HEDM peak search as an analysis: the per-frame work of ``hedm/ff.py`` on a live stream.

The same kernel (:func:`kernels.ff.find_peaks`), the same parameter file and the
same dark as the file flow, behind the analysis contract
(:mod:`streams.analysis`), so a receiving job runs it on frames as they
arrive -- no new code::

    mpirun -n 4 stager stream receive --analysis hedm.ffpeaks \\
        --set params=/path/ff.params --rendezvous RV --out OUT

``params`` is the FF parameter file ``hedm/ff.py`` reads (``Threshold``,
``MinNrPx``, ``MaxNrPx``, ``RawStartNr``, ``Dark`` relative to ``DataDirectory``).
Frame ``f`` of the stream is frame ``RawStartNr + f`` of the sweep. ``OUT/<scan>.h5``
holds ``/peaks`` and ``/frames`` in the layout of the file flow's
``<OutputFileName>.h5`` (:mod:`hedm.output`), plus ``/dark`` and
``/n_peaks_image`` (peaks per scan position); the live view shows ``n_peaks``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from streams.analysis import Analysis, Chunk, PerFrame
from streams.errors import StreamError
from streams.protocol import ScanGeometry

__all__ = ["FFPeaks", "ANALYSIS"]


class FFPeaks(Analysis):
    """Peaks of every frame (see the module docstring).

    Parameters
    ----------
    params : str, optional
        The FF parameter file (as ``hedm/ff.py --params``); its values are the defaults
        of the keywords below.
    dark : str, optional
        Dark file (GE/HDF5/TIFF; the mean of its frames); default ``Dark`` of ``params``,
        else no dark (zeros).
    threshold, min_pixels, max_pixels, first_frame : optional
        ``Threshold``, ``MinNrPx``, ``MaxNrPx``, ``RawStartNr``.
    """

    name = "ff_peaks"

    def __init__(self, params: Optional[str] = None, dark: Optional[str] = None,
                 threshold: Optional[float] = None, min_pixels: Optional[int] = None,
                 max_pixels: Optional[int] = None, first_frame: Optional[int] = None) -> None:
        import os

        from hedm.ff import read_ff_params
        from hedm.params import relative_to

        p: Dict[str, Any] = read_ff_params(params) if params else {
            "Threshold": 50.0, "MinNrPx": 2, "MaxNrPx": 10000, "RawStartNr": 0, "Dark": None}
        for key, value in (("Threshold", threshold), ("MinNrPx", min_pixels),
                           ("MaxNrPx", max_pixels), ("RawStartNr", first_frame)):
            if value is not None:
                p[key] = value
        if p["MinNrPx"] > p["MaxNrPx"]:
            raise StreamError(f"ff_peaks: min_pixels {p['MinNrPx']} exceeds max_pixels "
                              f"{p['MaxNrPx']}")
        if dark is None and params and p.get("Dark"):
            dark = os.path.join(relative_to(p["DataDirectory"], params), p["Dark"])
        if dark is not None and not os.path.isfile(dark):
            raise StreamError(f"ff_peaks: dark file {dark} does not exist on this node")
        self.p, self.dark_path = p, dark
        self._dark: Optional[np.ndarray] = None

    def prepare(self, geometry: ScanGeometry) -> None:
        if np.dtype(geometry.dtype) != np.dtype(np.uint16):
            raise StreamError(f"ff_peaks searches uint16 detector frames; scan {geometry.scan} "
                              f"sends {np.dtype(geometry.dtype).name}")
        self._setup(tuple(geometry.shape))

    def _setup(self, shape: Tuple[int, ...]) -> np.ndarray:
        if self._dark is None or self._dark.shape != shape:
            if self.dark_path is None:
                self._dark = np.zeros(shape, np.float32)
            else:
                from hedm.ff import load_dark

                self._dark = load_dark(self.dark_path, shape)
                if self._dark.shape != shape:
                    raise StreamError(f"ff_peaks: dark {self.dark_path} is {self._dark.shape}, "
                                      f"frames are {shape}")
        return self._dark

    def columns(self) -> Tuple[str, ...]:
        return ("n_peaks",)

    def process_partition(self, frames: np.ndarray, positions: np.ndarray,
                          complete: np.ndarray) -> PerFrame:
        from hedm.ff import kernel_params
        from kernels.ff import PEAK_DTYPE, find_peaks

        dark = self._setup(tuple(frames.shape[1:]))
        kp = kernel_params(self.p)
        first = int(self.p["RawStartNr"])
        tables = [find_peaks(np.ascontiguousarray(f), dark, kp, frame_index=first + int(pos))
                  for f, pos in zip(frames, positions)]
        counts = np.array([len(t) for t in tables], np.int64)
        flat = np.concatenate(tables) if tables else np.zeros(0, PEAK_DTYPE)
        return PerFrame([Chunk(np.asarray(positions, np.int64).copy(),
                               np.asarray(complete, bool).copy(), {"n_peaks": counts},
                               {"peaks": (counts.copy(), flat)})])

    def write(self, h5: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
        from hedm.output import FF_FRAME_DTYPE
        from kernels.ff import PEAK_DTYPE

        F = geometry.frames
        counts, peaks = partial.ragged("peaks", F, PEAK_DTYPE) if partial.chunks else \
            (np.zeros(F, np.int64), np.zeros(0, PEAK_DTYPE))
        seen = partial.seen(F)
        table = np.zeros(int(seen.sum()), FF_FRAME_DTYPE)
        table["frame"] = np.flatnonzero(seen) + int(self.p["RawStartNr"])
        table["n_peaks"] = counts[seen]
        h5.create_dataset("peaks", data=peaks.astype(PEAK_DTYPE, copy=False))
        h5.create_dataset("frames", data=table)
        h5.create_dataset("dark", data=self._setup(tuple(geometry.shape)))
        h5.create_dataset("n_peaks_image", data=counts.reshape(geometry.scan_shape))
        for k in ("Threshold", "MinNrPx", "MaxNrPx", "RawStartNr"):
            h5.attrs[k] = self.p[k]
        h5.attrs["workflow"] = "hedm_ff_stream"


#: What ``stager stream receive --analysis hedm.ffpeaks`` runs (a class: --set gives options).
ANALYSIS = FFPeaks
