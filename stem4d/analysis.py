"""The 4D-STEM analysis: pixel sums, virtual detectors and electron events per frame.

Per partition of K frames ``(k, rows, cols)`` uint16:

- ``sum``: the sum of all pixels of each frame (float64: exact for any uint16
  frame below 2**37 pixels);
- ``bf``, ``adf``: bright field (a disk of radius ``bf_radius`` around ``center``)
  and annular dark field (``adf_inner <= r < adf_outer``) virtual detector values,
  ``kernels.virtual_detector`` with masks from ``kernels.ring_mask``;
- ``electrons``: the events of ``kernels.count_electrons`` (``frame - dark``
  above ``background_threshold``, below ``xray_threshold``, a strict local
  maximum), each as the flat pixel index ``row * cols + col`` (uint32) -- the
  ragged column ``events`` -- and their number per frame.

The partial is a :class:`stager.stream.analysis.PerFrame`: merging concatenates,
so the per-node and cross-node tree merges move each frame's values once. Radii
are in pixels; ``None`` picks defaults from the frame size (bf: rows/8, adf:
rows/6 .. rows/2 -- the synthetic disk has radius rows/8).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from stager.stream.analysis import Analysis, Chunk, PerFrame
from stager.stream.errors import StreamError
from stager.stream.protocol import ScanGeometry

__all__ = ["Stem4D"]


class Stem4D(Analysis):
    """Electron counting and virtual detector images (see the module docstring).

    Parameters
    ----------
    center : (float, float), optional
        Beam centre (row, col) in pixels; default the frame centre.
    bf_radius, adf_inner, adf_outer : float, optional
        Detector radii in pixels (defaults from the frame size).
    dark : float
        Dark level subtracted before counting (a constant frame).
    background_threshold, xray_threshold : float
        Counting thresholds (``kernels.count_electrons``).
    """

    name = "stem4d"

    def __init__(self, center: Optional[Sequence[float]] = None,
                 bf_radius: Optional[float] = None, adf_inner: Optional[float] = None,
                 adf_outer: Optional[float] = None, dark: float = 20.0,
                 background_threshold: float = 40.0, xray_threshold: float = 2000.0) -> None:
        if not background_threshold < xray_threshold:
            raise StreamError(f"stem4d: background_threshold {background_threshold} must be "
                              f"below xray_threshold {xray_threshold}")
        self.params: Dict[str, Any] = {
            "center": None if center is None else [float(c) for c in center],
            "bf_radius": bf_radius, "adf_inner": adf_inner, "adf_outer": adf_outer,
            "dark": float(dark), "background_threshold": float(background_threshold),
            "xray_threshold": float(xray_threshold)}
        self._shape: Optional[Tuple[int, int]] = None
        self._masks: Optional[np.ndarray] = None
        self._dark: Optional[np.ndarray] = None

    # ---- set-up ----
    def detector(self, shape: Tuple[int, int]) -> Dict[str, Any]:
        """The resolved geometry of the virtual detectors for frames of ``shape``."""
        rows, cols = shape
        p = self.params
        c = p["center"] or [(rows - 1) / 2, (cols - 1) / 2]
        bf = p["bf_radius"] or rows / 8
        inner = p["adf_inner"] or rows / 6
        outer = p["adf_outer"] or rows / 2
        return {"center": list(c), "bf_radius": float(bf), "adf_inner": float(inner),
                "adf_outer": float(outer)}

    def prepare(self, geometry: ScanGeometry) -> None:
        if np.dtype(geometry.dtype) != np.dtype(np.uint16):
            raise StreamError(f"stem4d counts uint16 frames; scan {geometry.scan} sends "
                              f"{geometry.dtype}")
        self._setup((int(geometry.shape[0]), int(geometry.shape[1])))

    def _setup(self, shape: Tuple[int, int]) -> None:
        if self._shape == shape:
            return
        from kernels import ring_mask

        d = self.detector(shape)
        self._masks = np.stack([ring_mask(shape, d["center"], 0.0, d["bf_radius"]),
                                ring_mask(shape, d["center"], d["adf_inner"], d["adf_outer"])])
        self._dark = np.full(shape, self.params["dark"], np.float32)
        self._shape = shape

    # ---- the hooks ----
    def columns(self) -> Tuple[str, ...]:
        return ("sum", "bf", "adf", "electrons")

    def process_partition(self, frames: np.ndarray, positions: np.ndarray,
                          complete: np.ndarray) -> PerFrame:
        from kernels import count_electrons, virtual_detector

        frames = np.ascontiguousarray(frames, np.uint16)
        k = len(frames)
        self._setup((int(frames.shape[1]), int(frames.shape[2])))
        sums = frames.reshape(k, -1).sum(axis=1, dtype=np.float64)
        vd = virtual_detector(frames, self._masks)
        counts = np.zeros(k, np.int64)
        events = []
        hits = np.empty(frames.shape[1:], np.uint8)
        bg, xr = self.params["background_threshold"], self.params["xray_threshold"]
        for i in range(k):
            count_electrons(frames[i], self._dark, bg, xr, out=hits)
            idx = np.flatnonzero(hits).astype(np.uint32)
            counts[i] = idx.size
            events.append(idx)
        flat = np.concatenate(events) if events else np.zeros(0, np.uint32)
        return PerFrame([Chunk(np.asarray(positions, np.int64).copy(),
                               np.asarray(complete, bool).copy(),
                               {"sum": sums, "bf": vd[:, 0].copy(), "adf": vd[:, 1].copy(),
                                "electrons": counts},
                               {"events": (counts.copy(), flat)})])

    def images(self, partial: PerFrame, geometry: ScanGeometry) -> Dict[str, np.ndarray]:
        F, shape = geometry.frames, geometry.scan_shape
        return {"sum_image": partial.column("sum", F, np.float64).reshape(shape),
                "bright_field": partial.column("bf", F, np.float64).reshape(shape),
                "annular_dark_field": partial.column("adf", F, np.float64).reshape(shape),
                "electron_counts": partial.column("electrons", F, np.int64).reshape(shape)}

    def write(self, h5: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
        from stem4d.layout import write_stem

        write_stem(h5, self, partial, geometry)
