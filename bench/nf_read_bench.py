"""NF-HEDM stage 2: the Read phase of a fitting task, node-local memory map vs shared reads.

Run:  .venv/bin/python bench/nf_read_bench.py [--sizes-mib 12.8,128] [--procs 1,2,4]
                                              [--tasks 4] [--no-pfs] [--points 64]
Writes bench/results/nf_read.json and bench/results/nf_read.md.

Every fitting task needs the whole reduced dataset (the binary images) at hand:
any voxel's spots may fall anywhere on any frame. The paper measured 10.8 s per
process to read the 577 MB dataset from GPFS before fitting (Wozniak et al.,
section V). Here P worker processes start together (a barrier) and each runs
``--tasks`` tasks; the Read phase of a task is the time from its start until the
images are an array it can fit on. Methods:

* ``mmap node-local, once per worker`` -- what ``hedm/nffit.py`` does: the first
  task on a worker ``np.load(..., mmap_mode="r")``'s the staged copy in /dev/shm
  (RAM disk) and keeps it in the per-worker cache; later tasks get it from the
  cache. Reported apart: faulting in *every* page of the map once (``touch all``,
  the most a worker can ever pay for it; a fit touches a fraction);
* ``read node-local, every task`` -- each task reads the staged copy whole;
* ``read shared, every task`` -- each task reads the file whole from the shared
  directory: the page cache of this machine (``shared (page cache)``, no
  contention at all: a lower bound), and the simulated parallel filesystem of
  ``bench/pfs`` (``shared (simulated PFS)``: 400 MB/s shared by all readers, 2 ms
  per metadata operation; the paper's situation, where the per-process time grows
  with the number of readers);
* ``read shared, once per worker`` -- the paper's own mitigation (task-level
  caching): the first task on each worker reads from the shared directory, the
  others reuse it.

The file sizes: the demo's binary images (2 x 360 x 288 x 64 bytes = 12.7 MiB)
and a larger file (its bytes repeated), so per-task times can be checked against
the staging model's ``S * P / B`` (``bench/nf_model.md``); MIDAS's gold example is
1.41 GiB. For scale, the same run times the fit of ``--points`` demo grid points
(one task's work at the demo's block size) on one core. Provisional on a shared
2-core machine: P > 2 processes share 2 cores.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import time

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from loadavg import LoadSampler  # noqa: E402

WORK = os.path.join(ROOT, "bench", "work", "nf_read")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _drop(path: str) -> None:
    """Ask the kernel to drop ``path`` from the page cache (best effort; tmpfs keeps it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError:
        pass


def _worker(method: str, path: str, tasks: int, touch: bool, barrier, out) -> None:
    barrier.wait()
    cache = None
    rows = []
    for k in range(tasks):
        t0 = time.perf_counter()
        if method == "mmap-cached":
            if cache is None:
                cache = np.load(path, mmap_mode="r")
            arr = cache
        elif method == "read-cached":
            if cache is None:
                cache = np.load(path)
            arr = cache
        else:                       # read every task
            arr = np.load(path)
        t1 = time.perf_counter()
        touch_s = None
        if touch and k == 0 and method == "mmap-cached":
            flat = arr.reshape(-1)
            int(flat[::PAGE].sum())          # one byte per page: every page faulted in
            touch_s = time.perf_counter() - t1
        rows.append((k, t1 - t0, touch_s, int(arr.nbytes)))
    out.put(rows)


def run_method(method: str, path: str, procs: int, tasks: int, touch: bool = False) -> dict:
    """``procs`` processes released together, ``tasks`` tasks each; per-task Read seconds."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(method, path, tasks, touch, barrier, out))
          for _ in range(procs)]
    t0 = time.perf_counter()
    for p in ps:
        p.start()
    rows = [out.get(timeout=1800) for _ in ps]
    for p in ps:
        p.join()
    wall = time.perf_counter() - t0
    first = [r[0][1] for r in rows]
    later = [x[1] for r in rows for x in r[1:]]
    touches = [r[0][2] for r in rows if r[0][2] is not None]
    return {"method": method, "procs": procs, "tasks": tasks, "wall_s": wall,
            "first_task_s": statistics.median(first), "first_task_max_s": max(first),
            "later_task_s": statistics.median(later) if later else None,
            "touch_all_s": statistics.median(touches) if touches else None,
            "bytes_per_read": rows[0][0][3]}


def make_file(folder: str, name: str, base: np.ndarray, size: int) -> str:
    """An .npy of about ``size`` bytes: ``base`` repeated along the frame axis."""
    path = os.path.join(folder, name)
    reps = max(1, int(round(size / base.nbytes)))
    if not os.path.exists(path) or os.path.getsize(path) < reps * base.nbytes:
        np.save(path, np.concatenate([base] * reps, axis=1) if reps > 1 else base)
    return path


def demo_images() -> np.ndarray:
    """The demo layer's binary images (what stage 1 recovers), made once under bench/work."""
    from hedm.nfsynth import make_layer

    folder = os.path.join(WORK, "layer")
    make_layer(folder, raw_frames=False)
    return np.load(os.path.join(folder, "nf_spots_binary.npy"))


def fit_seconds(points: int) -> dict:
    """One core fitting ``points`` demo grid points (compile excluded): one task's work."""
    from hedm.nfsynth import make_layer
    from hedm.nffit import read_seeds
    from kernels import NFGeometry, fit_points, read_grid, seed_spots

    folder = os.path.join(WORK, "layer")
    make_layer(folder, raw_frames=False)
    geo = NFGeometry.from_params(os.path.join(folder, "nf.params"))
    images = np.load(os.path.join(folder, "nf_spots_binary.npy"), mmap_mode="r")
    grid = read_grid(os.path.join(folder, "grid.txt"))
    ss = seed_spots(read_seeds(os.path.join(folder, "seeds.txt")), geo)
    fit_points(grid[:2], geo, images, ss)
    rows = grid[np.random.default_rng(0).permutation(len(grid))[:points]]
    t0 = time.perf_counter()
    fit_points(rows, geo, images, ss)
    dt = time.perf_counter() - t0
    return {"points": len(rows), "seconds": dt, "per_point_s": dt / len(rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mib", default="demo,128",
                    help="file sizes in MiB ('demo' = the demo's images), comma-separated")
    ap.add_argument("--procs", default="1,2,4", help="concurrent worker processes")
    ap.add_argument("--tasks", type=int, default=4, help="tasks per worker")
    ap.add_argument("--points", type=int, default=64, help="grid points of one fitting task")
    ap.add_argument("--no-pfs", action="store_true", help="skip the simulated PFS")
    ap.add_argument("--bandwidth", type=float, default=400e6, help="simulated PFS bytes/s")
    ap.add_argument("--latency", type=float, default=0.002, help="simulated PFS metadata op s")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    procs = [int(p) for p in args.procs.split(",")]

    base = demo_images()
    shared = os.path.join(WORK, "shared")          # the "shared filesystem" (disk, /bench/work)
    local = f"/dev/shm/nf-read-bench-{os.getpid()}"  # a node's RAM disk
    os.makedirs(shared, exist_ok=True)
    os.makedirs(local, exist_ok=True)
    files = []
    for s in args.sizes_mib.split(","):
        size = base.nbytes if s == "demo" else int(float(s) * 2**20)
        name = f"images_x{max(1, round(size / base.nbytes))}.npy"
        src = make_file(shared, name, base, size)
        dst = os.path.join(local, name)
        shutil.copyfile(src, dst)
        files.append((name, src, dst, os.path.getsize(src)))

    pfs_ctx = None
    if not args.no_pfs:
        try:
            from bench.pfs import PFSConfig, SimulatedPFS
            pfs_ctx = SimulatedPFS(shared, os.path.join(WORK, "mnt"),
                                   PFSConfig(bandwidth=args.bandwidth, latency=args.latency))
        except Exception as exc:                     # FUSE missing: say so in the results
            print(f"simulated PFS unavailable ({exc}); measuring without it", file=sys.stderr)
    results, counters = [], None
    try:
        with LoadSampler() as load:
            fit = fit_seconds(args.points)
            if pfs_ctx is not None:
                pfs_ctx.start()
            for name, src, dst, size in files:
                for p in procs:
                    plan = [("mmap node-local, once per worker", "mmap-cached", dst, True),
                            ("read node-local, every task", "read-each", dst, False),
                            ("read shared (page cache), every task", "read-each", src, False)]
                    if pfs_ctx is not None:
                        mnt = os.path.join(pfs_ctx.mountpoint, name)
                        plan += [("read shared (simulated PFS), every task", "read-each", mnt,
                                  False),
                                 ("read shared (simulated PFS), once per worker", "read-cached",
                                  mnt, False)]
                    for label, method, path, touch in plan:
                        if path == src:
                            np.load(src, mmap_mode="r").sum()     # page-cached: best case
                        r = run_method(method, path, p, args.tasks, touch)
                        r.update(label=label, file=name, size=size)
                        results.append(r)
                        print(f"{name:>22} P={p} {label:<46} first {r['first_task_s']:.4f} s"
                              f"  later {r['later_task_s'] or 0:.5f} s", flush=True)
    finally:
        if pfs_ctx is not None:
            counters = pfs_ctx.stop()
        shutil.rmtree(local, ignore_errors=True)

    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host_cpus": os.cpu_count(),
            "python": platform.python_version(), "load": load.summary(),
            "load_text": load.text(), "pfs": None if pfs_ctx is None else
            {"bandwidth": args.bandwidth, "latency": args.latency,
             "totals": (counters or {}).get("totals")},
            "fit_task": fit, "command": "bench/nf_read_bench.py " + " ".join(argv or sys.argv[1:])}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "nf_read.json"), "w") as fh:
        json.dump({"meta": meta, "results": results}, fh, indent=1)
    md = ["# NF-HEDM fitting task: the Read phase", "",
          f"Run {meta['date']} by `{meta['command'].strip()}`; {meta['load_text']} (2 CPUs, "
          "shared). P worker processes start together, each runs "
          f"{args.tasks} tasks; seconds per task (median over workers; `first` = each worker's "
          "first task). Simulated PFS: "
          + ("none" if pfs_ctx is None else
             f"{args.bandwidth / 1e6:.0f} MB/s shared by all readers, "
             f"{args.latency * 1e3:.0f} ms per metadata op") + ".", "",
          f"One fitting task for scale: {fit['points']} demo grid points in "
          f"{fit['seconds']:.2f} s on one core ({1e3 * fit['per_point_s']:.1f} ms per point).",
          "", "| file | P | method | first task s | later tasks s | touch all pages s |",
          "|---|---:|---|---:|---:|---:|"]
    for r in results:
        later = "-" if r["later_task_s"] is None else f"{r['later_task_s']:.5f}"
        touch = "-" if r["touch_all_s"] is None else f"{r['touch_all_s']:.4f}"
        md.append(f"| {r['file']} ({r['size'] / 2**20:.1f} MiB) | {r['procs']} | {r['label']} | "
                  f"{r['first_task_s']:.4f} | {later} | {touch} |")
    md += ["", "`touch all pages`: the first task of a worker faulting in every page of its "
           "memory map once (a fit touches only the pages its spots fall on); not part of the "
           "Read phase column. The staging model (`bench/nf_model.md`) predicts the simulated "
           "PFS rows as S x P / B + 2 metadata ops per read."]
    with open(os.path.join(args.out, "nf_read.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
