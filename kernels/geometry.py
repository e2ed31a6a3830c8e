"""MIDAS's HEDM geometry conventions: the one place the NF and the FF forward models take
them from.

Every line below is MIDAS's (marinerhemant/MIDAS at commit 0e6e0e54; ``FF`` =
``FF_HEDM/src/``, ``NF`` = ``NF_HEDM/src/``), and ``docs/guide/hedm.md`` prints the same
table. The NF model (:mod:`kernels.nfmodel`, :mod:`kernels.nfgeometry`) defined the shared
ones first; they are re-exported here, and the FF model (:mod:`kernels.ffmodel`) takes
every convention from this module.

Each convention, its value, and the MIDAS lines that define it:

* **lab frame**: beam along +x, z up, y = z cross x; the sample at the origin
  (``FF/ForwardSimulationCompressed.c`` 626-641, a pixel's lab point).
* **omega sense**: the sample turns by +omega about +z, ``G_lab = Rz(omega) G`` with ``Rz``
  active, counter-clockwise seen from +z (``FF/MIDAS_Math.c`` 269-274 ``RotateAroundZ``,
  called at ``FF/ForwardSimulationCompressed.c`` 239).
* **Bragg condition**: ``-G_x cos(omega) + G_y sin(omega) = |G| sin(theta)``, two omegas
  (:func:`calc_omega_kernel`; ``FF/ForwardSimulationCompressed.c`` 161-243 ``CalcOmega``).
* **negative OmegaStep**: frames count down in omega; frame ``k`` is at ``OmegaStart + k
  OmegaStep`` whatever the sign (``FF/PeaksFittingOMPZarrRefactor.c`` 2856-2857).
* **frame -> omega (FF)**: frame ``k``'s omega is its *stamp* ``OmegaStart + k OmegaStep``
  (the frame's start, not its centre), a spot's omega the intensity-weighted mean of its
  frames' stamps, so a spot at omega lights the frames around ``(omega - OmegaStart) /
  OmegaStep`` (:func:`frame_position`; ``FF/PeaksFittingOMPZarrRefactor.c`` 2856-2857,
  ``FF/ForwardSimulationCompressed.c`` 1967-2004: the omega profile centred on the stamps).
* **frame (NF)**: ``floor((omega - OmegaStart) / OmegaStep)`` (``NF/SharedFuncsFit.c`` 536,
  ``OmeBin``; :func:`frame_of`).
* **eta**: ``acos(z / hypot(y, z))``, negated for ``y > 0``: 0 at +z, +90 at -y
  (:func:`eta_kernel`; ``FF/MIDAS_Math.c`` 292-296 ``CalcEtaAngle``).
* **FF pixel**: ``Y = -(y - ybc) px``, ``Z = (z - zbc) px`` (um), ``y`` the column and ``z``
  the row of a frame after ``ImTransOpt``, ``BC ybc zbc`` in pixels: lab +y lies towards
  *smaller* columns (``FF/FitSetupParamsAllZarr.c`` 222-223;
  ``FF/ForwardSimulationCompressed.c`` 1913-1914, ``yDet = yBC - Y / px``;
  ``FF/PeaksFittingOMPZarrRefactor.c`` 884, 1633).
* **NF pixel**: ``y = Y / px + ybc``, lab +y towards larger columns (``NF/SharedFuncsFit.c``
  562; MIDAS's NF reading flips raw frames, :mod:`hedm.imtrans`).
* **FF detector tilt**: a pixel's lab point is ``(Lsd, 0, 0) + Rx(tx) Ry(ty) Rz(tz) (0, Y,
  Z)`` (:func:`ff_tilt_matrix`; ``FF/FitSetupParamsAllZarr.c`` 201-227,
  ``FF/ForwardSimulationCompressed.c`` 605-641).
* **NF detector tilt**: ``RotationTilts`` ``Rz(tz) Ry(ty) Rx(tx)``
  (:func:`kernels.nfgeometry.tilt_matrix`; ``NF/SharedFuncsFit.c`` 230-267).
* **B matrix, hkls**: ``g = B hkl`` with ``CorrectHKLsLatC``'s ``B`` (1/A), reflections
  ring by ring (:mod:`kernels.hkl`; ``FF/ForwardSimulationCompressed.c`` 339-372,
  ``FF/GetHKLList.c``).
* **ImTransOpt**: one code per line, applied in order to each raw frame: 0 none, 1 flip y
  (columns), 2 flip z (rows), 3 transpose (``FF/PeaksFittingOMPZarrRefactor.c`` 1106-1146,
  1425-1428).

The FF and NF detectors differ in MIDAS itself (the sign of y on the detector, the order of
the tilts); the lab frame, the rotation, the Bragg condition and eta are one.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .nfgeometry import tilt_matrix
from .nfmodel import calc_omega_kernel, frame_of

__all__ = ["calc_omega_kernel", "frame_of", "tilt_matrix", "ff_tilt_matrix", "eta_kernel",
           "frame_position", "frame_omega"]


def ff_tilt_matrix(tx: float, ty: float, tz: float) -> np.ndarray:
    """MIDAS FF's detector rotation ``Rx(tx) @ Ry(ty) @ Rz(tz)`` (degrees; module table)."""
    a, b, c = (math.radians(v) for v in (tx, ty, tz))
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rx @ ry @ rz


@njit(cache=True, nogil=True)
def eta_kernel(y, z):
    """MIDAS's ``CalcEtaAngle`` (deg) of a lab ``(y, z)``; 0 at the beam."""
    r = math.hypot(y, z)
    if r == 0.0:
        return 0.0
    e = math.degrees(math.acos(max(-1.0, min(1.0, z / r))))
    return -e if y > 0 else e


@njit(cache=True, nogil=True)
def frame_position(omega, omega_start, omega_step):
    """Where ``omega`` (deg) lies in the sweep, in frames: frame ``k``'s stamp is ``k``."""
    return (omega - omega_start) / omega_step


def frame_omega(frame, omega_start: float, omega_step: float):
    """The omega (deg) MIDAS gives frame ``frame`` (its stamp; array or scalar)."""
    return omega_start + np.asarray(frame, np.float64) * omega_step
