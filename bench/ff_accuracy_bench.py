"""FF-HEDM from raw frames to grains at tens of grains: errors against the synthetic truth.

Run:  .venv/bin/python bench/ff_accuracy_bench.py [--cases 12:1 20:1 20:2 20:3 30:1 30:2]
          [--label after] [--code DIR] [--work DIR]
Writes (merging labels) bench/results/ff_accuracy.json and bench/results/ff_accuracy.md.

Per case ``GRAINS:SEED``: :func:`hedm.ffsynth.make_sweep` renders the sweep (the e2e
test's: 360 raw frames of 192 x 192 px, random orientations, positions in a 150 um disk x
100 um beam, strains up to 5x10^-4, overlapping spots), stage 1's peak search runs on
every frame (:func:`kernels.ff.find_peaks`, as ``hedm/ff.py``'s tasks), then stage 2 in
one process as ``hedm/ffgrains.py``'s tasks do it: spots, indexing, one refinement per
grain, duplicates dropped. The grains are scored against the truth
(:func:`hedm.ffsynth.score_grains`): found / missed / extra, the largest misorientation,
position error and strain-component error, the rms strain error, spots per grain.
Targets: orientations 0.05 deg, positions 10 um (a tenth of the beam), strains 10^-4.

``--code DIR`` imports ``hedm``/``kernels`` from another checkout (e.g. ``git archive``
of an earlier commit) to measure it on the same frames (``--work`` keeps sweeps and peaks
between runs); ``--label`` names the run in the results.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from loadavg import LoadSampler  # noqa: E402

TARGETS = {"misorientation_deg": 0.05, "position_um": 10.0, "strain": 1e-4}


def peaks_of(folder: str) -> np.ndarray:
    """Stage 1's peak table of every frame of the sweep in ``folder`` (cached there)."""
    from hedm.ffpeaks import kernel_params, load_dark, read_ff_params
    from kernels.ff import find_peaks
    try:
        from analyses.sources.frames import open_frame_file
    except ImportError:         # --code: a checkout from before analyses/ (e.g. 39dd754)
        from streams.offline import open_frame_file  # type: ignore[no-redef]

    cached = os.path.join(folder, "peaks.npy")
    if os.path.exists(cached):
        return np.load(cached)
    p = read_ff_params(os.path.join(folder, "ff.params"))
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    dark = load_dark(os.path.join(folder, p["Dark"]), shape)
    frames = open_frame_file(os.path.join(folder, p["InputPattern"]), shape, "uint16")
    kp = kernel_params(p)
    peaks = np.concatenate([find_peaks(np.ascontiguousarray(frames.read(i)), dark, kp, i)
                            for i in range(frames.n_frames)])
    np.save(cached, peaks)
    return peaks


def run_case(n: int, seed: int, work: str) -> dict:
    from hedm.ffgrains import _arrays, _dedup
    from hedm.ffindex import index_spots
    from hedm.ffparams import read_grains_params
    from hedm.ffrefine import refine_grain
    from hedm.ffspots import spots_from_peaks
    from hedm.ffsynth import load_sweep_truth, make_sweep, score_grains
    from kernels.ffmodel import lattice_rotation

    folder = os.path.join(work, f"sweep{n}_{seed}")
    if not os.path.exists(os.path.join(folder, "truth.npz")):
        make_sweep(folder, grains=n, seed=seed)
    peaks = peaks_of(folder)
    p = read_grains_params(os.path.join(folder, "ff.params"), {})
    arrays, rings = _arrays(p, 360, (192, 192))
    t0 = time.perf_counter()
    spots = spots_from_peaks(peaks, 0, 360, p, arrays, rings)
    t_spots = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = index_spots(spots, arrays, p)
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    refined = [refine_grain(g, res["observed"], arrays, p) for g in res["grains"]]
    t_refine = time.perf_counter() - t0
    for i, g in enumerate(refined):
        g["order"] = i
        g["orientation"] = lattice_rotation(g["u"], g["lattice"], p["LatticeConstant"])
    good = _dedup([g for g in refined if g["converged"]], p)
    truth = load_sweep_truth(folder)
    s = score_grains(truth, np.array([g["orientation"] for g in good]).reshape(-1, 3, 3),
                     np.array([g["pos"] for g in good]).reshape(-1, 3),
                     np.array([g["e_fab"] for g in good]).reshape(-1, 3, 3))
    found = np.isfinite(s["strain_err"])
    se = s["strain_err"][found]
    return {"grains": n, "seed": seed, "true_spots": int(len(truth["spots"])),
            "spots": int(len(spots)), "candidates": len(res["grains"]),
            "found": s["found"], "missed": s["missed"], "extra": s["extra"],
            "max_misorientation_deg": float(s["misorientation_deg"][found].max()),
            "max_position_um": float(s["position_um"][found].max()),
            "max_strain_err": float(se.max()), "rms_strain_err": float(np.sqrt(np.mean(se ** 2))),
            "spots_per_grain": float(np.mean([g.get("n_fit", g["n_matched"]) for g in good])),
            "seconds": {"spots": round(t_spots, 3), "index": round(t_index, 3),
                        "refine": round(t_refine, 3)}}


def _md(results: dict) -> str:
    labels = list(results["runs"])
    lines = ["# FF-HEDM at tens of grains: errors against the truth (`bench/ff_accuracy_bench.py`)",
             "", "Raw frames of the e2e test's sweep (360 frames of 192 x 192 px, rings "
             "{111}..{222}, strains up to 5x10^-4, overlapping spots) through stage 1's peak "
             "search and stage 2 (spots, indexing, refinement) in one process, scored against "
             "the truth. Targets: orientations 0.05 deg, positions 10 um, strains 10^-4.", ""]
    for label in labels:
        run = results["runs"][label]
        lines += [f"## {label}: {run['code']}", "", run["load"], "",
                  "| grains:seed | found / missed / extra | max misorientation (deg) | "
                  "max position error (um) | max strain error (10^-4) | rms strain error "
                  "(10^-4) | spots fitted per grain | indexing s | refinement s |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for c in run["cases"]:
            lines.append(f"| {c['grains']}:{c['seed']} | {c['found']} / {c['missed']} / "
                         f"{c['extra']} | {c['max_misorientation_deg']:.4f} | "
                         f"{c['max_position_um']:.2f} | {1e4 * c['max_strain_err']:.2f} | "
                         f"{1e4 * c['rms_strain_err']:.2f} | {c['spots_per_grain']:.0f} | "
                         f"{c['seconds']['index']:.1f} | {c['seconds']['refine']:.1f} |")
        lines.append("")
    lines += ["Errors over the grains found; a missed grain is counted in the second column. "
              "The machine is shared: the seconds follow the load average noted per run, and "
              "a run's first case includes compiling the kernels when numba's cache is cold.",
              ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=["12:1", "20:1", "20:2", "20:3", "30:1",
                                                     "30:2"])
    ap.add_argument("--label", default="after")
    ap.add_argument("--code", default=None, help="import hedm and kernels from this folder")
    ap.add_argument("--describe", default=None, help="what --code is (e.g. a commit)")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                   "mpistage-ff-accuracy"))
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.code) if args.code else ROOT)
    os.makedirs(args.work, exist_ok=True)
    cases = []
    with LoadSampler(interval=2.0) as load:
        for spec in args.cases:
            n, seed = (int(v) for v in spec.split(":"))
            cases.append(run_case(n, seed, args.work))
            print(json.dumps(cases[-1]), flush=True)
    path = os.path.join(ROOT, "bench", "results", "ff_accuracy.json")
    results = {"runs": {}}
    if os.path.exists(path):
        with open(path) as fh:
            results = json.load(fh)
    results["runs"][args.label] = {"code": args.describe or (args.code or "this checkout"),
                                   "load": load.text(), "load_summary": load.summary(),
                                   "cases": cases}
    with open(path, "w") as fh:
        json.dump(results, fh, indent=1)
    text = _md(results)
    with open(os.path.join(ROOT, "bench", "results", "ff_accuracy.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
