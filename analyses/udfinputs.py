"""What a UDF run takes besides the UDFs: a user ROI and LiberTEM corrections
(``--udf-roi``, ``--corrections``; ``docs/udf.md``, "A user ROI and corrections"). The
corrections are LiberTEM's own ``CorrectionSet``, applied by :mod:`analyses.udf` where
LiberTEM applies them, never re-implemented.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, Optional, Tuple

import numpy as np

from analyses.errors import UDFError
from analyses.geometry import ScanGeometry

__all__ = ["CORRECTIONS", "UDFInputs", "add_arguments", "load_roi", "read_array"]

#: The words of ``corrections=`` (``--corrections``); anything else is a mask file.
CORRECTIONS = ("none", "detector")
#: Pixel masks kept per scan (``"detector"``): scans served at the same time, at most.
_MASKS_KEPT = 16


def add_arguments(r: Any) -> None:
    """``--udf-roi`` and ``--corrections``: the same flags on ``stager stream receive``
    and the offline flow (``analyses.runner``), so live and offline agree."""
    r.add_argument("--udf-roi", dest="udf_roi", metavar="FILE.npy",
                   help="udf: analyses: boolean scan mask (FILE.npy or FILE.h5:/DATASET); "
                        "only frames where it is True reach the UDFs")
    r.add_argument("--corrections", metavar="none|detector|MASK",
                   help="udf: analyses: none (default); detector: the pixel mask of the "
                        "scan's start as LiberTEM's excluded pixels (patched); or a pixel "
                        "mask FILE.npy / FILE.h5:/DATASET (nonzero = excluded)")


def read_array(value: Any, what: str) -> np.ndarray:
    """``value`` as an array: a ``FILE.npy``, a ``FILE.h5:/dataset``, or array-like."""
    if not isinstance(value, str):
        return np.asarray(value)
    try:
        if value.endswith(".npy"):
            return np.load(value, allow_pickle=False)
        from analyses.sources import parse_source
        import h5py

        path, dset = parse_source(value)
        with h5py.File(path, "r") as f:
            return np.asarray(f[dset][()])
    except Exception as e:
        raise UDFError(f"{what} {value}: cannot read it ({e}); give a FILE.npy or "
                       "FILE.h5:/dataset") from e


def load_roi(value: Any) -> Optional[np.ndarray]:
    """A boolean scan mask (``(ny, nx)`` or flat) from an array, ``FILE.npy`` or
    ``FILE.h5:/dataset`` (integers 0/1); None stays None. UDFError otherwise."""
    if value is None:
        return None
    arr = read_array(value, "--udf-roi")
    if arr.dtype != bool:
        if arr.dtype.kind not in "iu" or not np.isin(arr, (0, 1)).all():
            raise UDFError(f"--udf-roi {_shown(value)}: {arr.dtype} values; a ROI is a "
                           "boolean scan mask (True: analyse the frame)")
        arr = arr.astype(bool)
    if arr.ndim not in (1, 2):
        raise UDFError(f"--udf-roi {_shown(value)}: shape {arr.shape}; a ROI is the scan's "
                       "(ny, nx) or flat (ny*nx,)")
    return arr


class UDFInputs:
    """The ROI and corrections of one UDF analysis (``spec`` names it in errors);
    UDFError for a file that does not read, a non-boolean ROI, an unknown word."""

    def __init__(self, spec: str, roi: Any = None, corrections: Any = None) -> None:
        self.spec = spec
        self.roi_source = None if roi is None else _shown(roi)
        self.roi = load_roi(roi)
        self.corrections_source, self._fixed = _corrections_arg(corrections)
        self._masks: Dict[str, Optional[np.ndarray]] = {}     # scan -> excluded ("detector")
        self._sets: Dict[Any, Any] = {}

    @property
    def needs_detector(self) -> bool:
        return self.corrections_source == "detector"

    def use_detector(self, scan: str, pixel_mask: Optional[np.ndarray]) -> None:
        """The pixel mask the detector sent at ``scan``'s start (None: it sent none)."""
        self._masks[scan] = None if pixel_mask is None else np.asarray(pixel_mask) > 0
        while len(self._masks) > _MASKS_KEPT:
            self._masks.pop(next(iter(self._masks)))

    def roi_flat(self, g: ScanGeometry) -> Optional[np.ndarray]:
        """The ROI over the flat frames of ``g`` (None: every frame); its shape checked."""
        if self.roi is None:
            return None
        if self.roi.size != g.frames or (self.roi.ndim == 2
                                         and tuple(self.roi.shape) != tuple(g.scan_shape)):
            raise UDFError(f"{self.spec}: --udf-roi {self.roi_source} has shape "
                           f"{self.roi.shape}, scan {g.scan} is {g.scan_shape[0]}x"
                           f"{g.scan_shape[1]} ({g.frames} frames)")
        return self.roi.reshape(-1)

    def corrections(self, g: ScanGeometry, strict: bool = True) -> Tuple[Any, Any]:
        """``(key, CorrectionSet)`` of scan ``g`` (equal keys: equal sets), or ``(None, None)``.

        With ``"detector"`` and no mask known here: an error when ``strict``, else an
        empty set (merging needs only the dtype the corrections imply).
        """
        if self.corrections_source is None:
            return None, None
        if self._fixed is not None and not isinstance(self._fixed, np.ndarray):
            return "given", self._fixed               # a CorrectionSet given as it is
        if self._fixed is not None:
            key: Any = ("fixed", tuple(g.shape))
            excluded: np.ndarray = self._fixed
        else:
            known = self._masks.get(g.scan)
            if known is None:
                if strict:
                    raise UDFError(
                        f"{self.spec}: --corrections detector, but the start of scan {g.scan} "
                        "carried no pixel mask and no --control gave one (DECTRIS streams "
                        "send it with header_detail all, which --control simplon:// sets, "
                        "and SIMPLON serves config/pixel_mask; a Merlin has none): give "
                        "--corrections FILE.npy or none")
                known = np.zeros(g.shape, bool)
            excluded = known
            key = ("detector", tuple(g.shape),
                   hashlib.sha1(np.packbits(excluded).tobytes()).hexdigest())
        got = self._sets.get(key)
        if got is None:
            if tuple(excluded.shape) != tuple(g.shape):
                raise UDFError(f"{self.spec}: pixel mask ({self.corrections_source}) of "
                               f"shape {excluded.shape}, frames of scan {g.scan} are "
                               f"{g.shape[0]}x{g.shape[1]}")
            from libertem.corrections import CorrectionSet

            try:
                got = CorrectionSet(excluded_pixels=excluded)
            except ValueError as e:     # RepairValueError: a pixel with no good neighbour
                raise UDFError(f"{self.spec}: pixel mask ({self.corrections_source}) of scan "
                               f"{g.scan}: {e} -- LiberTEM patches an excluded pixel with its "
                               "good neighbours and refuses one that has none") from e
            while len(self._sets) >= 2 * _MASKS_KEPT:
                self._sets.pop(next(iter(self._sets)))
            self._sets[key] = got
        return key, got


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else f"<array {np.shape(value)}>"


def _corrections_arg(value: Any) -> Tuple[Any, Any]:
    """``corrections=`` -> (what to record, the fixed excluded mask or CorrectionSet)."""
    if value is None or (isinstance(value, str) and value == "none"):
        return None, None
    if isinstance(value, str) and value == "detector":
        return "detector", None
    if hasattr(value, "have_corrections"):          # a LiberTEM CorrectionSet
        return "CorrectionSet", value
    if isinstance(value, str) and not (value.endswith(".npy") or ":" in value):
        raise UDFError(f"--corrections {value!r}: expected {' or '.join(CORRECTIONS)}, "
                       "or a pixel mask FILE.npy / FILE.h5:/dataset")
    arr = read_array(value, "--corrections")
    if arr.ndim != 2:
        raise UDFError(f"--corrections {_shown(value)}: shape {arr.shape}; a pixel mask is "
                       "one (rows, cols) image, nonzero = excluded")
    return _shown(value), arr > 0
