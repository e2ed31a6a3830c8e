"""FF-HEDM indexing: grains from merged spots (:mod:`hedm.ffspots`), before refinement.

1. **Observed spots** (:class:`Observed`): the spots on a ring, sorted by ring then
   omega, as the kernels of :mod:`kernels.ffindex` take them.
2. **Seeds**: the spots of ring ``OverAllRingToIndex``, strongest first. For a seed and
   each candidate position ``p`` in the beam volume (:func:`candidate_positions`: x, y
   within ``Rsample``, z within ``Hbeam / 2``, step ``StepSizePos``, the origin first),
   the scattering vector the spot implies if it came from ``p``; along its fibre (every
   reflection of the seed's ring, ``StepSizeOrient``) the orientation whose predicted
   spots are found most completely (:func:`kernels.ffindex.fibre_search_kernel`).
3. **Accept** a seed's best candidate when at least ``Completeness`` of its predicted
   spots are found and the seed is among them; the spots it matches within twice the
   tolerances are then *claimed*: a claimed seed is not searched again (the grain is
   known).
4. **Merge** candidates closer than ``MergeAngle`` (misorientation, cubic symmetry) and
   ``MergeDistance``: one grain, the more complete candidate kept.
5. **Fallback**: when no seed gives a grain (no spot on the seed ring, or none complete
   enough), a uniform search of the fundamental zone (:func:`kernels.crystal.
   fundamental_zone_grid`, ``max(StepSizeOrient, 2)`` deg) at the origin, accepting the
   most complete orientations in turn.
6. **Sense**: the strongest seeds searched again at the origin, with omega read both ways
   (:func:`sense_check`): a sweep whose spots fit the opposite rotation sense, or fit both,
   is refused by stage 2 rather than indexed as its mirror image (MIDAS's conventions,
   :mod:`kernels.geometry`).

Spots matched by two grains are *shared*: :func:`index_spots` lists them (within the
indexing tolerances); refinement gives a spot its overlap disturbs less weight (soft-L1),
and stage 2's report lists the spots two refined grains share and counts them once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["Observed", "candidate_positions", "scattering_direction", "index_spots",
           "match_grain", "sense_check", "opposite_sense", "search_seeds", "GRAIN_FIELDS",
           "SENSE_SEEDS"]

#: What a grain candidate holds.
GRAIN_FIELDS = ("u", "pos", "n_matched", "n_predicted", "completeness", "spot_ids", "seed")


@dataclass
class Observed:
    """Observed spots on rings, sorted by ring then omega, as the kernels take them."""

    ids: np.ndarray          # spot id of each sorted row
    ring_start: np.ndarray   # rows of ring r: ring_start[r]:ring_start[r + 1]
    omega: np.ndarray
    eta: np.ndarray
    radius: np.ndarray
    y: np.ndarray
    z: np.ndarray
    lab: np.ndarray          # (n, 3) lab points (um) of the centroids
    ring: np.ndarray
    intensity: np.ndarray

    @classmethod
    def from_spots(cls, spots: np.ndarray, max_ring: int) -> Observed:
        on = spots[spots["ring"] > 0]
        order = np.lexsort((on["omega"], on["ring"]))
        s = on[order]
        start = np.searchsorted(s["ring"], np.arange(max_ring + 2)).astype(np.int64)
        c = np.ascontiguousarray
        return cls(ids=c(s["id"]), ring_start=start, omega=c(s["omega"]), eta=c(s["eta"]),
                   radius=c(s["radius"]), y=c(s["y"]), z=c(s["z"]),
                   lab=c(np.stack([s["lab_x"], s["lab_y"], s["lab_z"]], 1)),
                   ring=c(s["ring"]), intensity=c(s["intensity"]))

    def __len__(self) -> int:
        return len(self.ids)


def candidate_positions(p: Dict[str, Any]) -> np.ndarray:
    """(k, 3) sample positions (um) in the beam volume, nearest the origin first."""
    step = float(p["StepSizePos"])
    r, h = float(p["Rsample"]), float(p["Hbeam"]) / 2.0
    xs = np.arange(-math.floor(r / step), math.floor(r / step) + 1) * step
    zs = np.arange(-math.floor(h / step), math.floor(h / step) + 1) * step
    x, y, z = (a.ravel() for a in np.meshgrid(xs, xs, zs, indexing="ij"))
    keep = x * x + y * y <= r * r + 1e-9
    pts = np.stack([x[keep], y[keep], z[keep]], 1)
    return np.ascontiguousarray(pts[np.argsort(np.linalg.norm(pts, axis=1), kind="stable")])


def scattering_direction(lab: np.ndarray, omega_deg: float, pos: np.ndarray) -> np.ndarray:
    """Unit scattering vector (sample frame) of a spot at lab point ``lab`` seen at
    ``omega`` if it came from sample position ``pos``."""
    w = math.radians(omega_deg)
    c, s = math.cos(w), math.sin(w)
    r0 = np.array([c * pos[0] - s * pos[1], s * pos[0] + c * pos[1], pos[2]])
    k = lab - r0
    k = k / np.linalg.norm(k)
    g = k - np.array([1.0, 0.0, 0.0])
    g /= np.linalg.norm(g)
    return np.array([c * g[0] + s * g[1], -s * g[0] + c * g[1], g[2]])


def match_grain(u, lattice, pos, arrays, obs: Observed, margins) -> Dict[str, Any]:
    """Predicted spots of a grain and the observed row matching each (-1: none)."""
    from kernels.ffindex import match_kernel
    from kernels.ffmodel import b_matrix, ff_spots_kernel

    spots = np.empty((2 * len(arrays.hkl), 8))
    n = ff_spots_kernel(np.ascontiguousarray(u, float), b_matrix(lattice),
                        np.ascontiguousarray(pos, float), arrays, spots)
    rows = np.empty(n, np.int64)
    dist = np.empty(1)
    k = match_kernel(spots, n, arrays.lsd, obs.ring_start, obs.omega, obs.eta, obs.radius,
                     *margins, rows, dist)
    return {"spots": spots[:n], "rows": rows, "n_matched": int(k), "n_predicted": int(n),
            "dist": float(dist[0] / k) if k else 0.0}


def _margins(p: Dict[str, Any]):
    return (float(p["MarginOme"]), float(p["MarginEta"]), float(p["MarginRadial"]))


def _grain(u, pos, m: Dict[str, Any], obs: Observed, seed: int) -> Dict[str, Any]:
    rows = m["rows"][m["rows"] >= 0]
    return {"u": np.asarray(u, float).copy(), "pos": np.asarray(pos, float).copy(),
            "n_matched": m["n_matched"], "n_predicted": m["n_predicted"],
            "completeness": m["n_matched"] / max(m["n_predicted"], 1),
            "spot_ids": np.sort(obs.ids[rows]), "seed": int(seed)}


def _merge(grains: List[Dict[str, Any]], p: Dict[str, Any]) -> List[Dict[str, Any]]:
    from kernels.crystal import misorientation

    grains = sorted(grains, key=lambda g: (-g["completeness"], -g["n_matched"]))
    kept: List[Dict[str, Any]] = []
    for g in grains:
        if any(misorientation(g["u"], k["u"]) < p["MergeAngle"]
               and np.linalg.norm(g["pos"] - k["pos"]) < p["MergeDistance"] for k in kept):
            continue
        kept.append(g)
    return kept


def _uniform(obs: Observed, arrays, p: Dict[str, Any], lattice, claimed) -> List[Dict]:
    """The fallback: the fundamental-zone grid scored at the origin, best first, greedily."""
    from kernels.crystal import fundamental_zone_grid

    from kernels.ffindex import score_orientations_kernel
    from kernels.ffmodel import b_matrix

    grid = fundamental_zone_grid(max(float(p["StepSizeOrient"]), 2.0))
    origin = np.zeros(3)
    scores = np.empty(len(grid))
    score_orientations_kernel(grid, b_matrix(lattice), origin, arrays, obs.ring_start, obs.omega,
                              obs.eta, obs.radius, *_margins(p), scores)
    out: List[Dict[str, Any]] = []
    for i in np.argsort(-scores, kind="stable"):
        if scores[i] < p["Completeness"]:
            break
        m = match_grain(grid[i], lattice, origin, arrays, obs, _margins(p))
        rows = m["rows"][m["rows"] >= 0]
        if len(rows) and claimed[rows].mean() > 0.5:
            continue                       # mostly another accepted grain's spots
        claimed[rows] = True
        out.append(_grain(grid[i], origin, m, obs, -1))
    return out


class _Search:
    """What every seed's fibre search shares: the observed spots, the reflection directions
    of the seed ring, the fibre step, the candidate positions and the tolerances."""

    def __init__(self, spots: np.ndarray, arrays, p: Dict[str, Any]):
        from kernels.ffmodel import b_matrix

        self.arrays, self.p = arrays, p
        self.lattice = np.asarray(p["LatticeConstant"], float)
        self.max_ring = int(arrays.ring.max()) if len(arrays.ring) else 0
        self.obs = Observed.from_spots(spots, self.max_ring)
        self.bmat = b_matrix(self.lattice)
        self.ring = int(p["OverAllRingToIndex"])
        hk = arrays.hkl[arrays.ring == self.ring]
        cdirs = np.ascontiguousarray((self.bmat @ hk.T).T)
        cdirs /= np.linalg.norm(cdirs, axis=1, keepdims=True) if len(cdirs) else 1.0
        self.cdirs = cdirs
        self.n_psi = max(4, int(round(360.0 / float(p["StepSizeOrient"]))))
        self.positions = candidate_positions(p)
        self.margins = _margins(p)
        lo, hi = ((self.obs.ring_start[self.ring], self.obs.ring_start[self.ring + 1])
                  if self.ring <= self.max_ring else (0, 0))
        #: the seed ring's spots, strongest first
        self.seeds = lo + np.argsort(-self.obs.intensity[lo:hi], kind="stable")
        self._best_u = np.empty((3, 3))
        #: a candidate below Completeness is of no use (:meth:`best`)
        self.least = float(p["Completeness"])

    def best(self, seed: int) -> Tuple[float, int, Any, Any]:
        """(matched fraction, matched, orientation, position) of the seed's best candidate
        (the first position's whose best is highest) when it reaches ``Completeness`` (a
        grain); otherwise some candidate below (the kernel drops those it can tell are)."""
        from kernels.ffindex import fibre_search_kernel

        obs = self.obs
        best: Tuple[float, int, Any, Any] = (-1.0, 0, None, None)
        if not len(self.cdirs):
            return best
        floor = (0, 1)       # the best so far: a later position must exceed it
        for pos in self.positions:
            s = scattering_direction(obs.lab[seed], obs.omega[seed], pos)
            k, n = fibre_search_kernel(self.cdirs, s, self.n_psi, self.bmat, pos, self.arrays,
                                       obs.ring_start, obs.omega, obs.eta, obs.radius,
                                       *self.margins, self._best_u, *floor, self.least)
            if n and k / n > best[0]:
                best = (k / n, k, self._best_u.copy(), pos.copy())
                floor = (k, n)
                if k == n:
                    break        # every spot found: no later position can exceed it
        return best

    def accepts(self, seed: int) -> bool:
        """The seed gives a candidate: Completeness reached, the seed among its spots."""
        b = self.best(seed)
        if b[0] < self.p["Completeness"]:
            return False
        m = match_grain(b[2], self.lattice, b[3], self.arrays, self.obs, self.margins)
        return bool(seed in m["rows"])


#: Seeds (the strongest of the seed ring) :func:`sense_check` searches in each sense.
SENSE_SEEDS = 5


def opposite_sense(spots: np.ndarray, arrays):
    """The spots and geometry read with the opposite rotation sense: every omega negated
    (``OmegaStart`` and ``OmegaStep`` negated, the omega ranges mirrored) -- the issue-46
    "fix" of flipping OmegaStep's sign; on a real sweep it is the mirror image."""
    s = spots.copy()
    s["omega"] = -s["omega"]
    ranges = np.ascontiguousarray(-arrays.omega_ranges[:, ::-1])
    return s, arrays._replace(omega_start=-arrays.omega_start, omega_step=-arrays.omega_step,
                              omega_ranges=ranges)


def sense_check(spots: np.ndarray, arrays, p: Dict[str, Any],
                n_seeds: int = SENSE_SEEDS) -> Dict[str, Any]:
    """How many of the seed ring's ``n_seeds`` strongest spots give a grain with the
    parameters' rotation sense and with the opposite one (:func:`opposite_sense`).

    The sense of omega (and the side of the detector lab +y lies on) cannot be seen in one
    spot, but a grain's spots fit only one: with MIDAS's conventions
    (:mod:`kernels.geometry`) the wrong sense indexes nothing. When the opposite sense fits
    as well, the data cannot decide it, and stage 2 refuses (:func:`hedm.ffgrains.verdict`).

    Both at the origin only: the sense is the sweep's, not a grain's (an offset grain's spots
    move by about its offset, within the margins), and a sense that fits nothing costs the
    whole search (MIDAS's step sizes: 565 positions, some 240 s of a core per seed).
    """
    out: Dict[str, Any] = {"seeds": 0, "given": 0, "opposite": 0}
    for key, (sp, ar) in (("given", (spots, arrays)),
                          ("opposite", opposite_sense(spots, arrays))):
        search = _Search(sp, ar, p)
        search.positions = search.positions[:1]          # the origin (above)
        seeds = search.seeds[:n_seeds]
        out["seeds"] = int(len(seeds))
        out[key] = int(sum(search.accepts(int(seed)) for seed in seeds))
    return out


def search_seeds(spots: np.ndarray, arrays, p: Dict[str, Any], seeds) -> List[Tuple]:
    """Each seed's best candidate (``(fraction, matched, u, pos)``, :meth:`_Search.best`): the
    work of one indexing task (a seed's search depends on nothing but the spots)."""
    search = _Search(spots, arrays, p)
    return [search.best(int(seed)) for seed in seeds]


def index_spots(spots: np.ndarray, arrays, p: Dict[str, Any],
                run_wave: Optional[Callable[[List[int]], List[Tuple]]] = None, wave: int = 1,
                sense: Optional[Callable[[], Dict[str, Any]]] = None) -> Dict[str, Any]:
    """Grains (dicts of :data:`GRAIN_FIELDS`) from the spot table, and what was used.

    Seeds are searched in *waves* of ``wave`` seeds not yet claimed, strongest first;
    ``run_wave(seeds)`` returns their candidates (default: searched here, one by one;
    stage 2 runs each wave as parallel tasks). The candidates are then taken in seed order
    exactly as one by one -- a seed claimed by a grain accepted earlier in its wave is
    skipped -- so the grains are the same whatever the wave size, the tasks or the
    workers. ``sense()`` gives :func:`sense_check` (default: computed here).

    Returns ``{"grains", "shared", "observed", "seeds_tried", "method", "spots_on_rings",
    "sense", "waves"}``.
    """
    search = _Search(spots, arrays, p)
    obs, lattice, margins = search.obs, search.lattice, search.margins
    claimed = np.zeros(len(obs), bool)
    grains: List[Dict[str, Any]] = []
    tried = waves = 0
    order = [int(s) for s in search.seeds] if len(search.cdirs) else []
    at = 0
    while at < len(order):
        batch: List[int] = []
        while at < len(order) and len(batch) < max(1, wave):
            if not claimed[order[at]]:
                batch.append(order[at])
            at += 1
        if not batch:
            break
        waves += 1
        bests = run_wave(batch) if run_wave else [search.best(seed) for seed in batch]
        for seed, best in zip(batch, bests):
            if claimed[seed]:
                continue                 # claimed by a grain of this wave: not a seed
            tried += 1
            if best[0] < p["Completeness"]:
                continue
            m = match_grain(best[2], lattice, best[3], arrays, obs, margins)
            if seed not in m["rows"]:
                continue
            # claimed (no more seeds) within twice the tolerances: the candidate is off by
            # up to half a fibre step, which moves some spots past the tolerances
            wide = match_grain(best[2], lattice, best[3], arrays, obs,
                               tuple(2 * v for v in margins))
            claimed[wide["rows"][wide["rows"] >= 0]] = True
            grains.append(_grain(best[2], best[3], m, obs, int(obs.ids[seed])))
    checked = sense() if sense else sense_check(spots, arrays, p)
    method = "fibre"
    if not grains and len(obs) and not checked["opposite"]:    # else: the sense is wrong
        method = "uniform"
        grains = _uniform(obs, arrays, p, lattice, claimed)
    grains = _merge(grains, p)
    counts: Dict[int, int] = {}
    for g in grains:
        for i in g["spot_ids"].tolist():
            counts[i] = counts.get(i, 0) + 1
    shared = np.array(sorted(i for i, c in counts.items() if c > 1), np.int64)
    return {"grains": grains, "shared": shared, "observed": obs, "seeds_tried": tried,
            "method": method, "spots_on_rings": int(len(obs)),
            "spots_indexed": int(len(counts)), "sense": checked, "waves": waves}
