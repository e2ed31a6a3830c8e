"""Staging a frame range of one HDF5 scan vs. staging the whole file (``stager stage``).

What it runs (defaults; all are options):

* a source scan ``scan.h5`` of ``--total`` frames of ``--ny`` x ``--nx``
  uint16 Poisson noise (mean 100, like a detector dark-ish frame), NeXus path
  ``/entry/data/data``, one chunk per frame, in three variants: ``raw`` (no
  filter) and ``gzip`` (shuffle + deflate level 1);
  and ``bslz4`` (bitshuffle+LZ4, HDF5 filter 32008, as an Eiger writes; needs
  hdf5plugin; every copy is checked by decoding it, see
  :mod:`stager.nodelocal.h5check`);
* ``files``: ``stager stage`` of a ``files`` block naming ``scan.h5`` (the
  ``stripe`` method: the whole file to every node);
* ``h5``: ``stager stage`` of an ``h5`` block naming
  ``scan.h5:/entry/data/data[0:FRAMES]`` (parallel HDF5 on the leaders, a
  node-local HDF5 file with the same chunks and filters);

each under ``mpirun -n RANKS`` with ``--emulate-nodes NODES``, ``--reps``
times alternating, destinations removed before each run. Recorded: the
command's wall time (``mpirun`` start to exit), the stager's own transfer time
(from ``--json``), and the node-local bytes (sum of ``st_blocks`` of every
file under the destinations, all nodes). Sources are in the page cache (just
written), so this compares the methods' own costs, not a cold shared
filesystem. Usage::

    .venv/bin/python bench/h5_bench.py --out bench/results/h5
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = os.path.join(ROOT, ".venv", "bin", "python")


def make_scan(path: str, total: int, ny: int, nx: int, variant: str) -> None:
    import h5py
    rng = np.random.default_rng(42)
    opts: dict = {}
    if variant == "gzip":
        opts = dict(compression="gzip", compression_opts=1, shuffle=True)
    elif variant == "bslz4":  # what an Eiger writes: bitshuffle + LZ4 (HDF5 filter 32008)
        import hdf5plugin
        opts = dict(hdf5plugin.Bitshuffle(cname="lz4"))
    with h5py.File(path, "w") as f:
        e = f.create_group("entry")
        e.attrs["NX_class"] = "NXentry"
        d = e.create_dataset("data/data", shape=(total, ny, nx), dtype=np.uint16,
                             chunks=(1, ny, nx), **opts)
        step = max(1, (64 << 20) // (ny * nx * 2))
        for i in range(0, total, step):
            n = min(step, total - i)
            d[i:i + n] = rng.poisson(100, size=(n, ny, nx)).astype(np.uint16)


def local_bytes(d: str) -> int:
    total = 0
    for root, _, files in os.walk(d):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def run_stage(spec: str, ranks: int, nodes: int, report: str) -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", PY, "-m", "stager", "stage", spec,
           "--emulate-nodes", str(nodes), "--json", report, "--force", "--no-progress"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with open(report) as f:
        rep = json.load(f)
    # planning included: for h5 blocks it opens the source and describes the selection;
    # the pipeline's times cover every block kind (the h5 extra has no times of its own)
    stager_s = rep["plan_seconds"] + rep["seconds"]
    return {"wall_s": wall, "stager_s": stager_s, "report": rep}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--total", type=int, default=1440, help="frames in the source file")
    ap.add_argument("--frames", type=int, default=720, help="frames selected by the h5 block")
    ap.add_argument("--ny", type=int, default=512)
    ap.add_argument("--nx", type=int, default=512)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default="raw,gzip,bslz4")
    ap.add_argument("--dir", default=None, help="work directory (default: a new one in /tmp)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "h5"),
                    help="writes OUT.json and OUT.md")
    a = ap.parse_args(argv)
    work = a.dir or tempfile.mkdtemp(prefix="h5bench-", dir="/tmp")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for variant in a.variants.split(","):
            src = os.path.join(work, "scan.h5")
            t0 = time.perf_counter()
            make_scan(src, a.total, a.ny, a.nx, variant)
            print(f"[{variant}] source {os.path.getsize(src) / 2**20:.0f} MiB written in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
            specs = {
                "files": f"broadcast to {work}/dest/%n files {{\n  {src}\n}}\n",
                "h5": (f"broadcast to {work}/dest/%n h5 {{\n"
                       f"  {src}:/entry/data/data[0:{a.frames}]\n}}\n"),
            }
            runs = {m: [] for m in specs}
            nbytes = {}
            for rep in range(a.reps):
                for method, text in specs.items():
                    spec = os.path.join(work, f"{method}.hook")
                    with open(spec, "w") as f:
                        f.write(text)
                    shutil.rmtree(os.path.join(work, "dest"), ignore_errors=True)
                    res = run_stage(spec, a.ranks, a.nodes, os.path.join(work, "r.json"))
                    nbytes[method] = local_bytes(os.path.join(work, "dest"))
                    runs[method].append(res)
                    print(f"[{variant}] {method} rep {rep}: wall {res['wall_s']:.2f} s, stager "
                          f"{res['stager_s']:.2f} s, node-local {nbytes[method] / 2**20:.0f} MiB",
                          file=sys.stderr)
                    if method == "h5" and rep == 0:
                        _check(src, os.path.join(work, "dest", "node0", "scan.h5"), a.frames)
            for method in specs:
                wall = [r["wall_s"] for r in runs[method]]
                st = [r["stager_s"] for r in runs[method]]
                rows.append({"variant": variant, "method": method,
                             "source_file_bytes": os.path.getsize(src),
                             "node_local_bytes_all_nodes": nbytes[method],
                             "wall_s_median": statistics.median(wall), "wall_s": wall,
                             "stager_s_median": statistics.median(st), "stager_s": st,
                             "last_report": runs[method][-1]["report"]})
    finally:
        if a.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    _write(a, rows)
    return 0


def _check(src: str, copy: str, frames: int) -> None:
    import h5py
    with h5py.File(src, "r") as s, h5py.File(copy, "r") as c:
        for i in (0, frames // 2, frames - 1):
            if not np.array_equal(s["/entry/data/data"][i], c["/entry/data/data"][i]):
                raise SystemExit(f"frame {i} of {copy} differs from the source")


def _write(a: argparse.Namespace, rows: list) -> None:
    setup = {"total_frames": a.total, "selected_frames": a.frames, "frame_shape": [a.ny, a.nx],
             "dtype": "uint16", "chunks": [1, a.ny, a.nx], "ranks": a.ranks,
             "emulated_nodes": a.nodes, "reps": a.reps,
             "h5_selection": f"/entry/data/data[0:{a.frames}]", "files_method": "stripe"}
    with open(a.out + ".json", "w") as f:
        json.dump({"setup": setup, "results": rows}, f, indent=2)
    lines = [
        "# HDF5 selection vs whole-file staging",
        "",
        f"Source: one HDF5 file, `/entry/data/data` = {a.total} frames of {a.ny}x{a.nx} uint16 "
        f"(Poisson noise, one chunk per frame); the `h5` block stages frames [0:{a.frames}]; "
        f"the `files` block stages the whole file (`stripe`). `mpirun -n {a.ranks}`, "
        f"{a.nodes} emulated nodes on one machine, {a.reps} runs each, medians. Node-local "
        "bytes are summed over all nodes (allocated blocks). Sources in page cache. "
        "`wall s`: mpirun start to exit; `stager s`: planning + transfer as reported by "
        "`stager stage --json`.",
        "",
        "| variant | method | source file | node-local (all nodes) | wall s | stager s | "
        "h5/files wall | h5/files stager | h5/files bytes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["variant"], r["method"]): r for r in rows}
    for r in rows:
        other = by.get((r["variant"], "files"))
        tr = r["wall_s_median"] / other["wall_s_median"] if other else float("nan")
        ts = r["stager_s_median"] / other["stager_s_median"] if other else float("nan")
        br = r["node_local_bytes_all_nodes"] / other["node_local_bytes_all_nodes"] if other else 0
        lines.append(f"| {r['variant']} | {r['method']} | {r['source_file_bytes'] / 2**20:.0f} MiB "
                     f"| {r['node_local_bytes_all_nodes'] / 2**20:.0f} MiB | "
                     f"{r['wall_s_median']:.2f} | {r['stager_s_median']:.2f} | {tr:.2f} | "
                     f"{ts:.2f} | {br:.2f} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
