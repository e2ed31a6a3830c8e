"""FF-HEDM indexing kernels: match a grain's predicted spots to the observed ones, and
search the orientations along a spot's diffraction fibre.

Observed spots are given sorted by ring, then omega: ``ring_start[r]:ring_start[r + 1]``
are ring ``r``'s rows; per row its omega (deg), eta (deg) and radius ``Lsd tan 2theta``
(um). A predicted spot (:func:`kernels.ffmodel.ff_spots_kernel`) *matches* the observed
spot of its ring within the tolerances -- ``|d omega| <= margin_ome`` (deg, across +-180),
``|d eta| radius <= margin_eta`` (um of arc, MIDAS's ``MarginEta``), ``|d radius| <=
margin_rad`` (um) -- that is nearest in the sum of the three differences each divided by
its tolerance.

The fibre of an observed spot: the orientations ``U`` that bring a crystal reflection
direction ``c`` onto the spot's sample-frame scattering vector ``s``: ``U = R(s, psi)
A(c -> s)``, ``A`` the smallest rotation taking ``c`` to ``s``, ``psi`` in
``[0, 360)`` by ``step``. :func:`fibre_search_kernel` scores every one by its matched
fraction and keeps the best.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .ffmodel import ETA, OME, RNG, TTH, ff_spots_kernel, hkl_spots_kernel

__all__ = ["match_kernel", "fibre_search_kernel", "align_kernel", "orientations_kernel",
           "score_orientations_kernel", "exercise"]


@njit(cache=True, nogil=True)
def _search(ome, lo, hi, obs_ome, obs_eta, obs_rad, p_ome, p_eta, p_rad,
            m_ome, m_eta, m_rad, best, bestd):
    """Scan observed rows lo:hi with omega in [ome - m_ome, ome + m_ome]."""
    i = lo + np.searchsorted(obs_ome[lo:hi], ome - m_ome)
    while i < hi and obs_ome[i] <= ome + m_ome:
        d_ome = abs(obs_ome[i] - p_ome)
        d_ome = min(d_ome, 360.0 - d_ome)
        d_eta = abs(obs_eta[i] - p_eta)
        d_eta = min(d_eta, 360.0 - d_eta) * math.pi / 180.0 * p_rad
        d_rad = abs(obs_rad[i] - p_rad)
        if d_ome <= m_ome and d_eta <= m_eta and d_rad <= m_rad:
            d = d_ome / m_ome + d_eta / m_eta + d_rad / m_rad
            if d < bestd:
                bestd = d
                best = i
        i += 1
    return best, bestd


@njit(cache=True, nogil=True)
def _match_spot(spots, k, lsd, ring_start, obs_ome, obs_eta, obs_rad, m_ome, m_eta, m_rad):
    """(observed row matching predicted spot ``k`` or -1, its distance) (match_kernel)."""
    r = int(spots[k, RNG])
    if r + 1 >= ring_start.shape[0]:
        return -1, 1e30
    lo = ring_start[r]
    hi = ring_start[r + 1]
    if hi <= lo:
        return -1, 1e30
    ome = spots[k, OME]
    eta = spots[k, ETA]
    rad = lsd * math.tan(math.radians(spots[k, TTH]))
    best, bestd = _search(ome, lo, hi, obs_ome, obs_eta, obs_rad, ome, eta, rad,
                          m_ome, m_eta, m_rad, -1, 1e30)
    if ome + m_ome > 180.0:
        best, bestd = _search(ome - 360.0, lo, hi, obs_ome, obs_eta, obs_rad, ome, eta,
                              rad, m_ome, m_eta, m_rad, best, bestd)
    if ome - m_ome < -180.0:
        best, bestd = _search(ome + 360.0, lo, hi, obs_ome, obs_eta, obs_rad, ome, eta,
                              rad, m_ome, m_eta, m_rad, best, bestd)
    return best, bestd


@njit(cache=True, nogil=True)
def match_kernel(spots, n_spots, lsd, ring_start, obs_ome, obs_eta, obs_rad,
                 m_ome, m_eta, m_rad, ids, dist):
    """``ids[k]`` = the observed row matching predicted spot ``k`` of ``spots[:n_spots]``,
    or -1; returns the number matched. ``dist[0]`` = the sum over matches of the three
    differences each divided by its tolerance (how central the matches are)."""
    n = 0
    dist[0] = 0.0
    for k in range(n_spots):
        best, bestd = _match_spot(spots, k, lsd, ring_start, obs_ome, obs_eta, obs_rad,
                                  m_ome, m_eta, m_rad)
        ids[k] = best
        if best >= 0:
            n += 1
            dist[0] += bestd
    return n


@njit(cache=True, nogil=True)
def _rotation(ax, ay, az, angle, out):
    """Rodrigues: rotation by ``angle`` (rad) about the unit axis (ax, ay, az)."""
    c = math.cos(angle)
    s = math.sin(angle)
    t = 1.0 - c
    out[0, 0] = t * ax * ax + c
    out[0, 1] = t * ax * ay - s * az
    out[0, 2] = t * ax * az + s * ay
    out[1, 0] = t * ax * ay + s * az
    out[1, 1] = t * ay * ay + c
    out[1, 2] = t * ay * az - s * ax
    out[2, 0] = t * ax * az - s * ay
    out[2, 1] = t * ay * az + s * ax
    out[2, 2] = t * az * az + c


@njit(cache=True, nogil=True)
def align_kernel(c, s, out):
    """The smallest rotation taking unit vector ``c`` to unit vector ``s``."""
    ax = c[1] * s[2] - c[2] * s[1]
    ay = c[2] * s[0] - c[0] * s[2]
    az = c[0] * s[1] - c[1] * s[0]
    sn = math.sqrt(ax * ax + ay * ay + az * az)
    cs = c[0] * s[0] + c[1] * s[1] + c[2] * s[2]
    if sn < 1e-12:
        if cs > 0:
            _rotation(1.0, 0.0, 0.0, 0.0, out)
            return
        # antiparallel: half a turn about any axis perpendicular to c
        px, py, pz = (0.0, -c[2], c[1]) if abs(c[0]) < 0.9 else (-c[2], 0.0, c[0])
        pn = math.sqrt(px * px + py * py + pz * pz)
        _rotation(px / pn, py / pn, pz / pn, math.pi, out)
        return
    _rotation(ax / sn, ay / sn, az / sn, math.atan2(sn, cs), out)


@njit(cache=True, nogil=True)
def orientations_kernel(c, s, n_psi, out):
    """``out[j]`` = ``R(s, 2 pi j / n_psi) A(c -> s)`` for j < n_psi (the fibre)."""
    a = np.empty((3, 3))
    r = np.empty((3, 3))
    align_kernel(c, s, a)
    for j in range(n_psi):
        _rotation(s[0], s[1], s[2], 2.0 * math.pi * j / n_psi, r)
        for i in range(3):
            for k in range(3):
                out[j, i, k] = r[i, 0] * a[0, k] + r[i, 1] * a[1, k] + r[i, 2] * a[2, k]


@njit(cache=True, nogil=True)
def fibre_search_kernel(cdirs, s, n_psi, bmat, pos, a, ring_start, obs_ome, obs_eta, obs_rad,
                        m_ome, m_eta, m_rad, best_u, floor_k=0, floor_n=1, least=0.0):
    """Best orientation on the fibres of scattering vector ``s`` for the reflection
    directions ``cdirs`` (m, 3): writes ``best_u`` and returns ``(n_matched, n_predicted)``
    of it (most matched fraction; ties: more matches, then the most central matches, as
    :func:`match_kernel`'s ``dist`` per match).

    Only an orientation whose fraction exceeds ``floor_k / floor_n`` (the best of the
    positions searched before, which wins a tie) and reaches ``least`` (the fraction a
    candidate needs to be accepted) can be of use: the search is exact for those, and
    returns ``(0, 1)`` or a candidate below them otherwise. An orientation
    is dropped as soon as its misses so far show that it can neither exceed the floor nor
    reach the best fraction of this search: its spots are predicted and matched one
    reflection at a time, and with ``miss`` misses among ``n`` spots and at most ``top = n
    + 2 (reflections left)`` spots in all, its fraction is at most ``(top - miss) / top``.
    The reflections are taken last first: the seed's own ring comes first in ``a.hkl``, and
    its reflection on the fibre (and the opposite one) is found at every ``psi``, a match
    that drops nothing; a candidate kept to the end has its ``dist`` summed in
    :func:`match_kernel`'s order (the same float).
    """
    us = np.empty((n_psi, 3, 3))
    nh = a.hkl.shape[0]
    spots = np.empty((2 * nh, 8))
    dq = np.empty(2 * nh)             # each spot's distance (-1: missed)
    start = np.empty(nh + 1, np.int64)    # spots of the e-th reflection taken
    omegas = np.empty(2)
    etas = np.empty(2)
    res = np.empty(6)
    bm = -1
    bp = 1
    bd = 1e30
    for m in range(cdirs.shape[0]):
        orientations_kernel(cdirs[m], s, n_psi, us)
        for j in range(n_psi):
            n = 0
            k = 0
            miss = 0
            for e in range(nh):
                h = nh - 1 - e
                start[e] = n
                n = hkl_spots_kernel(us[j], bmat, pos, a, h, omegas, etas, res, spots,
                                     start[e])
                for q in range(start[e], n):
                    row, d = _match_spot(spots, q, a.lsd, ring_start, obs_ome, obs_eta,
                                         obs_rad, m_ome, m_eta, m_rad)
                    if row >= 0:
                        k += 1
                        dq[q] = d
                    else:
                        miss += 1
                        dq[q] = -1.0
                if miss and n > start[e]:
                    top = n + 2 * (nh - 1 - e)
                    hit = top - miss
                    if (hit * bp < bm * top or hit * floor_n <= floor_k * top
                            or hit < least * top - 1e-9):
                        k = 0                   # dropped: cannot be of use
                        break
            if n == 0 or k == 0:
                continue
            start[nh] = n
            dsum = 0.0
            for e in range(nh - 1, -1, -1):     # match_kernel's order: reflection h upwards
                for q in range(start[e], start[e + 1]):
                    if dq[q] >= 0.0:
                        dsum += dq[q]
            d = dsum / k
            if (k * bp > bm * n or (k * bp == bm * n and (k > bm or (k == bm and d < bd)))):
                bm = k
                bp = n
                bd = d
                best_u[:, :] = us[j]
    return max(bm, 0), bp


@njit(cache=True, nogil=True)
def score_orientations_kernel(us, bmat, pos, a, ring_start, obs_ome, obs_eta, obs_rad,
                              m_ome, m_eta, m_rad, out):
    """``out[i]`` = matched fraction of orientation ``us[i]`` at ``pos`` (the uniform
    search's score; 0 when it predicts no spot)."""
    spots = np.empty((2 * a.hkl.shape[0], 8))
    ids = np.empty(2 * a.hkl.shape[0], np.int64)
    dist = np.empty(1)
    for i in range(us.shape[0]):
        n = ff_spots_kernel(us[i], bmat, pos, a, spots)
        k = match_kernel(spots, n, a.lsd, ring_start, obs_ome, obs_eta, obs_rad,
                         m_ome, m_eta, m_rad, ids, dist) if n else 0
        out[i] = k / n if n else 0.0


def exercise() -> None:
    """Call every FF stage-2 kernel (this module's and :mod:`kernels.ffmodel`'s) once on
    tiny inputs with the types stage 2 passes (:class:`kernels.ffmodel.FFArrays` as
    ``hedm.ffparams.ff_arrays`` builds it), so each compiles or loads from numba's cache;
    for :mod:`kernels.numba_cache`'s warm-up."""
    from .crystal import rotation_vector_matrix
    from .ffmodel import FFArrays, b_matrix, ff_spots, pixel_to_lab_kernel, residuals_kernel
    from .geometry import ff_tilt_matrix

    a = FFArrays(hkl=np.ascontiguousarray([[1.0, 1.0, 1.0], [2.0, 0.0, 0.0]]),
                 ring=np.array([1, 2], np.int64), tilt=ff_tilt_matrix(0.0, 0.0, 0.0),
                 omega_ranges=np.array([[-180.0, 180.0]]),
                 boxes=np.array([[-1e12, 1e12, -1e12, 1e12]]), lsd=1.2e5, ybc=96.0,
                 zbc=96.0, px=200.0, wavelength=0.173, omega_start=180.0, omega_step=-1.0,
                 n_frames=360, n_pixels_y=192, n_pixels_z=192, min_eta=6.0)
    lattice = np.array([4.08, 4.08, 4.08, 90.0, 90.0, 90.0])
    u = rotation_vector_matrix(np.array([0.1, 0.2, 0.3]))
    bmat = b_matrix(lattice)
    pos = np.zeros(3)
    spots = ff_spots(u, lattice, pos, a)
    n = len(spots)
    lab = np.empty((n, 3))
    pixel_to_lab_kernel(np.ascontiguousarray(spots[:, 3]), np.ascontiguousarray(spots[:, 4]),
                        a, lab)
    order = np.lexsort((spots[:, 0], spots[:, 6]))
    ring_start = np.searchsorted(spots[order, 6], np.arange(4)).astype(np.int64)
    ome = np.ascontiguousarray(spots[order, 0])
    eta = np.ascontiguousarray(spots[order, 1])
    rad = np.ascontiguousarray(a.lsd * np.tan(np.radians(spots[order, 2])))
    ids = np.empty(n, np.int64)
    dist = np.empty(1)
    match_kernel(spots, n, a.lsd, ring_start, ome, eta, rad, 1.0, 300.0, 300.0, ids, dist)
    best = np.empty((3, 3))
    cdirs = np.ascontiguousarray(bmat @ a.hkl[:1].T).T
    cdirs = np.ascontiguousarray(cdirs / np.linalg.norm(cdirs, axis=1, keepdims=True))
    s = np.array([0.0, 1.0, 0.0])
    fibre_search_kernel(cdirs, s, 4, bmat, pos, a, ring_start, ome, eta, rad, 1.0, 300.0,
                        300.0, best, 0, 1, 0.7)         # the floor and least stage 2 passes
    score_orientations_kernel(np.stack([u, u]), bmat, pos, a, ring_start, ome, eta, rad, 1.0,
                              300.0, 300.0, np.empty(2))
    align_kernel(cdirs[0], s, best)
    orientations_kernel(cdirs[0], s, 4, np.empty((4, 3, 3)))
    obs = np.ascontiguousarray(spots[:, [3, 4, 0]])
    residuals_kernel(u, bmat, pos, a, obs, spots[:, 7].astype(np.int64), np.empty((n, 3)))
