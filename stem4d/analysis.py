"""The 4D-STEM analysis: pixel sums, virtual detectors and electron events per frame.

Per partition of K frames ``(k, rows, cols)`` of any dtype of
:data:`kernels.stem.FRAME_DTYPES` (uint8/16/32, int8/16/32, float32/64; never cast):

- ``sum``: the sum of all pixels of each frame, float64 from the frames' values;
- ``virtual``: one value per mask (:mod:`stem4d.masks`: LiberTEM's convention,
  centre ``(cx, cy)`` in x, y order, ``r <= R``), float64,
  ``kernels.virtual_detector``;
- ``electrons``: the events of ``kernels.count_electrons`` (``(frame - dark) /
  gain`` between the background and X-ray thresholds, a strict local maximum,
  neighbours raw or blanked as stempy does -- ``rule``), each as the flat pixel
  index ``row * cols + col`` (uint32) -- the ragged column ``events`` -- and
  their number per frame; with ``events="detector"`` (a counting detector, ASI TPX3)
  each pixel's value is that many electrons, taken from its CSR frames as they are
  (:func:`stem4d.counting.detector_events`, no dark, gain or thresholds).

``mode`` picks what runs: ``"both"`` (default), ``"virtual"`` (sums and virtual
images, no counting) or ``"count"`` (sums and counting). The output file and
every convention: ``docs/stem4d-output.md``.

The partial is a :class:`analyses.contract.PerFrame`: merging concatenates,
so the per-node and cross-node tree merges move each frame's values once.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from analyses.contract import Analysis, Chunk, PerFrame
from streams.protocol import ScanGeometry
from stem4d.counting import Thresholds, detector_events, sampled_thresholds
from stem4d.errors import Stem4DError
from stem4d.masks import Mask, resolve_masks

__all__ = ["Stem4D", "MODES", "THRESHOLD_MODES"]

MODES = ("both", "virtual", "count")
THRESHOLD_MODES = ("fixed", "sampled")


class Stem4D(Analysis):
    """Electron counting and virtual detector images (see the module docstring).

    Parameters
    ----------
    mode : {"both", "virtual", "count"}
        Virtual images and counting, virtual images only, counting only (the
        per-frame sum is always computed).
    cx, cy : float, optional
        Default centre of the masks in x (column), y (row) order, pixels; default
        the frame centre ``((cols - 1) / 2, (rows - 1) / 2)``.
    masks : list of dict, optional
        Disks ``{"name", "r"}`` and rings ``{"name", "ri", "ro"}``, each with an
        optional own ``cx``, ``cy`` (:mod:`stem4d.masks`).
    mask_file : str, optional
        ``FILE.npy`` / ``FILE.npz`` / ``FILE.h5:/DATASET_OR_GROUP`` of masks (weights).
    bf_radius, adf_inner, adf_outer : float, optional
        Shorthand for the masks ``bright_field`` (disk) and ``annular_dark_field``
        (ring); both are made with defaults (rows/8; rows/6 .. rows/2) when no
        other mask is given.
    dark : float, str or array
        Dark reference subtracted before counting: a number, or per pixel
        (``FILE.npy``, ``FILE.h5:/DATASET``, an array) of the frame shape.
    gain : str or array, optional
        Per-pixel gain map; counted value ``(frame - dark) / gain`` (stempy's meaning).
    thresholds : {"fixed", "sampled"}
        ``"fixed"``: ``background_threshold``/``xray_threshold`` as given;
        ``"sampled"``: computed from ``samples`` frames as stempy does
        (:mod:`stem4d.counting`), from ``threshold_frames`` or, offline, the scan.
    background_threshold, xray_threshold : float
        The fixed thresholds (``kernels.count_electrons``).
    background_sigma, xray_sigma : float
        stempy's ``background_threshold_n_sigma`` / ``xray_threshold_n_sigma``.
    samples : int
        stempy's ``number_of_samples``: frames sampled for the thresholds.
    threshold_frames : str, optional
        ``FILE.h5:/DATASET`` of frames to sample (required on a stream).
    rule : {"raw", "stempy"}
        Local-maximum test against raw neighbours (ours) or against neighbours
        blanked outside the thresholds (stempy).
    events : {"counted", "detector"}
        Events counted here (dark, gain, thresholds, the rule), or the detector's own
        counts (each pixel's value that many electrons; its CSR frames kept sparse).
    threshold_stats : dict, optional
        Thresholds already computed (set by the flow; not for users).

    Raises
    ------
    Stem4DError
        A bad parameter, with what to give instead.
    """

    name = "stem4d"

    def __init__(self, mode: str = "both", cx: Optional[float] = None,
                 cy: Optional[float] = None, masks: Optional[Sequence[Dict[str, Any]]] = None,
                 mask_file: Optional[str] = None, bf_radius: Optional[float] = None,
                 adf_inner: Optional[float] = None, adf_outer: Optional[float] = None,
                 dark: Any = 20.0, gain: Any = None, thresholds: str = "fixed",
                 background_threshold: float = 40.0, xray_threshold: float = 2000.0,
                 background_sigma: float = 4.0, xray_sigma: float = 10.0, samples: int = 40,
                 threshold_frames: Optional[str] = None, rule: str = "raw",
                 threshold_stats: Optional[Dict[str, Any]] = None,
                 center: Any = None, events: str = "counted") -> None:
        if center is not None:
            raise Stem4DError("stem4d: 'center' (row, col) is gone; give cx= (x = column) and "
                              "cy= (y = row), LiberTEM's order")
        if mode not in MODES:
            raise Stem4DError(f"stem4d: mode {mode!r}; expected one of {MODES}")
        if thresholds not in THRESHOLD_MODES:
            raise Stem4DError(f"stem4d: thresholds {thresholds!r}; expected one of "
                              f"{THRESHOLD_MODES}")
        if rule not in ("raw", "stempy"):
            raise Stem4DError(f"stem4d: rule {rule!r}; expected 'raw' or 'stempy'")
        if events not in ("counted", "detector"):
            raise Stem4DError(f"stem4d: events {events!r}; expected 'counted' or 'detector'")
        if thresholds == "fixed" and not background_threshold < xray_threshold:
            raise Stem4DError(f"stem4d: background_threshold {background_threshold} must be "
                              f"below xray_threshold {xray_threshold}")
        if int(samples) < 1:
            raise Stem4DError(f"stem4d: samples must be >= 1, got {samples}")
        if masks is not None and not (isinstance(masks, (list, tuple))
                                      and all(isinstance(m, dict) for m in masks)):
            raise Stem4DError("stem4d: masks is a list of dicts, e.g. "
                              '[{"name": "bf", "r": 8}, {"name": "adf", "ri": 12, "ro": 30}]')
        self.params: Dict[str, Any] = {
            "mode": mode, "cx": cx, "cy": cy, "masks": list(masks) if masks else None,
            "mask_file": mask_file, "bf_radius": bf_radius, "adf_inner": adf_inner,
            "adf_outer": adf_outer, "dark": dark, "gain": gain, "thresholds": thresholds,
            "background_threshold": float(background_threshold),
            "xray_threshold": float(xray_threshold), "background_sigma": float(background_sigma),
            "xray_sigma": float(xray_sigma), "samples": int(samples),
            "threshold_frames": threshold_frames, "rule": rule,
            "threshold_stats": threshold_stats, "events": events}
        self._shape: Optional[Tuple[int, int]] = None
        self._masks: List[Mask] = []
        self._stack: Optional[np.ndarray] = None
        self._runs: Any = None          # kernels.stem.mask_runs of the stack, made once
        self._dark: Any = None
        self._gain: Optional[np.ndarray] = None
        self._thresholds: Optional[Thresholds] = (
            Thresholds(**threshold_stats) if threshold_stats else
            Thresholds(float(background_threshold), float(xray_threshold))
            if thresholds == "fixed" else None)

    @property
    def virtual(self) -> bool:
        return self.params["mode"] in ("both", "virtual")

    @property
    def counting(self) -> bool:
        return self.params["mode"] in ("both", "count")

    @property
    def counted(self) -> bool:
        """Counting here (False: no counting, or the detector's events)."""
        return self.counting and self.params["events"] == "counted"

    @property
    def sparse(self) -> bool:   # type: ignore[override]
        """Sums, virtual images and a detector's events compute on CSR frames; counting
        here needs dense frames."""
        return not self.counted

    # ---- set-up ----
    def masks(self, shape: Tuple[int, int]) -> List[Mask]:
        """The virtual detectors for frames of ``shape`` (name, weights, attributes)."""
        self._setup(shape)
        return list(self._masks)

    def thresholds(self) -> Thresholds:
        if self._thresholds is None:
            raise Stem4DError("stem4d: thresholds='sampled' needs frames to sample: offline the "
                              "flow samples the scan itself; on a stream give "
                              "threshold_frames=FILE.h5:/DATASET (a previous scan or calibration "
                              "frames), or thresholds='fixed'")
        return self._thresholds

    def sample_thresholds(self, frames: np.ndarray) -> Thresholds:
        """Compute the thresholds from sampled ``frames`` (k, rows, cols) and keep them."""
        _check_dtype(frames.dtype, "threshold frames")
        shape = (int(frames.shape[1]), int(frames.shape[2]))
        self._load_calibration(shape)
        p = self.params
        t = sampled_thresholds(frames, self._dark, self._gain, p["background_sigma"],
                               p["xray_sigma"])
        self._thresholds = t
        p["threshold_stats"] = t.as_dict()
        p["background_threshold"], p["xray_threshold"] = t.background_threshold, \
            t.x_ray_threshold
        return t

    def samples(self, geometry: ScanGeometry) -> Optional[np.ndarray]:
        """Offline, sampled thresholds with no ``threshold_frames``: the scan's own frames
        (``samples`` of them, evenly spaced, as stempy samples)."""
        from stem4d.counting import sample_indices

        p = self.params
        if self.counted and self._thresholds is None and p["threshold_frames"] is None:
            return sample_indices(geometry.frames, p["samples"])
        return None

    def use_samples(self, frames: np.ndarray) -> Dict[str, Any]:
        return {"threshold_stats": self.sample_thresholds(frames).as_dict()}

    def prepare(self, geometry: ScanGeometry) -> None:
        """Check the frames' dtype, build the masks, load dark and gain, resolve thresholds.

        Raises
        ------
        Stem4DError
            Unsupported dtype, a mask, dark or gain of another shape, sampled
            thresholds without frames to sample.
        """
        _check_dtype(geometry.dtype, f"stem4d, scan {geometry.scan}")
        shape = (int(geometry.shape[0]), int(geometry.shape[1]))
        self._setup(shape)
        if self.counted and self._thresholds is None:
            src = self.params["threshold_frames"]
            if src is None:
                self.thresholds()       # raises, saying what to give
            self.sample_thresholds(_read_samples(src, self.params["samples"]))

    def _load_calibration(self, shape: Tuple[int, int]) -> None:
        from stem4d.inputs import load_array

        p = self.params
        for key in ("dark", "gain"):
            spec = p[key]
            if spec is None:
                setattr(self, f"_{key}", None)
                continue
            a = load_array(spec, key)
            if a.ndim == 0 and key == "dark":
                val: Any = float(a)
            else:
                if a.shape != shape:
                    raise Stem4DError(f"{key} {_name(spec)} has shape {a.shape}; the frames "
                                      f"are {shape} (rows, cols)")
                if a.dtype.kind not in "uif" or not np.isfinite(a).all():
                    raise Stem4DError(f"{key} {_name(spec)}: expected finite real values")
                if key == "gain" and (a == 0).any():
                    raise Stem4DError(f"gain {_name(spec)}: {int((a == 0).sum())} pixels are 0 "
                                      "(the counted value is (frame - dark) / gain)")
                val = np.ascontiguousarray(a, np.float64)
            setattr(self, f"_{key}", val)

    def _setup(self, shape: Tuple[int, int]) -> None:
        if self._shape == shape:
            return
        from kernels.stem import mask_runs
        from stem4d.inputs import load_masks

        p = self.params
        if self.virtual:
            fm = load_masks(p["mask_file"]) if p["mask_file"] else None
            self._masks = resolve_masks(p, shape, fm)
            self._stack = np.stack([m.weights for m in self._masks])
            self._runs = mask_runs(self._stack)
        if self.counted:
            self._load_calibration(shape)
        self._shape = shape

    # ---- the hooks ----
    def columns(self) -> Tuple[str, ...]:
        return ("sum",) + (("virtual",) if self.virtual else ()) + \
            (("electrons",) if self.counting else ())

    def process_partition(self, frames: Any, positions: np.ndarray,
                          complete: np.ndarray) -> PerFrame:
        """Sums, virtual images and events of the K frames: each kernel once over the whole
        partition (a Python call per frame cost more than the kernels at 128x128)."""
        from kernels import count_stack, frame_sums, virtual_detector

        from analyses.sparse import CSRFrames, row_sums

        _check_dtype(frames.dtype, "stem4d, partition")
        k = len(frames)
        self._setup((int(frames.shape[1]), int(frames.shape[2])))
        csr = isinstance(frames, CSRFrames)     # only when sparse: no counting here
        if csr:
            sums = row_sums(frames)[:, 0]
        else:
            sums = frame_sums(frames) if k else np.zeros(0)
        cols: Dict[str, np.ndarray] = {"sum": sums}
        ragged: Dict[str, Any] = {}
        if self.virtual and k:
            stack = self._stack
            assert stack is not None      # _setup made it
            cols["virtual"] = row_sums(frames, stack.reshape(len(stack), -1)) if csr \
                else virtual_detector(frames, stack, runs=self._runs)
        elif self.virtual:
            cols["virtual"] = np.zeros((0, len(self._masks)))
        if self.counting and not self.counted:
            counts, flat = detector_events(frames)
            cols["electrons"] = counts
            ragged["events"] = (counts.copy(), flat)
        elif self.counting:
            t = self.thresholds()
            counts, flat = (count_stack(frames, self._dark, t.background_threshold,
                                        t.x_ray_threshold, gain=self._gain,
                                        rule=self.params["rule"]) if k else
                            (np.zeros(0, np.int64), np.zeros(0, np.uint32)))
            cols["electrons"] = counts
            ragged["events"] = (counts.copy(), flat)
        return PerFrame([Chunk(np.asarray(positions, np.int64).copy(),
                               np.asarray(complete, bool).copy(), cols, ragged)])

    def images(self, partial: PerFrame, geometry: ScanGeometry) -> Dict[str, np.ndarray]:
        """``sum_image``, ``virtual/<mask name>`` per mask, ``electron_counts``."""
        F, shape = geometry.frames, geometry.scan_shape
        out = {"sum_image": partial.column("sum", F, np.float64).reshape(shape)}
        if self.virtual:
            masks = self.masks(geometry.shape)
            v = (partial.column("virtual", F, np.float64) if partial.chunks
                 else np.zeros((F, len(masks))))
            for j, m in enumerate(masks):
                out[f"virtual/{m.name}"] = v[:, j].reshape(shape)
        if self.counting:
            out["electron_counts"] = partial.column("electrons", F, np.int64).reshape(shape)
        return out

    def write(self, h5: Any, partial: PerFrame, geometry: ScanGeometry) -> None:
        from stem4d.layout import write_stem

        write_stem(h5, self, partial, geometry)


def _check_dtype(dtype: Any, what: str) -> None:
    """:func:`kernels.check_frame_dtype` of ``what``'s frames, as a Stem4DError."""
    from kernels import KernelArgumentError, check_frame_dtype

    try:
        check_frame_dtype(what, dtype)
    except KernelArgumentError as e:
        raise Stem4DError(str(e)) from e


def _name(spec: Any) -> str:
    return spec if isinstance(spec, str) else f"(an array of shape {np.shape(spec)})"


def _read_samples(source: str, samples: int) -> np.ndarray:
    """``samples`` frames evenly spaced over the frames dataset ``FILE.h5:/DATASET``."""
    import os

    import h5py

    from stem4d.counting import sample_indices

    path, sep, dset = source.rpartition(":")
    if not sep or not dset.startswith("/"):
        raise Stem4DError(f"threshold_frames {source!r}: expected FILE.h5:/DATASET")
    if not os.path.exists(path):
        raise Stem4DError(f"threshold_frames: file {path} does not exist")
    with h5py.File(path, "r") as f:
        if dset not in f:
            raise Stem4DError(f"threshold_frames: {path} has no dataset {dset}")
        d = f[dset]
        if d.ndim not in (3, 4):
            raise Stem4DError(f"threshold_frames {source}: shape {d.shape}; expected frames "
                              "(F, rows, cols) or (ny, nx, rows, cols)")
        n = int(np.prod(d.shape[:-2]))
        lead = d.shape[:-2]
        return np.stack([d[np.unravel_index(int(i), lead)] for i in sample_indices(n, samples)])
