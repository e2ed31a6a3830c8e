"""Kernel benchmark: numba kernels vs their scipy.ndimage equivalents, one core, one run.

Run:  .venv/bin/python bench/kernels_bench.py [--repeat 7] [--size 2048]
Writes bench/results/kernels.json and bench/results/kernels.md.

Inputs are 2048x2048 uint16 frames from the synthetic detector
(kernels.synth): an NF stack (background = per-pixel median of 9 frames) and
an FF frame with its dark.  Each case checks first that both sides give the
same answer, warms up (numba compile excluded), then times kernel and scipy
alternately ``repeat`` times in this one process (alternating so machine
load hits both alike) and reports min/median/max; the speed-up is the ratio
of medians.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.ndimage as ndi  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numba  # noqa: E402

from kernels import (PEAK_DTYPE, DetectorModel, FFParams, NFParams, NFWorkspace,  # noqa: E402
                     fill_holes, find_peaks, frames, label8, log_filter, median_background,
                     median_filter, reduce_frame, render_dark)

S8 = np.ones((3, 3), bool)
HERE = os.path.dirname(os.path.abspath(__file__))


def scipy_nf(frame, bg, p):
    """The NF per-frame reduction with scipy.ndimage (same definitions as kernels.nf)."""
    sub = np.clip(frame.astype(np.int64) - bg - p.offset, 0, None).astype(np.uint16)
    med = ndi.median_filter(sub, p.median_size, mode="nearest")
    log = ndi.gaussian_laplace(med.astype(float), p.log_sigma, mode="nearest",
                               radius=p.log_radius)
    neg = log < 0
    near = ndi.maximum_filter((~neg).astype(np.uint8), 3, mode="constant", cval=1)
    labels, n = ndi.label(ndi.binary_fill_holes(neg & near.astype(bool)), S8)
    r, c = np.nonzero(labels)
    return r, c, med[r, c], labels[r, c], n


def scipy_ff(frame, dark, p):
    """FF peak search with scipy.ndimage + NumPy, vectorised where it can be."""
    sub = np.maximum(frame.astype(np.float32) - dark, np.float32(0))
    labels, n = ndi.label(sub > np.float32(p.threshold), S8)
    sizes = np.bincount(labels.ravel(), minlength=n + 1)
    keep = (sizes >= p.min_pixels) & (sizes <= p.max_pixels)
    keep[0] = False
    maxpix = keep[labels] & (sub >= ndi.maximum_filter(sub, size=3, mode="nearest"))
    plab, npk = ndi.label(maxpix, S8)
    pr, pc = np.nonzero(plab)
    ids = plab[pr, pc]
    first = np.unique(ids, return_index=True)[1]          # raster-first pixel per peak
    loc_r, loc_c = pr[first], pc[first]
    region = labels[loc_r, loc_c]
    per_region = np.bincount(region, minlength=n + 1)
    rr, cc = np.nonzero(keep[labels])
    reg = labels[rr, cc]
    owner = np.zeros(len(rr), np.int64)
    lookup = np.zeros(n + 1, np.int64)
    lookup[region] = np.arange(npk)                        # right for single-peak regions
    owner[:] = lookup[reg]
    multi = np.flatnonzero(per_region > 1)
    for g in multi:                                        # split regions with several maxima
        sel = np.flatnonzero(reg == g)
        ks = np.flatnonzero(region == g)
        d = (rr[sel, None] - loc_r[ks]) ** 2 + (cc[sel, None] - loc_c[ks]) ** 2
        owner[sel] = ks[np.argmin(d, axis=1)]
    v = sub[rr, cc].astype(np.float64)
    out = np.zeros(npk, PEAK_DTYPE)
    out["peak"] = np.arange(1, npk + 1)
    out["region"], out["n_in_region"] = region, per_region[region]
    out["peak_row"], out["peak_col"] = loc_r, loc_c
    tot = np.bincount(owner, v, npk)
    out["integrated"] = tot
    out["row"] = np.bincount(owner, v * rr, npk) / tot
    out["col"] = np.bincount(owner, v * cc, npk) / tot
    out["n_pixels"] = np.bincount(owner, None, npk)
    mx = np.full(npk, -1.0)
    np.maximum.at(mx, owner, v)
    out["max_intensity"] = mx
    for f, fn, x, init in (("row_min", np.minimum, rr, 1 << 30), ("row_max", np.maximum, rr, -1),
                           ("col_min", np.minimum, cc, 1 << 30), ("col_max", np.maximum, cc, -1)):
        a = np.full(npk, init, np.int64)
        fn.at(a, owner, x)
        out[f] = a
    return out


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def compare(name, kernel, reference, repeat, target=None, note=""):
    kernel()
    reference()                                     # warm-up, compile excluded
    tk, tr = [], []
    for _ in range(repeat):                         # alternate: load hits both alike
        tk += timed(kernel, 1)
        tr += timed(reference, 1)
    stats = {
        "case": name, "note": note,
        "kernel_s": {"min": min(tk), "median": float(np.median(tk)), "max": max(tk)},
        "scipy_s": {"min": min(tr), "median": float(np.median(tr)), "max": max(tr)},
        "kernel_runs_s": tk, "scipy_runs_s": tr,
    }
    stats["speedup_median"] = stats["scipy_s"]["median"] / stats["kernel_s"]["median"]
    stats["speedup_range"] = [min(tr) / max(tk), max(tr) / min(tk)]
    stats["target"] = target
    stats["meets_target"] = None if target is None else stats["speedup_median"] >= target
    print(f"{name:38s} kernel {stats['kernel_s']['median'] * 1e3:8.1f} ms  scipy "
          f"{stats['scipy_s']['median'] * 1e3:8.1f} ms  x{stats['speedup_median']:.2f}", flush=True)
    return stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    n = args.size
    load0 = os.getloadavg()
    t_start = time.time()

    nf_model = DetectorModel(shape=(n, n), n_frames=9, frames_per_spot=2, n_spots=n,
                             amplitude=(30.0, 600.0), seed=1)
    stack = np.stack(list(frames(nf_model)))
    bg = median_background(stack)
    frame = stack[4]
    params = NFParams(offset=30, median_size=3, log_sigma=1.0, log_radius=4)
    work = NFWorkspace(frame.shape)
    sub = np.clip(frame.astype(np.int64) - bg - params.offset, 0, None).astype(np.uint16)
    med_sub = median_filter(sub, 3)
    ff_model = DetectorModel(shape=(n, n), n_frames=1, frames_per_spot=1, n_spots=4 * n,
                             amplitude=(40.0, 600.0), min_separation=6.0, seed=2)
    ff_frame = next(frames(ff_model))
    dark = np.mean([render_dark(ff_model, i) for i in range(4)], axis=0).astype(np.float32)
    ffp = FFParams(threshold=50, min_pixels=2)
    rng = np.random.default_rng(0)
    dense_mask = (rng.random((n, n)) < 0.5).astype(np.uint8)
    ff_mask = ((ff_frame.astype(np.float32) - dark) > 50).astype(np.uint8)

    # Both sides must agree before they are timed.
    spots = reduce_frame(frame, bg, params, work)
    r, c, v, lab, nl = scipy_nf(frame, bg, params)
    assert spots.n_labels == nl and np.array_equal(spots.rows, r)
    assert np.array_equal(spots.labels, lab) and np.array_equal(spots.intensity, v)
    a, b = find_peaks(ff_frame, dark, ffp), scipy_ff(ff_frame, dark, ffp)
    for f in ("peak", "region", "n_pixels", "peak_row", "row_min", "col_max"):
        assert np.array_equal(a[f], b[f]), f
    assert np.allclose(a["row"], b["row"]) and np.allclose(a["integrated"], b["integrated"])
    assert np.array_equal(median_filter(frame, 5), ndi.median_filter(frame, 5, mode="nearest"))

    R = args.repeat
    cases = [
        compare("median 3x3 (raw frame)", lambda: median_filter(frame, 3),
                lambda: ndi.median_filter(frame, 3, mode="nearest"), R, 3.0),
        compare("median 5x5 (raw frame)", lambda: median_filter(frame, 5),
                lambda: ndi.median_filter(frame, 5, mode="nearest"), R, 3.0),
        compare("LoG sigma=1 r=4 (raw frame, dense)", lambda: log_filter(frame, 1.0, 4),
                lambda: ndi.gaussian_laplace(frame.astype(float), 1.0, mode="nearest", radius=4),
                R, None, "every row non-zero: no skipping"),
        compare("LoG sigma=1 r=4 (NF, bg-subtracted)", lambda: log_filter(med_sub, 1.0, 4),
                lambda: ndi.gaussian_laplace(med_sub.astype(float), 1.0, mode="nearest", radius=4),
                R, None, ("rows whose whole window is zero are skipped; few here: "
                 "spots lie near most rows")),
        compare("label 8-conn (FF threshold mask)", lambda: label8(ff_mask),
                lambda: ndi.label(ff_mask, S8), R, 1.0,
                f"{ff_mask.mean() * 100:.1f}% foreground"),
        compare("label 8-conn (random 50% mask)", lambda: label8(dense_mask),
                lambda: ndi.label(dense_mask, S8), R, 1.0, "worst case for branch prediction"),
        compare("fill holes (NF edges)", lambda: fill_holes(work.edges),
                lambda: ndi.binary_fill_holes(work.edges), R),
        compare("NF per-frame reduction", lambda: reduce_frame(frame, bg, params, work),
                lambda: scipy_nf(frame, bg, params), R, 3.0,
                "subtract, median 3x3, LoG, edges, fill, label, sparse output"),
        compare("FF peak search", lambda: find_peaks(ff_frame, dark, ffp),
                lambda: scipy_ff(ff_frame, dark, ffp), R, None,
                f"{len(a)} peaks; scipy side vectorised with NumPy"),
    ]
    load1 = os.getloadavg()
    result = {
        "frame": [n, n], "dtype": "uint16", "repeat": R, "threads": 1,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t_start)),
        "wall_s": time.time() - t_start,
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                 "loadavg_before": load0, "loadavg_after": load1},
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "scipy": scipy.__version__, "numba": numba.__version__},
        "nf": {"spots_in_frame": int(spots.n_labels), "params": params.__dict__},
        "ff": {"peaks": int(len(a)), "params": ffp.__dict__},
        "cases": cases,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernels.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "kernels.md"), "w") as f:
        f.write(render_md(result))
    return 0


def render_md(res):
    lines = [
        f"# Kernel benchmark ({res['frame'][0]}x{res['frame'][1]} uint16, one core)",
        "",
        f"Run {res['started']} by `bench/kernels_bench.py`, {res['repeat']} alternating "
        f"repetitions per side in one process, numba compilation excluded. Host: "
        f"{res['host']['cpus']} CPUs shared with other jobs; load average "
        f"{res['host']['loadavg_before'][0]:.1f} before, {res['host']['loadavg_after'][0]:.1f} "
        "after. Times are min / median / max in ms; speed-up = scipy median / kernel median "
        "(range: worst to best pairing of min and max).",
        "",
        "| case | kernel ms | scipy ms | speed-up | range | target |",
        "|---|---|---|---|---|---|",
    ]
    for c in res["cases"]:
        k, s = c["kernel_s"], c["scipy_s"]
        tgt = "" if c["target"] is None else (
            f">= {c['target']:g}x {'met' if c['meets_target'] else 'MISSED'}")
        lines.append(
            f"| {c['case']} | {k['min'] * 1e3:.1f} / {k['median'] * 1e3:.1f} / "
            f"{k['max'] * 1e3:.1f} | {s['min'] * 1e3:.1f} / {s['median'] * 1e3:.1f} / "
            f"{s['max'] * 1e3:.1f} | {c['speedup_median']:.2f}x | "
            f"{c['speedup_range'][0]:.2f}-{c['speedup_range'][1]:.2f}x | {tgt} |")
    lines += ["", "Notes:"] + [f"- {c['case']}: {c['note']}" for c in res["cases"] if c["note"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
