"""NF orientation fitting: grid points fitted per second per core on the demo geometry.

Run:  .venv/bin/python bench/nf_fit_bench.py [--points 0] [--scipy-points 20] [--ref-points 3]
Writes bench/results/nf_fit.json and bench/results/nf_fit.md.

The demo case (``tests/data/nf_demo_ps.txt``): 15 Voronoi grains in a 50 um
disk, binary images simulated as the demo does (spots 2 px taller, 3x3
median root), seeds as an FF-HEDM grain list would give them (every grain
0.5 deg off, plus 10 spurious grains).  All in one process on one core
(``NUMBA_NUM_THREADS=1``), numba compilation excluded, three ways:

* ``numba``: :func:`kernels.nffit.fit_points` on every grid point (``--points 0``)
  or the first N of a fixed random order -- the demo's fitting time;
* ``scipy-NM``: the same numba screening and confidence, with scipy's
  Nelder-Mead (one run per candidate, first simplex edge OrientTol, at most
  ``n_refine`` candidates) calling the numba confidence from Python -- what
  our numba Nelder-Mead saves;
* ``numpy-ref``: the NumPy reference of the tests (``tests/nf_reference.py``:
  screening and scipy Nelder-Mead on the pure-NumPy confidence).

Each reports points/s, confidence evaluations/s and the share of its points
within 0.25 deg of the truth; the points of the slower two are the first of
the same order.  The machine is shared: compare the ratios of one run, with
the load average recorded beside them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from loadavg import LoadSampler  # noqa: E402

from kernels.crystal import misorientation, rotation_vector_matrix  # noqa: E402
from kernels.microstructure import ff_seeds, simulate_images, voronoi_microstructure  # noqa: E402
from kernels.nfconfidence import FitWorkspace, confidence_kernel, unpack_images  # noqa: E402
from kernels.nffit import FitOptions, fit_points, screen_kernel, seed_spots  # noqa: E402
from kernels.nfgeometry import NFGeometry  # noqa: E402
from kernels.nfgrid import grid_vertices, hex_grid, within_radius  # noqa: E402
from tests.nf_reference import ref_confidence, ref_fit_point  # noqa: E402

DEMO = os.path.join(ROOT, "tests", "data", "nf_demo_ps.txt")


def scipy_fit(rows, geo, images, ss, opts):
    """Numba screening + scipy Nelder-Mead on the numba confidence (Python callback)."""
    from scipy.optimize import minimize

    m = geo.arrays
    work = FitWorkspace(geo, float(rows[0, 4]))
    verts = grid_vertices(rows)
    tol = math.radians(geo.orient_tol)
    fracs = np.empty(len(ss.seeds))
    out, evals = [], 0
    for v in verts:
        v = np.ascontiguousarray(v)
        screen_kernel(v, work.rasterize, m, images, ss.spots, ss.counts, fracs, work.pix,
                      work.base)
        cand = np.flatnonzero(fracs >= geo.min_frac_accept)
        best_u, best_c = None, -1.0
        for s in cand[np.argsort(-fracs[cand], kind="stable")][:opts.n_refine]:
            def f(w, s=s, v=v):
                u = rotation_vector_matrix(np.clip(w, -tol, tol)) @ ss.seeds[s]
                return -confidence_kernel(u, v, work.rasterize, m, images, work.spots,
                                          work.pix, work.base)
            res = minimize(f, np.zeros(3), method="Nelder-Mead",
                           options={"initial_simplex": np.vstack([np.zeros(3), np.eye(3) * tol]),
                                    "xatol": math.radians(opts.xtol_deg), "fatol": 1e-9,
                                    "maxfev": opts.max_evals})
            evals += res.nfev
            if -res.fun > best_c:
                best_c = -res.fun
                best_u = rotation_vector_matrix(np.clip(res.x, -tol, tol)) @ ss.seeds[s]
            if best_c >= 1 - 1e-4:
                break
        out.append(best_u if best_u is not None else np.full((3, 3), np.nan))
    return np.array(out), evals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=0, help="numba points (0: every grid point)")
    ap.add_argument("--scipy-points", type=int, default=20)
    ap.add_argument("--ref-points", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)

    geo = NFGeometry.from_params(DEMO)
    micro = voronoi_microstructure(15, geo.rsample, seed=1)
    t0 = time.perf_counter()
    images = simulate_images(micro, geo, dilate_z=2, smooth=True)
    t_sim = time.perf_counter() - t0
    grid = within_radius(hex_grid(geo.grid_size, geo.rsample), geo.rsample)
    order = np.random.default_rng(0).permutation(len(grid))
    seeds = ff_seeds(micro, 0.5, n_spurious=10, seed=2)
    ss = seed_spots(seeds, geo)
    opts = FitOptions()
    truth = micro.orientation_at(grid[:, 2:4])
    inner = micro.boundary_distance(grid[:, 2:4]) >= 2 * geo.grid_size
    fit_points(grid[order[:2]], geo, images, ss, opts)           # compile outside the clock
    scipy_fit(grid[order[:1]], geo, images, ss, opts)

    def accuracy(u, idx):
        mis = misorientation(u, truth[idx])
        mis = np.where(np.isnan(mis), 180.0, mis)
        return float(np.mean(mis < 0.25)), mis

    results = {}
    with LoadSampler() as load:
        idx = np.sort(order[:args.points]) if args.points else np.arange(len(grid))
        t0 = time.perf_counter()
        res = fit_points(grid[idx], geo, images, ss, opts)
        dt = time.perf_counter() - t0
        acc, mis = accuracy(res["u"], idx)
        results["numba"] = {"points": len(idx), "seconds": dt, "points_per_s": len(idx) / dt,
                            "evals": int(res["n_evals"].sum()),
                            "evals_per_s": float(res["n_evals"].sum() / dt),
                            "within_0.25": acc,
                            "interior_within_0.25": float(np.mean(mis[inner[idx]] < 0.25)),
                            "interior_points": int(inner[idx].sum())}
        idx = order[:args.scipy_points]
        t0 = time.perf_counter()
        u, evals = scipy_fit(grid[idx], geo, images, ss, opts)
        dt = time.perf_counter() - t0
        results["scipy-NM"] = {"points": len(idx), "seconds": dt, "points_per_s": len(idx) / dt,
                               "evals": evals, "evals_per_s": evals / dt,
                               "within_0.25": accuracy(u, idx)[0]}
        idx = order[:args.ref_points]
        binary = unpack_images(images, geo.n_pixels_y)
        t0 = time.perf_counter()
        us = []
        for i in idx:
            u, _, _ = ref_fit_point(grid[i], geo, binary, seeds, geo.orient_tol,
                                    geo.min_frac_accept)
            us.append(u if u is not None else np.full((3, 3), np.nan))
        dt = time.perf_counter() - t0
        # the reference's cost per evaluation, timed apart on the same points
        t1 = time.perf_counter()
        n_eval = 0
        for i in idx:
            for s in seeds[:10]:
                ref_confidence(s, grid[i], geo, binary)
                n_eval += 1
        per_eval = (time.perf_counter() - t1) / n_eval
        results["numpy-ref"] = {"points": len(idx), "seconds": dt,
                                "points_per_s": len(idx) / dt, "evals_per_s": 1 / per_eval,
                                "within_0.25": accuracy(np.array(us), idx)[0]}
    base = results["numba"]["points_per_s"]
    for r in results.values():
        r["numba_speedup"] = base / r["points_per_s"]
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host_cpus": os.cpu_count(),
            "python": platform.python_version(), "grid_points": len(grid),
            "interior_points": int(inner.sum()), "seeds": len(seeds),
            "simulate_s": t_sim,
            "load_before": load.before, "load_min": min(load.samples),
            "load_mean": float(np.mean(load.samples)), "load_max": max(load.samples),
            "command": "bench/nf_fit_bench.py " + " ".join(argv or sys.argv[1:])}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "nf_fit.json"), "w") as fh:
        json.dump({"meta": meta, "results": results}, fh, indent=1)
    lines = [
        "# NF orientation fitting, demo geometry, one core", "",
        f"Run {meta['date']} by `{meta['command'].strip()}`; {meta['grid_points']} grid points "
        f"({meta['interior_points']} two grid steps from a grain boundary), {meta['seeds']} "
        f"seeds, numba compilation excluded. Load average {meta['load_before']:.1f} before, "
        f"{meta['load_min']:.1f}-{meta['load_max']:.1f} during (2 CPUs, shared).", "",
        "| method | points | s | points/s/core | evaluations/s | numba speed-up | "
        "within 0.25 deg |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['points']} | {r['seconds']:.1f} | {r['points_per_s']:.2f} "
                     f"| {r['evals_per_s']:,.0f} | {r['numba_speedup']:.1f}x | "
                     f"{100 * r['within_0.25']:.1f}% |")
    nb = results["numba"]
    lines += ["", "numba, interior voxels within 0.25 deg: "
              f"{100 * nb['interior_within_0.25']:.1f}% of {nb['interior_points']}; "
              f"image simulation {meta['simulate_s']:.1f} s."]
    with open(os.path.join(args.out, "nf_fit.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
