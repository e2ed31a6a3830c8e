"""Virtual-detector masks: from parameters (disks, rings) and from mask files.

Convention (LiberTEM's, ``libertem.masks.circular``/``ring``): the centre is
``(cx, cy)`` in x (column), y (row) order, in pixels, pixel (row, col) at
(x, y) = (col, row); a disk holds the pixels with ``r <= radius``, a ring those
with ``radius_inner < r <= radius``. A mask parameter is a dict::

    {"name": "bf", "r": 8}                              # disk around (cx, cy)
    {"name": "adf", "ri": 12, "ro": 30, "cx": 40.5, "cy": 31}   # ring, own centre

``cx``/``cy`` default to the analysis's ``cx``/``cy`` (default the frame centre,
``((cols - 1) / 2, (rows - 1) / 2)``). A mask file holds weights of any value
(``stem4d.inputs.load_masks``); each virtual image is ``sum(frame * mask)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from stem4d.errors import Stem4DError

__all__ = ["Mask", "resolve_masks", "CONVENTION"]

#: Written as the ``convention`` attribute of every parametric virtual image.
CONVENTION = "libertem: centre (cx, cy) = (column, row); disk r <= r; ring ri < r <= ro"

_KEYS = {"name", "r", "ri", "ro", "cx", "cy"}


@dataclass
class Mask:
    """One virtual detector: its name (the dataset ``/virtual/<name>``), weights, attributes."""

    name: str
    weights: np.ndarray
    attrs: Dict[str, Any] = field(default_factory=dict)


def _parametric(spec: Dict[str, Any], shape: Tuple[int, int], cx: float, cy: float) -> Mask:
    from kernels import KernelArgumentError, circular_mask

    bad = set(spec) - _KEYS
    if bad or "name" not in spec:
        raise Stem4DError(f"mask {spec}: keys are name, r (a disk) or ri and ro (a ring), "
                          f"optional cx, cy (x = column, y = row){'; unknown ' if bad else ''}"
                          f"{', '.join(sorted(bad))}")
    cx, cy = float(spec.get("cx", cx)), float(spec.get("cy", cy))
    try:
        if "r" in spec and "ri" not in spec and "ro" not in spec:
            w = circular_mask(shape, cx, cy, float(spec["r"]), 0.0, np.float64)
            attrs = {"kind": "disk", "cx": cx, "cy": cy, "r": float(spec["r"])}
        elif "ri" in spec and "ro" in spec and "r" not in spec:
            w = circular_mask(shape, cx, cy, float(spec["ro"]), float(spec["ri"]), np.float64)
            attrs = {"kind": "ring", "cx": cx, "cy": cy, "ri": float(spec["ri"]),
                     "ro": float(spec["ro"])}
        else:
            raise Stem4DError(f"mask {spec['name']}: give r (a disk) or ri and ro (a ring)")
    except KernelArgumentError as e:
        raise Stem4DError(f"mask {spec['name']}: {e}") from e
    attrs["convention"] = CONVENTION
    return Mask(str(spec["name"]), w, attrs)


def resolve_masks(params: Dict[str, Any], shape: Tuple[int, int],
                  file_masks: Optional[Sequence[Tuple[str, np.ndarray]]] = None) -> List[Mask]:
    """Every mask of ``params`` for frames of ``shape`` (rows, cols), in output order.

    ``masks`` (dicts), then the masks of ``mask_file`` (given as ``file_masks``),
    then the shorthand ``bright_field`` (``bf_radius``) and ``annular_dark_field``
    (``adf_inner``, ``adf_outer``): added when given, and both by default when
    no other mask is (bf radius rows/8, adf rows/6 .. rows/2).

    Raises
    ------
    Stem4DError
        A bad mask, a mask file of another frame shape, duplicate names, no mask.
    """
    rows, cols = shape
    cx = (cols - 1) / 2 if params.get("cx") is None else float(params["cx"])
    cy = (rows - 1) / 2 if params.get("cy") is None else float(params["cy"])
    out = [_parametric(dict(s), shape, cx, cy) for s in params.get("masks") or []]
    for name, w in file_masks or []:
        w = np.asarray(w)
        if w.shape != tuple(shape):
            raise Stem4DError(f"mask_file {params.get('mask_file')}: mask {name!r} has shape "
                              f"{w.shape}, the frames {tuple(shape)}")
        if w.dtype.kind not in "buif" or not np.isfinite(w).all():
            raise Stem4DError(f"mask_file {params.get('mask_file')}: mask {name!r} must hold "
                              f"finite real weights, not {w.dtype}")
        out.append(Mask(str(name), w.astype(np.float64),
                        {"kind": "file", "source": str(params.get("mask_file"))}))
    default = not out
    if default or params.get("bf_radius") is not None:
        r = params.get("bf_radius") or rows / 8
        out.append(_parametric({"name": "bright_field", "r": r}, shape, cx, cy))
    if default or params.get("adf_inner") is not None or params.get("adf_outer") is not None:
        ri, ro = params.get("adf_inner"), params.get("adf_outer")
        out.append(_parametric({"name": "annular_dark_field",
                                "ri": rows / 6 if ri is None else ri,
                                "ro": rows / 2 if ro is None else ro}, shape, cx, cy))
    names = [m.name for m in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise Stem4DError(f"masks: names {dup} are used twice (each is /virtual/<name>)")
    for n in names:
        if not n or "/" in n or n.startswith("."):
            raise Stem4DError(f"mask name {n!r}: must be a non-empty HDF5 name without '/'")
    return out
