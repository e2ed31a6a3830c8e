"""The FF forward model against MIDAS's own equations, transcribed here line by line (issue 46).

Nothing below calls the project's model: ``B`` is ``CorrectHKLsLatC``, the omegas are
``CalcOmega``'s quadratic in cos(omega) with its sign test, the spot is
``CalcSpotPosition`` moved by ``DisplacementInTheSpot``, the pixel is the one whose lab
point (``FitSetupParamsAllZarr.c`` 222-227: ``Yc = -(y - ybc) px``, ``Rx Ry Rz`` tilts)
lies on the ray, and a spot's frame position is ``(omega - OmegaStart) / OmegaStep``
(frame ``k``'s omega is ``OmegaStart + k OmegaStep``, ``PeaksFittingOMPZarrRefactor.c``
2856). Sources: marinerhemant/MIDAS at 0e6e0e54, ``FF_HEDM/src/``. Each spot (omega, eta,
y, z, frame) of a few orientations and positions, for both signs of ``OmegaStep``, must be
the project's (:func:`kernels.ffmodel.ff_spots`).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

D2R = math.pi / 180.0

GEOMETRY = """\
LatticeConstant 4.08 4.08 4.08 90 90 90
Wavelength 0.172979
Lsd 120000
BC 101.3 95.7
px 200
RhoD 18500
MinEta 6
"""


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


CASES = [  # orientation (axis, angle), position (um), tilts (tx, ty, tz)
    (((1, 2, 3), 37.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    (((-2, 1, 0.5), 71.0), (80.0, -60.0, 30.0), (0.0, 0.0, 0.0)),
    (((0.3, -1, 2), 123.0), (-120.0, 40.0, -20.0), (0.0, 0.0, 0.0)),
    (((1, 1, -1), 15.0), (0.0, 0.0, 0.0), (3.0, -2.5, 4.0)),     # the tilt order matters
]


@pytest.mark.parametrize("start,step", [(180.0, -1.0), (-180.0, 1.0), (0.0, -0.25)])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_ff_spots_are_midas_spots(case, start, step):
    from hedm.ffparams import GRAINS_SCHEMA, ff_arrays, grains_params
    from hedm.params import parse_params
    from kernels.ffmodel import ff_spots

    (axis, angle), pos, tilts = CASES[case]
    n_frames = int(round(360 / abs(step)))
    text = GEOMETRY + (f"OmegaStart {start}\nOmegaStep {step}\n"
                       f"tx {tilts[0]}\nty {tilts[1]}\ntz {tilts[2]}\n")
    p = grains_params(parse_params(text, GRAINS_SCHEMA))
    shape = (192, 208)
    arrays = ff_arrays(p, n_frames, shape)
    u = axis_angle(axis, angle)
    lat = np.array(p["LatticeConstant"])
    ours = ff_spots(u, lat, np.array(pos), arrays)
    q = {"latc": lat, "wl": p["Wavelength"], "lsd": p["Lsd"], "ybc": p["BC"][0],
         "zbc": p["BC"][1], "px": p["px"], "trs": tilts_rx_ry_rz(*tilts), "start": start,
         "step": step}
    ref = midas_spots(u, pos, arrays.hkl, q)
    # MIDAS's filters: on the detector, outside the poles (MinEta), in the sweep; spots
    # within a hair of a filter's edge are left out of the comparison (either may keep them)
    ae = np.abs(ref[:, 1])
    inside = ((ref[:, 2] >= 0) & (ref[:, 2] < shape[1]) & (ref[:, 3] >= 0)
              & (ref[:, 3] < shape[0]) & (ae >= 6) & (180 - ae >= 6))
    edge = ((np.minimum(np.abs(ref[:, 2]), np.abs(ref[:, 2] - shape[1])) < 0.01)
            | (np.minimum(np.abs(ref[:, 3]), np.abs(ref[:, 3] - shape[0])) < 0.01)
            | (np.abs(ae - 6) < 0.01) | (np.abs(180 - ae - 6) < 0.01))
    want = ref[inside & ~edge]
    assert len(want) >= 10, "too few spots on the detector to compare"
    got = {(int(r[7]), round(r[0], 6)): r for r in ours}
    for ome, eta, y, z, frame, h in want:
        key = min(((k, r) for k, r in got.items() if k[0] == int(h)),
                  key=lambda kr: abs(kr[1][0] - ome), default=(None, None))[1]
        assert key is not None, f"hkl {arrays.hkl[int(h)]} omega {ome:.4f}: not predicted"
        assert abs(key[0] - ome) < 1e-6, (h, key[0], ome)
        assert abs(key[1] - eta) < 1e-3, ("eta", h, key[1], eta)
        assert abs(key[3] - y) < 0.02, ("y px", h, key[3], y)
        assert abs(key[4] - z) < 0.02, ("z px", h, key[4], z)
        assert abs(key[5] - frame) < 1e-6, ("frame", h, key[5], frame)
    kept = {(int(h), round(o, 3)) for o, *_, h in ref[inside]}
    extra = [r for r in ours if (int(r[7]), round(r[0], 3)) not in kept]
    assert not extra, f"spots MIDAS would not give: {extra[:3]}"
