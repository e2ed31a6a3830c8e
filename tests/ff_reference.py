"""NumPy reference of the FF forward model, matching and residuals (kernels.ffmodel,
kernels.ffindex), vectorised over reflections: the tests compare the kernels with it and
bench/ff_grains_bench.py times it against them. The Bragg angle is solved as
``rho cos(omega + phi) = v`` and the ray meets the tilted plane by a 3x3 solve per spot --
the same physics as the kernels, written another way."""
from __future__ import annotations

import numpy as np


def _rays(g_lab, ome, pos, a):
    """(y px, z px, eta, 2theta) of lab scattering vectors ``g_lab`` (n, 3) at ``ome`` (rad)."""
    lam = a.wavelength
    k = g_lab + np.array([1.0 / lam, 0, 0])
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    c, s = np.cos(ome), np.sin(ome)
    r0 = np.stack([c * pos[0] - s * pos[1], s * pos[0] + c * pos[1], np.full_like(c, pos[2])], 1)
    t = a.tilt
    m = np.stack([k, np.broadcast_to(-t[:, 1], k.shape), np.broadcast_to(-t[:, 2], k.shape)], 2)
    rhs = np.array([a.lsd, 0.0, 0.0]) - r0
    sol = np.linalg.solve(m, rhs[..., None])[..., 0]
    hit = r0 + sol[:, :1] * k
    eta = np.degrees(np.arctan2(-hit[:, 1], hit[:, 2]))
    tth = np.degrees(np.arctan2(np.hypot(hit[:, 1], hit[:, 2]), hit[:, 0]))
    return a.ybc - sol[:, 1] / a.px, sol[:, 2] / a.px + a.zbc, eta, tth


def _solutions(u, bmat, a):
    g = (u @ bmat @ a.hkl.T).T
    v = a.wavelength * (g ** 2).sum(1) / 2
    rho = np.hypot(g[:, 0], g[:, 1])
    ok = rho >= v
    phi = np.arctan2(-g[:, 1], -g[:, 0])
    acos = np.arccos(np.clip(v / np.where(ok, rho, 1), -1, 1))
    w = np.stack([acos - phi, -acos - phi], 1)
    w = (w + np.pi) % (2 * np.pi) - np.pi
    return g, w, ok


def _lab(g, w):
    c, s = np.cos(w), np.sin(w)
    return np.stack([c * g[:, 0] - s * g[:, 1], s * g[:, 0] + c * g[:, 1], g[:, 2]], 1)


def ref_spots(u, bmat, pos, a):
    """Rows (omega, eta, 2theta, y, z, frame, ring, hkl) as kernels.ffmodel.ff_spots."""
    g, w, ok = _solutions(u, bmat, a)
    h = np.repeat(np.arange(len(g)), 2)[np.repeat(ok, 2)]
    w = w[ok].ravel()
    gg = g[h]
    y, z, eta, tth = _rays(_lab(gg, w), w, pos, a)
    ome = np.degrees(w)
    f = ((ome - a.omega_start) / a.omega_step + 0.5) % (360.0 / abs(a.omega_step)) - 0.5
    keep = ((np.abs(eta) >= a.min_eta) & (180 - np.abs(eta) >= a.min_eta)
            & (y >= 0) & (y < a.n_pixels_y) & (z >= 0) & (z < a.n_pixels_z)
            & (f < a.n_frames - 0.5))
    return np.stack([ome, eta, tth, y, z, f, a.ring[h], h], 1)[keep]


def ref_match(spots, lsd, ring_start, obs_ome, obs_eta, obs_rad, m_ome, m_eta, m_rad):
    """Observed row matching each predicted spot (-1: none), as kernels.ffindex.match_kernel
    (nearest in the sum of the differences over their tolerances)."""
    out = np.full(len(spots), -1, np.int64)
    rad = lsd * np.tan(np.radians(spots[:, 2]))
    for r in np.unique(spots[:, 6]).astype(int):
        if r + 1 >= len(ring_start):
            continue
        lo, hi = ring_start[r], ring_start[r + 1]
        sel = np.flatnonzero(spots[:, 6] == r)
        if hi <= lo or not len(sel):
            continue
        d_ome = np.abs(spots[sel, 0][:, None] - obs_ome[None, lo:hi])
        d_ome = np.minimum(d_ome, 360 - d_ome)
        d_eta = np.abs(spots[sel, 1][:, None] - obs_eta[None, lo:hi])
        d_eta = np.minimum(d_eta, 360 - d_eta) * np.pi / 180 * rad[sel][:, None]
        d_rad = np.abs(rad[sel][:, None] - obs_rad[None, lo:hi])
        ok = (d_ome <= m_ome) & (d_eta <= m_eta) & (d_rad <= m_rad)
        d = np.where(ok, d_ome / m_ome + d_eta / m_eta + d_rad / m_rad, np.inf)
        j = np.argmin(d, axis=1)
        hit = np.isfinite(d[np.arange(len(sel)), j])
        out[sel[hit]] = lo + j[hit]
    return out


def ref_residuals(u, bmat, pos, a, obs, hkl):
    """(n, 3) residuals as kernels.ffmodel.residuals_kernel."""
    g, w, ok = _solutions(u, bmat, a)
    g, w, ok = g[hkl], w[hkl], ok[hkl]
    d = np.degrees(w) - obs[:, 2:3]
    d -= 360 * np.floor(d / 360 + 0.5)
    pick = np.argmin(np.abs(d), axis=1)
    wb = w[np.arange(len(w)), pick]
    y, z, _, _ = _rays(_lab(g, wb), wb, pos, a)
    out = np.stack([y - obs[:, 0], z - obs[:, 1],
                    d[np.arange(len(d)), pick] / abs(a.omega_step)], 1)
    out[~ok] = 1e3
    return out
