"""The one dtype rule of the readers: frames keep the file's dtype unless asked, and a
conversion never overflows silently.

Readers return frames in the file's own dtype (byte order made native) by
default; that dtype must be one of :data:`SUPPORTED`.  A reader opened with
``dtype=`` (e.g. ``open_frames(path, dtype="uint16")`` for the uint16 NF/FF
kernels) converts each frame as it is read, by this rule:

* **Inactive-pixel marker.**  Unsigned integer detectors mark pixels they could
  not measure with the largest value of their bit depth: an Eiger writes
  ``2**16 - 1`` in 16-bit and ``2**32 - 1`` in 32-bit images (NXmx
  ``pixel_mask`` lists the static ones).  That marker maps to the target's
  marker: the largest value of an unsigned target (65535 for uint16), ``-1``
  for a signed integer target, NaN for a float target.
* **Values that fit** are copied exactly.  Narrowing to an unsigned type keeps
  its largest value for the marker, so counts must be ``<= max - 1`` (65534 for
  uint16); integers converted to float32 must be within ``+-2**24`` (float64:
  ``2**53``), where every integer is exact.
* **Values that do not fit** raise :class:`~kernels.errors.ReaderError` naming
  the file, frame, how many pixels, the extreme value and what to do
  (``overflow="error"``, the default); with ``overflow="clip"`` they saturate
  at the largest (smallest) value that is not the marker -- 65534 for uint16,
  0 for negative values into an unsigned type -- and integers beyond float32's
  exact range are rounded.
* **Floats to integers** are refused (a float frame has no count to keep):
  read it as float32 or float64.
"""
from __future__ import annotations

import numpy as np

from ..errors import ReaderError

__all__ = ["SUPPORTED", "OVERFLOW", "check_dtype", "marker_of", "convert_into"]

SUPPORTED = ("uint8", "uint16", "uint32", "int16", "int32", "float32", "float64")
OVERFLOW = ("error", "clip")
_EXACT_FLOAT = {np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


def check_dtype(dtype, what: str) -> np.dtype:
    """``dtype`` as a native numpy dtype if it is one of :data:`SUPPORTED`."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ReaderError(f"{what}: {dtype!r} is not a dtype; use one of {SUPPORTED}") from exc
    if dt.names is not None or dt.subdtype is not None:
        raise ReaderError(f"{what}: compound/array data is not frames; pass the dataset that "
                          "holds the images")
    dt = dt.newbyteorder("=")
    if dt.name not in SUPPORTED:
        raise ReaderError(f"{what}: dtype {dt.name} is not a frame dtype; frames are one of "
                          f"{', '.join(SUPPORTED)}")
    return dt


def marker_of(dtype) -> int | float | None:
    """The inactive-pixel marker of frames of ``dtype`` (see the module docstring)."""
    dt = np.dtype(dtype)
    if dt.kind == "u":
        return int(np.iinfo(dt).max)
    if dt.kind == "i":
        return -1
    return float("nan")


def _limits(src: np.dtype, dst: np.dtype):
    """(lowest, highest) value of ``src`` frames that ``dst`` holds exactly, non-marker."""
    if dst.kind == "f":
        if src.kind == "f":
            return None
        bound = _EXACT_FLOAT[dst]
        return -bound, bound
    info = np.iinfo(dst)
    hi = int(info.max) - 1 if dst.kind == "u" else int(info.max)
    return int(info.min), hi


def convert_into(src: np.ndarray, out: np.ndarray, overflow: str, where: str) -> np.ndarray:
    """Convert one frame (or band) ``src`` into ``out`` by the module's rule.

    Parameters
    ----------
    src : array in the file's dtype (native byte order)
    out : array of the target dtype, same shape
    overflow : "error" or "clip"
    where : "FILE:DATASET frame N", for messages

    Raises
    ------
    ReaderError
        A value does not fit (``overflow="error"``), or a float frame was asked as integers.
    """
    s, d = src.dtype, out.dtype
    if s == d:
        out[...] = src
        return out
    if s.kind == "f" and d.kind != "f":
        raise ReaderError(f"{where}: {s.name} frames cannot be read as {d.name} without "
                          f"rounding; open the reader with dtype='{s.name}' (or None)")
    marked = None
    if s.kind == "u":
        m = src == np.iinfo(s).max
        if m.any():
            marked = m
    limits = _limits(s, d)
    values = src
    if limits is not None:
        lo, hi = limits
        if s.kind == "f":
            valid = src[np.isfinite(src)]
        else:
            valid = src if marked is None else src[~marked]
        vmin = valid.min() if valid.size else 0
        vmax = valid.max() if valid.size else 0
        if vmax > hi or vmin < lo:
            if overflow != "clip":
                over = int(np.count_nonzero(valid > hi))
                under = int(np.count_nonzero(valid < lo))
                what = (f"{over} pixels above {hi} (max {vmax})" if over
                        else f"{under} pixels below {lo} (min {vmin})")
                raise ReaderError(
                    f"{where}: {what} do not fit {d.name}"
                    + (f" ({hi + 1} is the inactive-pixel marker)" if d.kind == "u" else "")
                    + f"; read the frames as {s.name} (dtype=None) or a wider type, or pass "
                    "overflow='clip' to saturate them")
            # into a float: rounded to the nearest representable value; into an integer:
            # saturated (the marker pixels are set after)
            values = src if d.kind == "f" else np.clip(src, lo, hi)
    with np.errstate(invalid="ignore"):
        out[...] = values
    if marked is not None:
        out[marked] = marker_of(d)
    return out
