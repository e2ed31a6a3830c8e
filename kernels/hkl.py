"""Reflections of a cubic lattice that reach the detector (after MIDAS's ``GetHKLList``).

MIDAS (``FF_HEDM/src/GetHKLList.c``, built for NF as ``GetHKLListNF``)
enumerates ``-10 <= h, k, l <= 10`` through sginfo, drops systematic
absences, lists every member of each family **and** its negative
(``-h -k -l``) once, sorts by d-spacing (largest first), keeps
``d >= lambda / (2 sin(atan(MaxRingRad / Lsd) / 2))`` and numbers the rings
1, 2, ... by distinct d (within 1e-4 A).  Per reflection it writes
``h k l d ring g1 g2 g3 theta 2theta radius``, where ``g = B @ hkl`` is the
Cartesian reciprocal-lattice vector (1/A; ``B = I / a`` for cubic) that the
NF fit rotates, and ``radius = Lsd tan(2theta)``.

Here the same list is built for the **cubic** lattices without glide or
screw absences, where the absences are those of the lattice centring alone:
P (all hkl), I (``h + k + l`` even, e.g. BCC, space group 229) and F
(h, k, l all odd or all even, e.g. FCC, 225).  Non-symmorphic cubic groups
(diamond 227, ...) have further absences that sginfo knows and we do not;
they raise an error instead of giving a wrong list.

Deliberate differences: within a ring the order is fixed (``h``, ``k``,
``l`` descending) where MIDAS's ``qsort`` leaves it unspecified, and the
cut-off uses the first detector distance (MIDAS's parameter parser keeps
the *last* ``Lsd`` line, while ``MakeDiffrSpots`` cuts 2theta at the first;
the first is the nearest detector, so the larger 2theta, so nothing that
reaches it is lost).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import KernelArgumentError

__all__ = ["HKLList", "hkl_list", "lattice_centring", "MAX_INDEX"]

#: MIDAS's ``Maxh = Maxk = Maxl = 10``.
MAX_INDEX = 10
#: Two reflections belong to the same ring when their d differ by less (A), as in MIDAS.
RING_EPSILON = 1e-4

# Symmorphic cubic space groups by lattice centring (International Tables).
_CENTRING = {
    "P": (195, 200, 207, 215, 221),
    "F": (196, 202, 209, 216, 225),
    "I": (197, 204, 211, 217, 229),
}


def lattice_centring(space_group: int) -> str:
    """'P', 'F' or 'I' for a symmorphic cubic space group; error otherwise."""
    for code, groups in _CENTRING.items():
        if space_group in groups:
            return code
    if isinstance(space_group, (int, np.integer)) and 195 <= space_group <= 230:
        raise KernelArgumentError(
            f"SpaceGroup {space_group} is cubic but has glide/screw absences (non-symmorphic); "
            "only the symmorphic cubic groups are supported: "
            f"{sorted(sum(_CENTRING.values(), ()))} (e.g. 225 FCC, 229 BCC, 221 simple cubic)")
    raise KernelArgumentError(
        f"SpaceGroup {space_group!r} is not cubic (195-230); only cubic lattices are supported")


def _allowed(h, k, ell, centring: str):
    if centring == "F":
        parity = (h % 2) + (k % 2) + (ell % 2)
        return (parity == 0) | (parity == 3)
    if centring == "I":
        return (h + k + ell) % 2 == 0
    return np.ones(h.shape, bool)


@dataclass(frozen=True)
class HKLList:
    """Reflections sorted by d-spacing, largest first (MIDAS's ``hkls.csv``).

    All arrays have one entry per reflection (a family's members and their
    negatives are separate reflections):

    hkl : (n, 3) int32 Miller indices
    g : (n, 3) float64 Cartesian reciprocal-lattice vector ``B @ hkl`` (1/A)
    d : (n,) d-spacing (A)
    ring : (n,) int32 ring number, 1-based
    theta, two_theta : (n,) Bragg angle and scattering angle (degrees)
    radius : (n,) ring radius ``lsd * tan(2 theta)`` (um)
    """

    hkl: np.ndarray
    g: np.ndarray
    d: np.ndarray
    ring: np.ndarray
    theta: np.ndarray
    two_theta: np.ndarray
    radius: np.ndarray
    wavelength: float
    lsd: float

    def __len__(self) -> int:
        return len(self.d)

    @property
    def n_rings(self) -> int:
        return int(self.ring.max()) if len(self.ring) else 0

    def ring_table(self) -> np.ndarray:
        """One row per ring: (ring, d, two_theta, radius um, multiplicity)."""
        rows = []
        for r in range(1, self.n_rings + 1):
            sel = self.ring == r
            i = int(np.argmax(sel))
            rows.append((r, self.d[i], self.two_theta[i], self.radius[i], int(sel.sum())))
        return np.array(rows, dtype=[("ring", np.int32), ("d", np.float64),
                                     ("two_theta", np.float64), ("radius", np.float64),
                                     ("multiplicity", np.int32)])

    def select_rings(self, rings) -> HKLList:
        """Only the reflections of the given ring numbers (MIDAS's ``RingsToUse``)."""
        rings = np.asarray(list(rings), dtype=np.int64)
        bad = [int(r) for r in rings if not 1 <= r <= self.n_rings]
        if bad:
            raise KernelArgumentError(
                f"RingsToUse {bad} outside the {self.n_rings} rings on the detector")
        sel = np.isin(self.ring, rings)
        return HKLList(hkl=self.hkl[sel], g=self.g[sel], d=self.d[sel], ring=self.ring[sel],
                       theta=self.theta[sel], two_theta=self.two_theta[sel],
                       radius=self.radius[sel], wavelength=self.wavelength, lsd=self.lsd)


def hkl_list(lattice_parameter: float, wavelength: float, lsd: float, max_ring_radius: float,
             space_group: int = 225) -> HKLList:
    """The reflections of a cubic lattice whose ring radius on the detector is at most
    ``max_ring_radius``.

    Parameters
    ----------
    lattice_parameter : cubic lattice constant a (A)
    wavelength : X-ray wavelength (A)
    lsd : sample-detector distance (um) at which radii are computed and cut
    max_ring_radius : largest ring radius on the detector (um; MIDAS's ``MaxRingRad``)
    space_group : a symmorphic cubic space group (225 FCC, 229 BCC, 221 SC, ...)

    Raises
    ------
    KernelArgumentError
        For a non-positive or non-finite number, or an unsupported space group.
    """
    for name, v in (("lattice_parameter", lattice_parameter), ("wavelength", wavelength),
                    ("lsd", lsd), ("max_ring_radius", max_ring_radius)):
        if not (isinstance(v, (int, float, np.number)) and math.isfinite(v) and v > 0):
            raise KernelArgumentError(f"{name} must be a finite number > 0, got {v!r}")
    centring = lattice_centring(space_group)
    r = np.arange(-MAX_INDEX, MAX_INDEX + 1)
    h, k, ell = (a.ravel() for a in np.meshgrid(r, r, r, indexing="ij"))
    keep = ((h != 0) | (k != 0) | (ell != 0)) & _allowed(h, k, ell, centring)
    hkl = np.stack([h[keep], k[keep], ell[keep]], -1)
    g = hkl / float(lattice_parameter)
    d = 1.0 / np.linalg.norm(g, axis=1)
    d_min = wavelength / (2.0 * math.sin(math.atan(max_ring_radius / lsd) / 2.0))
    sel = d >= d_min
    hkl, g, d = hkl[sel], g[sel], d[sel]
    # d descending; within equal d, (h, k, l) descending: a fixed order.
    order = np.lexsort((-hkl[:, 2], -hkl[:, 1], -hkl[:, 0], -np.round(d / RING_EPSILON)))
    hkl, g, d = hkl[order], g[order], d[order]
    ring = np.empty(len(d), np.int32)
    n = 0
    ref = math.inf
    for i, di in enumerate(d):
        if abs(di - ref) >= RING_EPSILON:
            n += 1
            ref = di
        ring[i] = n
    theta = np.degrees(np.arcsin(wavelength / (2.0 * d)))
    two_theta = 2.0 * theta
    radius = lsd * np.tan(np.radians(two_theta))
    return HKLList(hkl.astype(np.int32), np.ascontiguousarray(g), d, ring, theta, two_theta,
                   radius, float(wavelength), float(lsd))
