"""FF-HEDM refinement of one grain: position, orientation and lattice fitted to its spots.

One call per grain (stage 2's task, :mod:`hedm.ffgrains`). From the indexed grain:

1. **match** its predicted spots to the observed (:func:`hedm.ffindex.match_grain`), the
   spot ids in ``exclude`` left out;
2. **fit** with ``scipy.optimize.least_squares`` (trust region, soft-L1 loss) the 12
   parameters ``x = (position um, rotation vector rad applied to the indexed orientation,
   a b c A, alpha beta gamma deg)`` to the residuals of every matched spot -- predicted
   minus observed detector ``y``, ``z`` (px) and omega (frames) -- by the forward model
   (:func:`kernels.ffmodel.residuals_kernel`). The first fit starts from the indexed
   orientation (up to half a fibre step off, residuals of pixels): omega weighted 0.5, the
   loss quadratic up to ``F_SCALE`` px;
3. **again** twice: match with the fitted grain at half the tolerances and fit with each
   kind of residual (y, z, omega) divided by its *measured scatter* -- the robust
   standard deviation (1.4826 x median absolute value) of that column in the previous
   fit, at least ``SCATTER_FLOOR`` -- and the loss quadratic up to ``LOSS_SIGMAS`` of
   them; spots farther than ``REJECT_SIGMAS`` scatters (a neighbour's tail pulls their
   centroid) are dropped and the fit repeated. Why measured: a clean spot's centroid is
   good to about 0.01 px, one a few pixels from another spot to 0.03-0.1 px, and a
   strain of 10^-4 moves a spot by 0.0044 px (the test sweep's ring {111}); a loss scale
   well above the clean scatter lets the disturbed spots set the strain;
4. **strains** (MIDAS's two, sample frame): ``eFab`` from the fitted lattice against
   ``LatticeConstant`` (:func:`kernels.ffmodel.fable_strain`), ``eKen`` by least squares
   of each spot's ``(d_obs - d_0) / d_0`` on its scattering direction (MIDAS's
   ``StrainTensorKenesei``; ``RMSErrorStrain`` its rms residual).

The grain's spots (``spot_ids``, ``n_matched``, its completeness and intensity) are those
matched in the last round, the disturbed ones too: they are its spots, only too disturbed
to fit; ``n_fit`` counts those the last fit used (the residuals, ``eKen``).

A fit that fails (too few spots: fewer than 12 residuals per parameter set, the optimiser
not converging, or an rms residual above ``MaxRefineRMS``) is returned with
``converged = False`` and the reason.
"""
from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

__all__ = ["refine_grain", "kenesei_strain"]

#: The first fit's weight of omega (frames) against y, z (px).
OMEGA_WEIGHT = 0.5
#: The first fit's loss scale (px): the indexed orientation is up to half a fibre step off.
F_SCALE = 0.1
#: Later fits: loss quadratic up to one measured scatter (as Huber's 1.345), spots beyond
#: REJECT_SIGMAS dropped (3 % of clean ones); scatters (px, px, frames) at least
#: SCATTER_FLOOR.
LOSS_SIGMAS = 1.0
REJECT_SIGMAS = 3.0
SCATTER_FLOOR = 1e-3
MIN_SPOTS = 6


def _model(x, u0):
    from kernels.crystal import rotation_vector_matrix
    from kernels.ffmodel import b_matrix

    return rotation_vector_matrix(x[3:6]) @ u0, b_matrix(x[6:12]), np.ascontiguousarray(x[:3])


def _fit(x0, u0, arrays, obs_yzo, hkl, w, f_scale):
    """Least squares of the weighted residuals ``w`` (3,) from ``x0``."""
    from scipy.optimize import least_squares

    from kernels.errors import KernelArgumentError
    from kernels.ffmodel import residuals_kernel

    out = np.empty((len(hkl), 3))

    def fun(x):
        try:
            u, b, pos = _model(x, u0)
        except KernelArgumentError:        # a step to a lattice that is none: far off
            return np.full(out.size, 1e3)
        residuals_kernel(u, b, pos, arrays, obs_yzo, hkl, out)
        return (out * w).ravel()

    return least_squares(fun, x0, loss="soft_l1", f_scale=f_scale, x_scale="jac",
                         max_nfev=1000, ftol=1e-12, xtol=1e-12, gtol=1e-12)


def _scatter(res, w) -> np.ndarray:
    """Robust standard deviation of each residual column (y px, z px, omega frames)."""
    r = res.fun.reshape(-1, 3) / w
    return np.maximum(1.4826 * np.median(np.abs(r), axis=0), SCATTER_FLOOR)


def _matched(u, lattice, pos, arrays, obs, margins, exclude):
    from hedm.ffindex import match_grain

    m = match_grain(u, lattice, pos, arrays, obs, margins)
    sel = m["rows"] >= 0
    rows = m["rows"][sel]
    hkl = m["spots"][sel, 7].astype(np.int64)
    keep = ~np.isin(obs.ids[rows], exclude)
    return rows[keep], hkl[keep], m


def kenesei_strain(obs, rows, hkl, u, pos, arrays, reference) -> tuple:
    """MIDAS's ``StrainTensorKenesei``: the sample-frame strain whose normal components
    along each spot's observed scattering direction best give its ``(d_obs - d_0) / d_0``;
    returns (3, 3) strain and the rms residual."""
    from hedm.ffindex import scattering_direction
    from kernels.ffmodel import b_matrix

    b0 = b_matrix(reference)
    a_rows, rhs = [], []
    for r, h in zip(rows, hkl):
        w = math.radians(obs.omega[r])
        c, s = math.cos(w), math.sin(w)
        r0 = np.array([c * pos[0] - s * pos[1], s * pos[0] + c * pos[1], pos[2]])
        k = obs.lab[r] - r0
        tth = math.atan2(math.hypot(k[1], k[2]), k[0])
        d_obs = arrays.wavelength / (2 * math.sin(tth / 2))
        d0 = 1.0 / np.linalg.norm(b0 @ arrays.hkl[h])
        g = scattering_direction(obs.lab[r], obs.omega[r], pos)
        a_rows.append([g[0] ** 2, g[1] ** 2, g[2] ** 2, 2 * g[0] * g[1], 2 * g[0] * g[2],
                       2 * g[1] * g[2]])
        rhs.append((d_obs - d0) / d0)
    a = np.array(a_rows)
    e, *_ = np.linalg.lstsq(a, np.array(rhs), rcond=None)
    rms = float(np.sqrt(np.mean((a @ e - np.array(rhs)) ** 2)))
    return np.array([[e[0], e[3], e[4]], [e[3], e[1], e[5]], [e[4], e[5], e[2]]]), rms


def refine_grain(grain: Dict[str, Any], obs, arrays, p: Dict[str, Any],
                 exclude=()) -> Dict[str, Any]:
    """The refined grain (module docstring): its parameters, strains, spots and verdict."""
    from kernels.ffmodel import fable_strain

    reference = np.asarray(p["LatticeConstant"], float)
    margins = (float(p["MarginOme"]), float(p["MarginEta"]), float(p["MarginRadial"]))
    exclude = np.asarray(exclude, np.int64)
    u0 = np.asarray(grain["u"], float)
    x = np.concatenate([grain["pos"], np.zeros(3), reference])
    u, pos, lat = u0, x[:3], reference
    res = None
    why = ""
    rows = hkl = matched = np.zeros(0, np.int64)
    m: Dict[str, Any] = {"n_predicted": 0}
    w = np.array([1.0, 1.0, OMEGA_WEIGHT])
    f_scale = F_SCALE
    for rnd in range(3):
        scale = 1.0 if rnd == 0 else 0.5
        rows, hkl, m = _matched(u, lat, pos, arrays, obs, tuple(v * scale for v in margins),
                                exclude)
        if len(rows) < MIN_SPOTS:
            why = f"{len(rows)} matched spots, fewer than {MIN_SPOTS}"
            break
        matched = rows
        yzo = np.ascontiguousarray(np.c_[obs.y[rows], obs.z[rows], obs.omega[rows]])
        w_fit = w
        res = _fit(np.concatenate([pos, np.zeros(3), lat]), u, arrays, yzo, hkl, w, f_scale)
        if rnd:
            # each residual kind in units of its measured scatter
            w, f_scale = 1.0 / _scatter(res, w_fit), LOSS_SIGMAS
            norm = np.linalg.norm(res.fun.reshape(-1, 3) / w_fit * w, axis=1)
            bad = norm > REJECT_SIGMAS
            if bad.any() and (~bad).sum() >= MIN_SPOTS:
                rows, hkl, yzo = rows[~bad], hkl[~bad], yzo[~bad]
            res = _fit(res.x, u, arrays, yzo, hkl, w, f_scale)
        u, _, pos = _model(res.x, u)
        lat = res.x[6:12].copy()
        pos = pos.copy()
    out: Dict[str, Any] = {"seed": grain.get("seed", -1), "u": u, "pos": pos, "lattice": lat,
                           "n_matched": int(len(matched)), "n_fit": int(len(rows)),
                           "n_predicted": int(m["n_predicted"]),
                           "spot_ids": obs.ids[matched] if len(matched) else np.zeros(0, np.int64),
                           "converged": False, "why": why}
    if res is None or why:
        return out
    r = res.fun.reshape(-1, 3) / w
    rms = float(np.sqrt(np.mean(r ** 2)))
    if not res.success:
        out["why"] = f"the optimiser stopped: {res.message}"
    elif rms > p["MaxRefineRMS"]:
        out["why"] = f"rms residual {rms:.3g} above MaxRefineRMS {p['MaxRefineRMS']}"
    else:
        out["converged"] = True
    e_ken, rms_ken = kenesei_strain(obs, rows, hkl, u, pos, arrays, reference)
    out.update(rms=rms, completeness=len(matched) / max(m["n_predicted"], 1),
               diff_pos=float(np.mean(np.hypot(r[:, 0], r[:, 1]))) * arrays.px,
               diff_ome=float(np.mean(np.abs(r[:, 2]))) * abs(arrays.omega_step),
               diff_angle=math.degrees(float(np.mean(np.hypot(r[:, 0], r[:, 1]))) * arrays.px
                                       / arrays.lsd),
               e_fab=fable_strain(reference, lat, u), e_ken=e_ken, rms_strain=rms_ken,
               intensity=float(np.sum(obs.intensity[matched])), nfev=int(res.nfev))
    return out
