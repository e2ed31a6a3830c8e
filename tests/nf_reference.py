"""Slow NumPy references of the NF-HEDM kernels, written independently of them.

Where the kernels follow MIDAS with a different algorithm, the reference
follows MIDAS's: omega from the quadratic in cos(omega) with the sign
chosen by substitution (``CalcOmega``), pixels on unpacked bool images.
Plain Python loops over spots; only for tests and ``bench/nf_fit_bench.py``.
"""
from __future__ import annotations

import math

import numpy as np


def rot_z(deg):
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def omegas_midas(x, y, v):
    """MIDAS's CalcOmega: solutions of -x cos(w) + y sin(w) = v (degrees)."""
    out = []
    if abs(y) < 1e-12:
        if x != 0 and abs(-v / x) <= 1:
            w = math.degrees(math.acos(-v / x))
            out += [w, -w]
        return out
    a = 1 + x * x / (y * y)
    b = 2 * v * x / (y * y)
    c = v * v / (y * y) - 1
    disc = b * b - 4 * a * c
    if disc < 0:
        return out
    for cw in ((-b + math.sqrt(disc)) / (2 * a), (-b - math.sqrt(disc)) / (2 * a)):
        if abs(cw) <= 1:
            wa = math.acos(cw)
            da = abs(-x * math.cos(wa) + y * math.sin(wa) - v)
            db = abs(-x * math.cos(-wa) + y * math.sin(-wa) - v)
            out.append(math.degrees(wa if da < db else -wa))
    return out


def ref_spots(u, geo):
    """Rows (yl, zl, omega, eta, ring, hkl) on the first detector after MIDAS's filters."""
    h = geo.hkls
    rows = []
    for i in range(len(h)):
        gx, gy, gz = u @ h.g[i]
        v = np.linalg.norm(h.g[i]) * math.sin(math.radians(h.theta[i]))
        radius = geo.lsd[0] * math.tan(math.radians(2 * h.theta[i]))
        for w in omegas_midas(gx, gy, v):
            gw = rot_z(w) @ np.array([gx, gy, gz])
            eta = math.degrees(math.acos(gw[2] / math.hypot(gw[1], gw[2])))
            if gw[1] > 0:
                eta = -eta
            if abs(eta) < geo.exclude_pole_angle or 180 - abs(eta) < geo.exclude_pole_angle:
                continue
            yl = -math.sin(math.radians(eta)) * radius
            zl = math.cos(math.radians(eta)) * radius
            if any(lo < w < hi and b[0] < yl < b[1] and b[2] < zl < b[3]
                   for (lo, hi), b in zip(geo.omega_ranges, geo.box_sizes)):
                rows.append((yl, zl, w, eta, h.ring[i], i))
    return np.array(rows, dtype=np.float64).reshape(-1, 6)


def ref_project(geo, yl, zl, omega, a, b):
    """Pixel (y, z) on the first detector of spot (yl, zl, omega) from sample point (a, b)."""
    from kernels.nfgeometry import tilt_matrix

    xa, ya, _ = rot_z(omega) @ np.array([a, b, 0.0])
    t = 1 - xa / geo.lsd[0]
    tilt = tilt_matrix(*geo.tilts)
    p0 = tilt @ np.array([-geo.lsd[0], 0.0, 0.0])
    p1 = tilt @ np.array([0.0, ya + yl * t, zl * t])
    abc = p1 - p0
    y = p0[1] - abc[1] * p0[0] / abc[0]
    z = p0[2] - abc[2] * p0[0] / abc[0]
    return np.array([y / geo.px + geo.ybc[0], z / geo.px + geo.zbc[0]])


def ref_frame(geo, omega):
    return math.floor((omega - geo.omega_start) / geo.omega_step)


def ref_predict(u, pos, geo):
    """Rows (omega, eta, y, z, frame, distance, ring, hkl) as predict_spots documents."""
    out = []
    for yl, zl, w, eta, ring, hkl in ref_spots(u, geo):
        f = ref_frame(geo, w)
        if not 0 <= f < geo.n_frames:
            continue
        c = ref_project(geo, yl, zl, w, 0.0, 0.0)
        p = ref_project(geo, yl, zl, w, *pos)
        for d in range(geo.n_distances):
            s = geo.lsd[d] / geo.lsd[0]
            y = (c[0] - geo.ybc[0]) * s + geo.ybc[d] + p[0] - c[0]
            z = (c[1] - geo.zbc[0]) * s + geo.zbc[d] + p[1] - c[1]
            if 0 <= y < geo.n_pixels_y and 0 <= z < geo.n_pixels_z:
                out.append((w, eta, y, z, f, d, ring, hkl))
    return np.array(out, dtype=np.float64).reshape(-1, 8)


def c_round(x):
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def ref_footprint(offsets, rasterize=True):
    """MIDAS's CalcPixels2 on rounded vertices, vectorised over the bounding box."""
    if not rasterize:
        return np.array([[c_round(offsets[:, 0].mean()), c_round(offsets[:, 1].mean())]])
    v = np.array([[c_round(a), c_round(b)] for a, b in offsets], dtype=np.float64)
    ys, zs = np.meshgrid(np.arange(v[:, 0].min(), v[:, 0].max() + 1),
                         np.arange(v[:, 1].min(), v[:, 1].max() + 1))
    p = np.stack([ys.ravel(), zs.ravel()], -1)
    inside = np.ones(len(p), bool)
    near = np.zeros(len(p), bool)
    for i, j in ((1, 2), (2, 0), (0, 1)):
        a, b = v[i], v[j]
        cross = (b[0] - a[0]) * (p[:, 1] - a[1]) - (b[1] - a[1]) * (p[:, 0] - a[0])
        inside &= cross >= 0
        den = ((b - a) ** 2).sum()
        if den > 0:
            near |= cross ** 2 / den < 0.9801
    return p[inside | near].astype(np.int64)


def ref_triangle(row):
    y1, y2, xs, ys, gs = row
    if y1 > y2:
        return np.array([[xs, ys - y1], [xs - gs, ys + y2], [xs + gs, ys + y2]])
    return np.array([[xs, ys + y2], [xs - gs, ys - y1], [xs + gs, ys - y1]])


def ref_spot_pixels(geo, spot, verts, check):
    """(frame, footprint offsets, per-distance floor(centre)) or None when rejected."""
    yl, zl, w = spot[0], spot[1], spot[2]
    f = ref_frame(geo, w)
    if not 0 <= f < geo.n_frames:
        return None
    vp = np.array([ref_project(geo, yl, zl, w, a, b) for a, b in verts])
    if check and not np.all((vp[:, 0] >= 0) & (vp[:, 0] <= geo.n_pixels_y)
                            & (vp[:, 1] >= 0) & (vp[:, 1] <= geo.n_pixels_z)):
        return None
    c = ref_project(geo, yl, zl, w, 0.0, 0.0)
    pix = ref_footprint(vp - c, 2 * verts_gs(verts) > geo.px)
    px = geo.px
    base = [(math.floor(((c[0] - geo.ybc[0]) * px * (geo.lsd[d] / geo.lsd[0])) / px + geo.ybc[d]),
             math.floor(((c[1] - geo.zbc[0]) * px * (geo.lsd[d] / geo.lsd[0])) / px + geo.zbc[d]))
            for d in range(geo.n_distances)]
    return f, pix, base


def verts_gs(verts):
    return (verts[2, 0] - verts[1, 0]) / 2.0


def ref_confidence(u, row, geo, binary):
    """CalcFracOverlap on unpacked bool images (n_dist, n_frames, z, y)."""
    verts = ref_triangle(row)
    hit = total = 0
    for spot in ref_spots(u, geo):
        got = ref_spot_pixels(geo, spot, verts, True)
        if got is None:
            continue
        f, pix, base = got
        ys = np.array([[b[0] + p[0] for b in base] for p in pix])
        zs = np.array([[b[1] + p[1] for b in base] for p in pix])
        off = ((ys < 0) | (ys >= geo.n_pixels_y) | (zs < 0) | (zs >= geo.n_pixels_z)).any(1)
        n = int(np.argmax(off)) if off.any() else len(pix)   # MIDAS: stop at the first
        d = np.arange(geo.n_distances)[None, :]
        hit += int(binary[d, f, zs[:n], ys[:n]].all(axis=1).sum())
        total += n
    return hit / total if total else 0.0


def ref_paint(u, row, geo, binary):
    """SimulateDiffractionImage's drawing into unpacked bool images, in place."""
    verts = ref_triangle(row)
    for spot in ref_spots(u, geo):
        got = ref_spot_pixels(geo, spot, verts, False)
        if got is None:
            continue
        f, pix, base = got
        for py, pz in pix:
            for d, (by, bz) in enumerate(base):
                y, z = by + py, bz + pz
                if not (0 <= y < geo.n_pixels_y and 0 <= z < geo.n_pixels_z):
                    break
                binary[d, f, z, y] = True
    return binary


def ref_misorientation(u1, u2, sym):
    """Smallest rotation angle (degrees) of u1^T u2 S over the symmetry operators."""
    d = u1.T @ u2
    best = max(np.trace(d @ s) for s in sym)
    return math.degrees(math.acos(min(1.0, max(-1.0, (best - 1) / 2))))


def ref_fit_point(row, geo, binary, seeds, tol_deg, min_frac):
    """Screening with :func:`ref_confidence` and scipy's Nelder-Mead on Euler-free
    rotation vectors (the reference of fit_point's steps, not of its exact path).

    Returns (orientation, confidence, number of candidates).
    """
    from scipy.optimize import minimize

    from kernels.crystal import rotation_vector_matrix

    fr = np.array([ref_confidence(s, row, geo, binary) for s in seeds])
    cand = np.flatnonzero(fr >= min_frac)
    if not len(cand):
        return None, 0.0, 0
    best_u, best_c = None, -1.0
    tol = math.radians(tol_deg)
    for s in cand[np.argsort(-fr[cand], kind="stable")][:3]:
        def f(w, s=s):
            w = np.clip(w, -tol, tol)
            return -ref_confidence(rotation_vector_matrix(w) @ seeds[s], row, geo, binary)
        simplex = np.vstack([np.zeros(3), np.eye(3) * tol])
        res = minimize(f, np.zeros(3), method="Nelder-Mead",
                       options={"initial_simplex": simplex, "xatol": 1e-4, "fatol": 1e-9,
                                "maxfev": 400})
        if -res.fun > best_c:
            best_c = -res.fun
            best_u = rotation_vector_matrix(np.clip(res.x, -tol, tol)) @ seeds[s]
        if best_c >= 1 - 1e-4:
            break
    return best_u, best_c, len(cand)


def read_mic(path):
    """A text ``.mic`` as MIDAS's ParseMic reads it: ``({"TriEdgeSize", "NumPhases",
    "GlobalPosition"}, (m, 12) array)``."""
    header, rows = {}, []
    with open(path) as fh:
        for line in fh:
            if line.startswith("%"):
                parts = line[1:].split()
                if len(parts) == 2 and parts[0] in ("TriEdgeSize", "NumPhases",
                                                    "GlobalPosition"):
                    header[parts[0]] = float(parts[1])
                continue
            if line.strip():
                rows.append([float(v) for v in line.split()])
    return header, np.array(rows, dtype=np.float64).reshape(-1, 12)
