"""NF-HEDM stage 2 at scale: measure the per-point cost on MIDAS's gold geometry, check the
staging model against this machine's measurements, project the gold example to 1,000 and
8,192 nodes.

Run:  .venv/bin/python bench/nf_projection.py [--points 30] [--screen-seeds 3000] [--reuse]
Writes bench/results/nf_projection.json and bench/results/nf_projection.md.
The model is written down in bench/nf_model.md; this script is its only implementation.

1. **Measure** (one core, numba compilation excluded): the gold geometry
   (``tests/data/midas_ps_au.txt``, MIDAS's ``NF_HEDM/Example/ps_au.txt``) with
   full-size binary images (2 x 1440 x 2048^2 px = 1.41 GiB, simulated from 15
   Voronoi grains in a 50 um disk), ``--points`` grid points fitted from FF-like
   seeds (0.05 deg off, plus 10 spurious), and the screening cost per seed on
   ``--screen-seeds`` random orientations (x 243,129 = MIDAS's NrOrientations of
   that example). ``--reuse`` takes the last measurement from the JSON instead.
2. **Check** the staging model against what this repository measured: the
   simulated-PFS staging runs (``results/pfs_stage.json``: ``stripe`` and ``naive``,
   2 GiB, N = 1..8) and the per-task reads of ``results/nf_read.json``.
3. **Project** S = 1.41 GiB, G = 10^5 grid points at N = 1,000 and 8,192 nodes of
   c cores, for two filesystem bandwidths (nominal, and what the paper's own
   8,192-node input time implies), staged versus every worker reading.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
RESULTS = os.path.join(ROOT, "bench", "results")
GOLD = os.path.join(ROOT, "tests", "data", "midas_ps_au.txt")
GOLD_SEEDS = 243_129            # NrOrientations of MIDAS's ps_au.txt
GOLD_BYTES = 2 * 1440 * 2048 * 2048 // 8
CHUNK = 32 * 2**20


# -- the model (bench/nf_model.md) ------------------------------------------------------------
@dataclass(frozen=True)
class Machine:
    """Parameters of a cluster (bytes/s and seconds)."""

    name: str
    cores_per_node: int
    b_fs: float          # aggregate shared-filesystem read bandwidth
    b_x: float           # per-node all-gather receive rate
    b_w: float           # per-node local write rate
    b_client: float      # one reader's best rate from the shared filesystem
    t0: float            # stager planning + start-up at 1 node
    t0_per_doubling: float
    metadata_s: float    # per metadata op (2 per read: lookup + open)


def t_stage(s: float, n: int, m: Machine) -> float:
    """Staged once (stripe): t_0 + max of the three pipelined rates + one chunk of fill."""
    start = m.t0 + m.t0_per_doubling * math.log2(max(n, 1))
    fill = min(s, CHUNK) * (1 / m.b_x + 1 / m.b_w)
    return start + max(s / m.b_fs, s / m.b_x, s / m.b_w) + fill


def t_read(s: float, n: int, m: Machine, readers_per_node: Optional[int] = None) -> float:
    """Every worker reads the whole file once from the shared filesystem (shared bandwidth)."""
    readers = n * (m.cores_per_node if readers_per_node is None else readers_per_node)
    return 2 * m.metadata_s + max(s / m.b_client, readers * s / m.b_fs)


def t_fit(g: int, n: int, cores: int, t_p: float, per_task: int = 1) -> float:
    """Fitting ``g`` independent points, ``per_task`` per task, over n * cores workers."""
    return math.ceil(g / (per_task * n * cores)) * per_task * t_p


# -- measuring t_p on the gold geometry --------------------------------------------------------
def measure_gold(points: int, screen_seeds: int) -> Dict[str, Any]:
    """Per-point fit cost (FF-seeded) and screening cost per seed on the gold geometry."""
    from kernels import (NFGeometry, ff_seeds, fit_points, grid_vertices, hex_grid,
                         misorientation, random_orientations, seed_spots, simulate_images,
                         voronoi_microstructure, within_radius)
    from kernels.nfconfidence import FitWorkspace
    from kernels.nffit import screen_kernel

    geo = NFGeometry.from_params(GOLD)
    assert geo.grid_size is not None and geo.rsample is not None
    micro = voronoi_microstructure(15, geo.rsample, seed=1)
    t0 = time.perf_counter()
    images = simulate_images(micro, geo)
    sim_s = time.perf_counter() - t0
    grid = within_radius(hex_grid(geo.grid_size, geo.rsample, geo.edge_length), geo.rsample)
    idx = np.random.default_rng(0).permutation(len(grid))[:points]
    ss = seed_spots(ff_seeds(micro, 0.05, n_spurious=10, seed=2), geo)
    fit_points(grid[idx[:1]], geo, images, ss)                       # compile / load
    t0 = time.perf_counter()
    fit = fit_points(grid[idx], geo, images, ss)
    fit_s = time.perf_counter() - t0
    ok = fit["seed"] >= 0
    mis = np.full(len(idx), 180.0)
    if ok.any():
        mis[ok] = misorientation(fit["u"][ok], micro.orientation_at(grid[idx[ok], 2:4]))
    rs = seed_spots(random_orientations(screen_seeds, 5), geo)
    work = FitWorkspace(geo, float(grid[0, 4]))
    fracs = np.empty(screen_seeds)
    verts = [np.ascontiguousarray(v) for v in grid_vertices(grid[idx[:5]])]
    screen_kernel(verts[0], work.rasterize, geo.arrays, images, rs.spots, rs.counts, fracs,
                  work.pix, work.base)
    t0 = time.perf_counter()
    for v in verts:
        screen_kernel(v, work.rasterize, geo.arrays, images, rs.spots, rs.counts, fracs,
                      work.pix, work.base)
    per_seed = (time.perf_counter() - t0) / (len(verts) * screen_seeds)
    t_ff = fit_s / len(idx)
    # the FF-seeded fit screens 25 seeds: the rest of its time is refinement
    refine = max(0.0, t_ff - len(ss.seeds) * per_seed)
    return {"geometry": "tests/data/midas_ps_au.txt (MIDAS NF_HEDM/Example/ps_au.txt)",
            "images_bytes": int(images.nbytes), "simulate_s": sim_s,
            "grid_points_in_disk": int(len(grid)), "points_fitted": int(len(idx)),
            "reflections": int(len(geo.hkls.ring)),
            "spots_per_orientation": float(ss.counts.mean()),
            "ff_seeds": int(len(ss.seeds)), "t_p_ff_s": t_ff,
            "ff_within_0.25": float(np.mean(mis < 0.25)),
            "ff_mean_evals": float(fit["n_evals"].mean()),
            "screen_seeds": screen_seeds, "screen_per_seed_s": per_seed,
            "t_p_uniform_s": GOLD_SEEDS * per_seed + refine, "uniform_seeds": GOLD_SEEDS}


# -- checking the model against this machine ---------------------------------------------------
def check_pfs_stage(path: str) -> List[Dict[str, Any]]:
    """Model vs the recorded simulated-PFS staging (2 GiB frames): stripe and naive."""
    if not os.path.exists(path):
        return []
    d = json.load(open(path))
    bw = d["config"]["bandwidth"]
    local = {r["nodes"]: r["wall_s"] for r in d.get("local_copy", [])
             if r["dataset"] == "frames"}
    size = next(x["bytes"] for x in d["datasets"] if x["name"] == "frames")
    rows = []
    for r in d["runs"]:
        if r["dataset"] != "frames" or r["method"] not in ("stripe", "naive"):
            continue
        n = r["nodes"]
        # one machine writes all N copies: its measured N-copy time is the b_w term
        if r["method"] == "stripe":
            pred = max(size / bw, local.get(n, 0.0))
            why = "max(S/B_fs, N local copies)"
        else:
            pred = n * size / bw
            why = "N S / B_fs"
        meas = r["stager_report"]["seconds"]
        rows.append({"method": r["method"], "nodes": n, "predicted_s": pred, "measured_s": meas,
                     "ratio": meas / pred, "model": why})
    return rows


def check_nf_read(path: str) -> List[Dict[str, Any]]:
    """Model vs the per-task reads over the simulated PFS (``bench/nf_read_bench.py``)."""
    if not os.path.exists(path):
        return []
    d = json.load(open(path))
    pfs = d["meta"].get("pfs")
    if not pfs:
        return []
    rows = []
    for r in d["results"]:
        if "simulated PFS" not in r["label"]:
            continue
        pred = 2 * pfs["latency"] + r["procs"] * r["bytes_per_read"] / pfs["bandwidth"]
        meas = r["first_task_s"]
        rows.append({"label": r["label"], "file_mib": r["size"] / 2**20, "procs": r["procs"],
                     "predicted_s": pred, "measured_s": meas, "ratio": meas / pred})
    return rows


# -- projection ---------------------------------------------------------------------------------
def project(t_p: Dict[str, float], machines: List[Machine], nodes=(1000, 8192),
            g: int = 100_000, s: float = GOLD_BYTES) -> List[Dict[str, Any]]:
    rows = []
    for m in machines:
        for n in nodes:
            for seeding, tp in t_p.items():
                fit = t_fit(g, n, m.cores_per_node, tp)
                st, rd = t_stage(s, n, m), t_read(s, n, m)
                rows.append({"machine": m.name, "nodes": n, "cores": n * m.cores_per_node,
                             "seeding": seeding, "t_p_s": tp, "stage_s": st,
                             "read_every_worker_s": rd, "fit_s": fit,
                             "staged_total_s": st + fit, "unstaged_total_s": rd + fit,
                             "speedup": (rd + fit) / (st + fit)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=30, help="gold grid points fitted")
    ap.add_argument("--screen-seeds", type=int, default=3000)
    ap.add_argument("--reuse", action="store_true", help="reuse the last gold measurement")
    ap.add_argument("--cores-per-node", type=int, default=16)
    ap.add_argument("--fs-gbps", type=float, default=240.0,
                    help="nominal shared-filesystem bandwidth, GB/s (Mira's GPFS as published)")
    ap.add_argument("--link-gbps", type=float, default=2.0, help="per-node all-gather GB/s")
    ap.add_argument("--local-write-gbps", type=float, default=2.0, help="RAM-disk write GB/s")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args(argv)
    out_json = os.path.join(args.out, "nf_projection.json")

    from loadavg import LoadSampler

    measured = None
    if args.reuse and os.path.exists(out_json):
        measured = json.load(open(out_json)).get("measured")
    with LoadSampler() as load:
        if measured is None:
            measured = measure_gold(args.points, args.screen_seeds)
            measured["load"] = load.text()
    # the paper: 577 MB to each of 8,192 nodes took 210 s of input without staging
    paper_bfs = 8192 * 577e6 / 210.0
    common = dict(cores_per_node=args.cores_per_node, b_x=args.link_gbps * 1e9,
                  b_w=args.local_write_gbps * 1e9, b_client=1e9, t0=0.6, t0_per_doubling=0.05,
                  metadata_s=0.002)
    machines = [Machine(f"nominal FS {args.fs_gbps:g} GB/s", b_fs=args.fs_gbps * 1e9, **common),
                Machine(f"contended FS {paper_bfs / 1e9:.1f} GB/s", b_fs=paper_bfs, **common)]
    t_p = {"FF seeds": measured["t_p_ff_s"],
           f"uniform {GOLD_SEEDS:,} seeds": measured["t_p_uniform_s"]}
    rows = project(t_p, machines)
    checks = {"pfs_stage": check_pfs_stage(os.path.join(RESULTS, "pfs_stage.json")),
              "nf_read": check_nf_read(os.path.join(RESULTS, "nf_read.json"))}
    demo_fit = None
    fit_json = os.path.join(RESULTS, "nf_fit.json")
    if os.path.exists(fit_json):
        demo_fit = json.load(open(fit_json))["results"]["numba"]["points_per_s"]
    # the paper's staged input at 8,192 nodes: 46.75 s for 577 MB; the model gives
    paper_stage_model = t_stage(577e6, 8192, machines[0])
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host_cpus": os.cpu_count(),
            "python": platform.python_version(), "load": load.summary(),
            "load_text": load.text(), "paper_implied_fs_bps": paper_bfs,
            "paper_staged_s": 46.75, "model_staged_s_for_paper": paper_stage_model,
            "command": "bench/nf_projection.py " + " ".join(argv or sys.argv[1:])}
    os.makedirs(args.out, exist_ok=True)
    with open(out_json, "w") as fh:
        json.dump({"meta": meta, "measured": measured, "machines": [asdict(m) for m in machines],
                   "checks": checks, "projection": rows, "demo_points_per_s": demo_fit},
                  fh, indent=1)
    write_md(os.path.join(args.out, "nf_projection.md"), meta, measured, machines, checks, rows,
             demo_fit)
    print(open(os.path.join(args.out, "nf_projection.md")).read())
    return 0


def write_md(path, meta, ms, machines, checks, rows, demo_fit) -> None:
    m0 = machines[0]
    lines = ["# NF-HEDM stage 2 at scale: measured per-point cost, model check, projection", "",
             f"Run {meta['date']} by `{meta['command'].strip()}`; {meta['load_text']} (2 CPUs, "
             "shared; provisional). Model: `bench/nf_model.md`.", "",
             "## Per-point cost on MIDAS's gold geometry (one core, measured)", "",
             f"{ms['geometry']}: {ms['reflections']} reflections, "
             f"{ms['spots_per_orientation']:.0f} spots per orientation on the detectors, "
             f"images {ms['images_bytes'] / 2**30:.2f} GiB; measured with "
             f"{ms.get('load', meta['load_text'])}.", "",
             f"* FF-seeded ({ms['ff_seeds']} seeds: 15 grains 0.05 deg off + 10 spurious): "
             f"**t_p = {ms['t_p_ff_s'] * 1e3:.1f} ms** per point ({ms['points_fitted']} points, "
             f"{100 * ms['ff_within_0.25']:.0f}% within 0.25 deg, "
             f"{ms['ff_mean_evals']:.0f} confidence evaluations each)",
             f"* screening: {ms['screen_per_seed_s'] * 1e6:.2f} us per seed "
             f"({ms['screen_seeds']:,} random seeds); with MIDAS's {ms['uniform_seeds']:,} "
             f"uniform seeds **t_p = {ms['t_p_uniform_s']:.2f} s** per point (the paper: ~30 s "
             "per point in 2014)"]
    if demo_fit:
        lines.append(f"* for comparison, the demo geometry: {demo_fit:.0f} points/s/core "
                     f"({1e3 / demo_fit:.1f} ms per point, `results/nf_fit.md`)")
    lines += ["", "## The model against this machine's measurements", ""]
    if checks["pfs_stage"]:
        lines += ["Staging 2 GiB of 8 MiB frames over the simulated PFS (400 MB/s), "
                  "`results/pfs_stage.json` (one machine writes all N copies, so its measured "
                  "N-copy time stands for S / b_w):", "",
                  "| method | N | model | predicted s | measured s | measured / predicted |",
                  "|---|---:|---|---:|---:|---:|"]
        lines += [f"| {r['method']} | {r['nodes']} | {r['model']} | {r['predicted_s']:.2f} | "
                  f"{r['measured_s']:.2f} | {r['ratio']:.2f} |" for r in checks["pfs_stage"]]
    if checks["nf_read"]:
        lines += ["", "A fitting task reading the images from the simulated PFS "
                  "(`results/nf_read.json`, first task of each of P concurrent workers; model "
                  "2 t_m + P S / B_fs):", "",
                  "| read | file MiB | P | predicted s | measured s | measured / predicted |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['label']} | {r['file_mib']:.1f} | {r['procs']} | {r['predicted_s']:.3f}"
                  f" | {r['measured_s']:.3f} | {r['ratio']:.2f} |" for r in checks["nf_read"]]
    lines += ["", "## Projection: MIDAS's gold example (S = 1.41 GiB, G = 10^5 points)", "",
              f"c = {m0.cores_per_node} cores per node, all-gather {m0.b_x / 1e9:g} GB/s and "
              f"RAM-disk writes {m0.b_w / 1e9:g} GB/s per node, one reader at most "
              f"{m0.b_client / 1e9:g} GB/s, one point per task. Two filesystems: nominal, and "
              f"contended at {meta['paper_implied_fs_bps'] / 1e9:.1f} GB/s = 8,192 x 577 MB / "
              "210 s, what the paper's unstaged 8,192-node input time implies if each node read "
              "the file once. 'every worker reads' is the baseline with task-level caching (one "
              "read per worker process, c per node); without that cache each task reads and the "
              "column multiplies by the tasks per worker.", "",
              "| filesystem | N | seeding | t_p s | stage s | every worker reads s | fit s | "
              "staged total s | unstaged total s | speed-up |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['machine']} | {r['nodes']:,} | {r['seeding']} | {r['t_p_s']:.3g} | "
              f"{r['stage_s']:.2f} | {r['read_every_worker_s']:.1f} | {r['fit_s']:.2f} | "
              f"{r['staged_total_s']:.1f} | {r['unstaged_total_s']:.1f} | "
              f"{r['speedup']:.1f}x |" for r in rows]
    lines += ["", "Read: with FF seeds the fit of 10^5 points is over in about a second at these "
              "node counts, so the input decides the turnaround; staging makes the input "
              "independent of N, reading from every worker grows with N c. With MIDAS's "
              "uniform seed list the fit dominates at 1,000 nodes and staging still removes "
              "the input term. The bandwidth model is a lower bound for both (see "
              "`bench/nf_model.md`, 'What the model leaves out'): for the paper's own staged "
              f"input (577 MB to 8,192 nodes) it gives {meta['model_staged_s_for_paper']:.1f} s "
              f"where the paper measured {meta['paper_staged_s']} s; start-up and collective "
              "latency at thousands of nodes, which this machine cannot measure, dominate "
              "there."]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
