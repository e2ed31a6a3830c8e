"""MIDAS's FF forward model transcribed from its C source, for tests that must not share the
project's model (issue 46): a grain's spots as MIDAS's chain gives them, and a sweep of raw
frames rendered from them as MIDAS's ``ForwardSimulationCompressed`` renders (each spot's
omega profile centred on the frames' stamps ``OmegaStart + k OmegaStep``).

Nothing here imports the project's forward model (:mod:`kernels.ffmodel`,
:mod:`kernels.geometry`). Sources: marinerhemant/MIDAS at 0e6e0e54, ``FF_HEDM/src/``.
"""
from __future__ import annotations

import math
import os

import numpy as np

D2R = math.pi / 180.0

def sind(x):
    return math.sin(x * D2R)


def cosd(x):
    return math.cos(x * D2R)


def correct_hkls_latc(latc, hkl):
    """ForwardSimulationCompressed.c 339-372: g = B hkl and theta."""
    a, b, c, alpha, beta, gamma = latc
    sa, sb, sg, ca, cb, cg = sind(alpha), sind(beta), sind(gamma), cosd(alpha), cosd(beta), \
        cosd(gamma)
    gpr = math.acos((ca * cb - cg) / (sa * sb)) / D2R
    bpr = math.acos((cg * ca - cb) / (sg * sa)) / D2R
    sbpr = sind(bpr)
    vol = a * (b * (c * (sa * (sbpr * sg))))
    apr, bp, cpr = b * c * sa / vol, c * a * sb / vol, a * b * sg / vol
    bm = [[apr, bp * cosd(gpr), cpr * cosd(bpr)], [0, bp * sind(gpr), -cpr * sbpr * ca],
          [0, 0, cpr * sbpr * sa]]
    return [sum(bm[i][k] * hkl[k] for k in range(3)) for i in range(3)]


def calc_eta_angle(y, z):
    """MIDAS_Math.c 292-296."""
    alpha = math.acos(z / math.sqrt(y * y + z * z)) / D2R
    return -alpha if y > 0 else alpha


def rotate_around_z(v, alpha):
    """MIDAS_Math.c 269-274."""
    c, s = cosd(alpha), sind(alpha)
    return [c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]]


def calc_omega(x, y, z, theta):
    """ForwardSimulationCompressed.c 161-243 (CalcOmega), as written."""
    omegas = []
    length = math.sqrt(x * x + y * y + z * z)
    v = sind(theta) * length
    if abs(y) < 1e-12:
        if x != 0 and abs(-v / x) <= 1:
            ome = math.acos(-v / x) / D2R
            omegas += [ome, -ome]
    else:
        y2 = y * y
        a = 1 + x * x / y2
        b = 2 * v * x / y2
        c = v * v / y2 - 1
        discr = b * b - 4 * a * c
        if discr >= 0:
            for cosome in ((-b + math.sqrt(discr)) / (2 * a), (-b - math.sqrt(discr)) / (2 * a)):
                if abs(cosome) <= 1:
                    o1 = math.acos(cosome)
                    o2 = -o1
                    d1 = abs(-x * math.cos(o1) + y * math.sin(o1) - v)
                    d2 = abs(-x * math.cos(o2) + y * math.sin(o2) - v)
                    omegas.append((o1 if d1 < d2 else o2) / D2R)
    return [(w, calc_eta_angle(*rotate_around_z([x, y, z], w)[1:])) for w in omegas]


def displacement_in_the_spot(a, b, c, xi, yi, zi, omega):
    """MIDAS_Math.c 301-324 (no wedge, no chi)."""
    so, co = sind(omega), cosd(omega)
    xc, yc, zc = a * co - b * so, a * so + b * co, c
    ik = [xi - xc, yi - yc, zi - zc]
    n = math.sqrt(sum(t * t for t in ik))
    ik = [t / n for t in ik]
    return yc - xc * ik[1] / ik[0], zc - xc * ik[2] / ik[0]


def tilts_rx_ry_rz(tx, ty, tz):
    """FitSetupParamsAllZarr.c 201-209: TRs = Rx (Ry Rz)."""
    a, b, c = tx * D2R, ty * D2R, tz * D2R
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rx @ (ry @ rz)


def pixel_lab(y, z, q):
    """FitSetupParamsAllZarr.c 222-227: the lab point of pixel (y, z)."""
    yc, zc = -(y - q["ybc"]) * q["px"], (z - q["zbc"]) * q["px"]
    p = q["trs"] @ np.array([0.0, yc, zc])
    return np.array([q["lsd"] + p[0], p[1], p[2]])


def midas_spots(u, pos, hkls, q):
    """Rows (omega, eta, y px, z px, frame position, hkl index) as MIDAS's FF chain gives a
    grain's spots: ForwardSimulationCompressed.c 1862-1925 (no wedge, one wavelength)."""
    rows = []
    for h, hkl in enumerate(hkls):
        g = correct_hkls_latc(q["latc"], hkl)
        gc = [sum(u[i][k] * g[k] for k in range(3)) for i in range(3)]
        ds = 1 / math.sqrt(sum(t * t for t in g))
        theta = math.asin(q["wl"] / (2 * ds)) / D2R
        ring_radius = q["lsd"] * math.tan(2 * D2R * theta)
        for ome, eta in calc_omega(*gc, theta):
            ytemp, ztemp = -ring_radius * sind(eta), ring_radius * cosd(eta)   # CalcSpotPosition
            dy, dz = displacement_in_the_spot(*pos, q["lsd"], ytemp, ztemp, ome)
            ythis, zthis = ytemp + dy, ztemp + dz
            # the pixel whose lab point lies on the line from the origin through the spot
            # on the ideal plane (MIDAS's distortion map, yDispl/zDispl): s (Lsd, y, z) =
            # (Lsd, 0, 0) + TRs (0, Yc, Zc), solved for s, Yc, Zc
            m = np.c_[[q["lsd"], ythis, zthis], -q["trs"][:, 1], -q["trs"][:, 2]]
            _, yc, zc = np.linalg.solve(m, [q["lsd"], 0.0, 0.0])
            ydet, zdet = q["ybc"] - yc / q["px"], q["zbc"] + zc / q["px"]     # 1913-1914
            lab = pixel_lab(ydet, zdet, q)
            eta_obs = calc_eta_angle(lab[1], lab[2])
            frame = (ome - q["start"]) / q["step"]
            frame = (frame + 0.5) % (360 / abs(q["step"])) - 0.5
            rows.append((ome, eta_obs, ydet, zdet, frame, h))
    return np.array(rows)


def axis_angle(axis, deg):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    t = deg * D2R
    return np.eye(3) + math.sin(t) * k + (1 - math.cos(t)) * k @ k



def sweep_spots(grains, hkls, q, shape, n_frames, min_eta):
    """Every spot of ``grains`` (dicts of u, pos, lattice) MIDAS's chain keeps: on the
    detector, outside the poles, in the sweep. Rows (omega, eta, y, z, frame, hkl, grain)."""
    rows = []
    for i, g in enumerate(grains):
        s = midas_spots(g["u"], g["pos"], hkls, dict(q, latc=g["lattice"]))
        ae = np.abs(s[:, 1])
        keep = ((s[:, 2] >= 0) & (s[:, 2] < shape[1]) & (s[:, 3] >= 0) & (s[:, 3] < shape[0])
                & (ae > min_eta) & (ae < 180 - min_eta) & (s[:, 4] < n_frames - 0.5))
        rows.append(np.c_[s[keep], np.full(keep.sum(), i)])
    return np.concatenate(rows)


def render(spots, amp, n_frames, shape, sigma_px=1.0, omega_sigma=0.6, background=100.0):
    """Mean frames: each spot a 2-D Gaussian (``sigma_px``) on the frames around its frame
    position ``f`` with weights ``exp(-(k - f)^2 / 2 omega_sigma^2)`` (MIDAS's
    ForwardSimulationCompressed.c 1967-2004), normalised, wrapping round a full turn."""
    mean = np.full((n_frames,) + tuple(shape), background, np.float32)
    half = int(math.ceil(4 * sigma_px))
    span = int(math.ceil(4 * omega_sigma))
    for (y, z, f), a in zip(spots, amp):
        k = np.arange(int(round(f)) - span, int(round(f)) + span + 1)
        w = np.exp(-0.5 * ((k - f) / omega_sigma) ** 2)
        w /= w.sum()
        rr = np.arange(int(round(z)) - half, int(round(z)) + half + 1)
        cc = np.arange(int(round(y)) - half, int(round(y)) + half + 1)
        rr, cc = rr[(rr >= 0) & (rr < shape[0])], cc[(cc >= 0) & (cc < shape[1])]
        patch = a * np.exp(-0.5 * (((rr[:, None] - z) ** 2 + (cc[None, :] - y) ** 2)
                                   / sigma_px ** 2))
        for kk, wk in zip(k % n_frames, w):
            mean[kk, rr[0]:rr[-1] + 1, cc[0]:cc[-1] + 1] += (wk * patch).astype(np.float32)
    return mean


def write_sweep(folder, mean, params_text, rng, n_dark=4, background=100.0):
    """Raw GE frames (Poisson-like noise) of ``mean``, a dark file, and ``ff.params``."""
    from kernels import write_ge

    os.makedirs(folder, exist_ok=True)

    def noisy(m):
        return np.clip(np.rint(m + np.sqrt(m) * rng.standard_normal(m.shape)), 0,
                       65535).astype(np.uint16)

    write_ge(os.path.join(folder, "ff_000001.ge3"), (noisy(m) for m in mean))
    flat = np.full(mean.shape[1:], background, np.float32)
    write_ge(os.path.join(folder, "dark_000001.ge3"), (noisy(flat) for _ in range(n_dark)))
    path = os.path.join(folder, "ff.params")
    with open(path, "w") as fh:
        fh.write(params_text)
    return path
