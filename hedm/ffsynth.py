"""A synthetic FF-HEDM sweep with ground truth: grains -> spots -> raw frames on disk.

:func:`make_sweep` writes, into one folder::

    ff_000001.ge3   raw uint16 frames (one GE file holding the sweep; stage 1's input)
    dark_000001.ge3 dark frames (background and noise only)
    ff.params       the sweep's one parameter file: stage 1's and stage 2's keys
    truth.npz       the grains: ``u`` and ``lattice`` (what the spots were rendered from),
                    ``orientation`` (:func:`kernels.ffmodel.lattice_rotation`, what
                    Grains.csv reports), position (um), sample-frame strain (MIDAS's eFab
                    definition), and every spot rendered

The grains have random orientations, positions in a cylinder of ``Rsample`` and ``Hbeam``,
and random crystal-frame strains (``strain`` per component) turned into lattice
parameters (:func:`kernels.ffmodel.lattice_from_strain`). Each spot of the forward model
(:func:`kernels.ffmodel.ff_spots`) is rendered as a 2-D Gaussian on the detector spread
over the frames its omega profile (a Gaussian of ``omega_sigma`` frames, integrated over
half a frame either side of each frame's omega, MIDAS's stamp ``OmegaStart + k OmegaStep``
(:mod:`kernels.geometry`), wrapping around a full turn) reaches, on a flat background with
Gaussian noise of variance equal to the mean. Spots of different grains fall where they
fall: some overlap.

:data:`SWEEP_GEOMETRY` is gold at MIDAS's example wavelength on a 192 x 192 px detector of
200 um pixels at 120 mm (rings {111}..{222}), 360 frames of 1 deg: small enough for a
test in seconds.
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, Optional

import numpy as np

__all__ = ["SWEEP_GEOMETRY", "make_sweep", "load_sweep_truth", "score_grains"]

#: The sweep geometry and stage-2 keys (MIDAS FF parameter-file text).
SWEEP_GEOMETRY = """\
LatticeConstant 4.08 4.08 4.08 90 90 90
SpaceGroup 225
Wavelength 0.172979
Lsd 120000
BC 96.3 95.7
px 200
tx 0
ty 0
tz 0
RhoD 18500
OmegaStart 180
OmegaStep -1
OmegaRange -180 180
MinEta 6
Rsample 150
Hbeam 100
StepSizePos 400
StepSizeOrient 1
OverAllRingToIndex 1
Completeness 0.7
MarginOme 1
MarginEta 300
MarginRadial 300
Width 400
MergePixels 2.5
BeamThickness 100
"""

#: Stage-1 keys of the sweep file.
STAGE1: Dict[str, Any] = {
    "InputPattern": "ff_000001.ge3", "Dark": "dark_000001.ge3", "RawStartNr": 0,
    "NrFilesPerSweep": 1, "Threshold": 40.0, "MinNrPx": 3, "MaxNrPx": 600,
    "OutputFileName": "ff_peaks"}


def _params(text: str) -> Dict[str, Any]:
    from hedm.ffparams import GRAINS_SCHEMA, PEAKS_SCHEMA, grains_params
    from hedm.params import parse_params

    foreign = {q.key for q in PEAKS_SCHEMA}
    return grains_params(parse_params(text, GRAINS_SCHEMA, "<sweep>", foreign), None, "<sweep>")


def _grains(n: int, p: Dict[str, Any], strain: float, rng) -> Dict[str, np.ndarray]:
    from kernels.crystal import random_orientations
    from kernels.ffmodel import fable_strain, lattice_from_strain, lattice_rotation

    u = random_orientations(n, rng)
    r = p["Rsample"] * np.sqrt(rng.random(n))
    phi = rng.random(n) * 2 * np.pi
    pos = np.stack([r * np.cos(phi), r * np.sin(phi),
                    (rng.random(n) - 0.5) * p["Hbeam"]], 1)
    ref = np.asarray(p["LatticeConstant"], float)
    lat = np.empty((n, 6))
    eps = np.empty((n, 3, 3))
    rot = np.empty((n, 3, 3))
    for i in range(n):
        e = rng.uniform(-strain, strain, (3, 3))
        e = 0.5 * (e + e.T)
        lat[i] = lattice_from_strain(ref, e)
        eps[i] = fable_strain(ref, lat[i], u[i])
        rot[i] = lattice_rotation(u[i], lat[i], ref)
    return {"u": u, "pos": pos, "lattice": lat, "strain": eps, "orientation": rot}


def _given(given: Dict[str, np.ndarray], p: Dict[str, Any]) -> Dict[str, np.ndarray]:
    from kernels.ffmodel import fable_strain, lattice_rotation

    u = np.asarray(given["u"], float)
    ref = np.asarray(p["LatticeConstant"], float)
    lat = np.asarray(given.get("lattice", np.tile(ref, (len(u), 1))), float)
    return {"u": u, "pos": np.asarray(given["pos"], float), "lattice": lat,
            "strain": np.array([fable_strain(ref, la, x) for la, x in zip(lat, u)]),
            "orientation": np.array([lattice_rotation(x, la, ref) for la, x in zip(lat, u)])}


def _render(spots: np.ndarray, amp: np.ndarray, n_frames: int, shape, sigma_px: float,
            omega_sigma: float, background: float) -> np.ndarray:
    from scipy.special import erf

    mean = np.full((n_frames,) + tuple(shape), background, np.float32)
    half = int(math.ceil(4 * sigma_px))
    span = int(math.ceil(4 * omega_sigma)) + 1
    for (y, z, f), a in zip(spots, amp):
        # frame j gathers omega profile within half a frame of its stamp j (MIDAS's frame
        # omega, kernels.geometry), so the frames' centroid is the spot's omega
        k = int(math.floor(f + 0.5))
        j = np.arange(k - span, k + span + 1)
        cdf = 0.5 * (1 + erf((np.r_[j, j[-1] + 1] - 0.5 - f) / (omega_sigma * math.sqrt(2))))
        frac = np.diff(cdf)
        r0, c0 = int(round(z)) - half, int(round(y)) - half
        rr = np.arange(r0, r0 + 2 * half + 1)
        cc = np.arange(c0, c0 + 2 * half + 1)
        ok_r = (rr >= 0) & (rr < shape[0])
        ok_c = (cc >= 0) & (cc < shape[1])
        patch = np.exp(-0.5 * (((rr[:, None] - z) ** 2 + (cc[None, :] - y) ** 2) / sigma_px ** 2))
        patch = (a * patch[ok_r][:, ok_c]).astype(np.float32)
        for jj, fr in zip(j % n_frames, frac):
            if fr > 1e-4:
                mean[jj, rr[ok_r][0]:rr[ok_r][-1] + 1, cc[ok_c][0]:cc[ok_c][-1] + 1] += fr * patch
    return mean


def make_sweep(folder: str, grains: int = 20, seed: int = 1, strain: float = 5e-4,
               n_frames: int = 360, shape=(192, 192), amplitude=(6000.0, 15000.0),
               sigma_px: float = 1.0, omega_sigma: float = 0.6, background: float = 100.0,
               n_dark: int = 4, noise: float = 1.0, geometry: str = SWEEP_GEOMETRY,
               extra: str = "", given: Optional[Dict[str, np.ndarray]] = None
               ) -> Dict[str, Any]:
    """Write a sweep into ``folder`` (module docstring); return the truth and the paths.

    ``extra`` is appended to the parameter file. The frames are rendered from
    ``geometry``. ``given`` holds the grains instead of random ones: ``u`` (n, 3, 3),
    ``pos`` (n, 3) um and optionally ``lattice`` (n, 6; default the unstrained one) --
    e.g. an NF layer's microstructure, so that FF's grains can seed NF's fit.
    """
    from kernels import write_ge
    from kernels.ffmodel import ff_spots

    from hedm.ffparams import ff_arrays

    rng = np.random.default_rng(seed)
    p = _params(geometry)
    arrays = ff_arrays(p, n_frames, shape)
    truth = _grains(grains, p, strain, rng) if given is None else _given(given, p)
    grains = len(truth["u"])
    rows, amps, owner = [], [], []
    for i in range(grains):
        s = ff_spots(truth["u"][i], truth["lattice"][i], truth["pos"][i], arrays)
        rows.append(s)
        a = rng.uniform(*amplitude)       # one grain, one size: its spots alike
        amps.append(np.full(len(s), a))
        owner.append(np.full(len(s), i))
    spots = np.concatenate(rows)
    amp = np.concatenate(amps)
    mean = _render(spots[:, [3, 4, 5]], amp, n_frames, shape, sigma_px, omega_sigma, background)
    os.makedirs(folder, exist_ok=True)

    def noisy(m):
        return np.clip(np.rint(m + noise * np.sqrt(m) * rng.standard_normal(m.shape)), 0,
                       65535).astype(np.uint16)

    write_ge(os.path.join(folder, STAGE1["InputPattern"]), (noisy(m) for m in mean))
    flat = np.full(tuple(shape), background, np.float32)
    write_ge(os.path.join(folder, STAGE1["Dark"]), (noisy(flat) for _ in range(n_dark)))
    lines = ["# synthetic FF-HEDM sweep written by hedm.ffsynth: one file for stage 1",
             "# (hedm/ff.py) and stage 2 (hedm/ffgrains.py)", geometry.rstrip()]
    lines += [f"{k} {v}" for k, v in STAGE1.items()]
    lines += [f"NrPixelsY {shape[1]}", f"NrPixelsZ {shape[0]}", f"NrFrames {n_frames}"]
    if extra:
        lines.append(extra.rstrip())
    params = os.path.join(folder, "ff.params")
    with open(params, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    np.savez_compressed(os.path.join(folder, "truth.npz"), spots=spots,
                        owner=np.concatenate(owner), amplitude=amp, **truth)
    return {"params": params, "folder": folder, "grains": grains, "spots": int(len(spots)),
            **truth}


def load_sweep_truth(folder: str) -> Dict[str, np.ndarray]:
    """The truth written by :func:`make_sweep`."""
    with np.load(os.path.join(folder, "truth.npz")) as z:
        return {k: z[k] for k in z.files}


def score_grains(truth: Dict[str, np.ndarray], u: np.ndarray, pos: np.ndarray,
                 strain: np.ndarray) -> Dict[str, Any]:
    """Pair found grains with true ones (nearest misorientation of ``u``, orientations as
    :func:`kernels.ffmodel.lattice_rotation` gives them) and measure the errors.

    Returns per true grain the misorientation (deg), position error (um) and the largest
    strain-component error of its match, and the counts of missed and extra grains.
    """
    from kernels.crystal import misorientation

    n_true = len(truth["u"])
    mis = np.full(n_true, 180.0)
    dpos = np.full(n_true, np.inf)
    dstr = np.full(n_true, np.inf)
    used = set()
    for i in range(n_true):
        if not len(u):
            break
        m = np.atleast_1d(misorientation(np.asarray(u), truth["orientation"][i][None]))
        j = int(np.argmin(m))
        if m[j] < 1.0 and j not in used:
            used.add(j)
            mis[i] = m[j]
            dpos[i] = float(np.linalg.norm(pos[j] - truth["pos"][i]))
            dstr[i] = float(np.abs(strain[j] - truth["strain"][i]).max())
    return {"misorientation_deg": mis, "position_um": dpos, "strain_err": dstr,
            "missed": int(np.sum(mis >= 180.0)), "extra": int(len(u) - len(used)),
            "found": int(len(used))}


def main(argv=None) -> int:
    """``python -m hedm.ffsynth FOLDER [--grains N] [--seed S]``: write a synthetic sweep."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m hedm.ffsynth",
                                 description="Write a synthetic FF-HEDM sweep with ground truth")
    ap.add_argument("folder")
    ap.add_argument("--grains", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if os.path.isdir(args.folder) and os.listdir(args.folder):   # as hedm.synth: a new folder
        ap.error(f"{args.folder} is not empty: give a new folder (nothing was written)")
    info = make_sweep(args.folder, grains=args.grains, seed=args.seed)
    print(f"{info['grains']} grains, {info['spots']} spots: {info['params']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
