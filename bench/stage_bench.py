"""Staging benchmark: every method at 1, 2 and 4 emulated nodes, against N parallel ``cp -r``.

For each dataset (1 GiB of 8 MiB files; 10,000 files of 4 KiB; one 2 GiB file, the
common HDF5 case) and each node count N (one rank per node, ``--emulate-nodes N``),
this runs

* ``mpirun -n N python -m stager stage SPEC --method M --json ...`` for
  M in stripe, readall, bcast, naive, and readall again with
  ``--mca io romio321`` (the MPI-IO component changes its amplification);
* N ``cp -r SRC DEST_i`` started at once (the physical limit of "N nodes
  each get a copy" on this one machine), timed from start to the last exit;

all in the same run, so the ratios are meaningful on a noisy shared machine.
Delivered GB/s is bytes written on all nodes / wall time (the stager's
report: transfer phase between two barriers; ``cp``: the whole command).
Amplification is the report's measured source bytes (``/proc/self/io``)
over dataset bytes. Sources live in /tmp (page-cached after creation),
destinations in /dev/shm (node-local storage stand-in), removed after each
run so at most N copies exist at once.

Emulated leaders share this host, so ``stripe`` and ``bcast`` exchange chunks through
a shared-memory window (``stager.staging.transfer.shmem``); the message exchange of
leaders on different hosts, and the single-large-file anomaly it had here, are
measured by ``large_file_bench.py``.

Usage::

    .venv/bin/python bench/stage_bench.py [--nodes 1 2 4] [--out bench/results]
        [--datasets 1GiB_8MiB_files 10000_4KiB_files 2GiB_1_file]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from statistics import median
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadavg import LoadSampler

HERE = os.path.dirname(os.path.abspath(__file__))
#: the datasets, in the order they are measured
DATASETS = ("1GiB_8MiB_files", "10000_4KiB_files", "2GiB_1_file")
ROOT = os.path.dirname(HERE)
METHODS = ["stripe", "readall", "bcast", "naive"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# Shared-memory transfers need the vader BTL's single-copy (CMA) path: with
# ``single_copy_mechanism=none`` (exported by the Makefile for tests) an 8 MiB
# Allgatherv runs at ~0.14 GB/s here instead of 1-3 GB/s.
ENV.pop("OMPI_MCA_btl_vader_single_copy_mechanism", None)


def make_dataset(base: str, name: str, count: int, size: int) -> str:
    src = os.path.join(base, name)
    os.makedirs(src)
    rng = np.random.default_rng(3)
    for i in range(count):
        sub = os.path.join(src, f"d{i // 1000:02d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i:05d}.bin"), "wb") as f:
            left = size
            while left:  # in 64 MiB pieces: a 2 GiB file needs no 2 GiB array
                n = min(left, 64 << 20)
                f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
                left -= n
    return src


def run_stage(spec: str, n: int, method: str, out_json: str, mca: List[str]) -> Dict:
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", *mca, sys.executable, "-m", "stager",
           "stage", spec, "--emulate-nodes", str(n), "--method", method, "--json", out_json,
           "--force", "--no-progress"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
    with open(out_json) as f:
        rep = json.load(f)
    rep["command_seconds"] = wall
    return rep


def run_cp(src: str, dests: List[str]) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["cp", "-r", src, d]) for d in dests]
    codes = [p.wait() for p in procs]
    dt = time.perf_counter() - t0
    if any(codes):
        raise RuntimeError(f"cp -r failed: {codes}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--big-bytes", type=int, default=1 << 30)
    ap.add_argument("--small-count", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3,
                    help="interleaved rounds; the table shows medians (default 3)")
    ap.add_argument("--big-file-bytes", type=int, default=2 << 30,
                    help="size of the single-file dataset (default 2 GiB)")
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    args = ap.parse_args()

    base = tempfile.mkdtemp(prefix="stage-bench-src-", dir="/tmp")
    dest_base = tempfile.mkdtemp(prefix="stage-bench-", dir="/dev/shm")
    sizes = {"1GiB_8MiB_files": (args.big_bytes // (8 << 20), 8 << 20),
             "10000_4KiB_files": (args.small_count, 4096),
             "2GiB_1_file": (1, args.big_file_bytes)}
    datasets = {name: make_dataset(base, name, *sizes[name]) for name in args.datasets}
    rows = []
    load = LoadSampler()
    try:
        load.__enter__()
        for dname, src in datasets.items():
            nbytes = sum(os.path.getsize(os.path.join(r, f))
                         for r, _, fs in os.walk(src) for f in fs)
            spec = os.path.join(base, f"{dname}.hook")
            with open(spec, "w") as f:
                f.write(f"broadcast to {dest_base}/%n files {{\n  {src}/**/*.bin\n}}\n")
            for n in args.nodes:
                variants = [(m, "default (ompio)", []) for m in METHODS]
                variants.append(("readall", "romio321", ["--mca", "io", "romio321"]))
                samples: Dict[tuple, List[Dict]] = {}
                # rounds interleave every variant with its own cp baseline, so a burst
                # of load from other users hits one round, not one method
                for _round in range(args.repeat):
                    dests = [os.path.join(dest_base, f"cp{i}") for i in range(n)]
                    cp_s = run_cp(src, dests)
                    for d in dests:
                        shutil.rmtree(d)
                    cp_gbps = n * nbytes / cp_s / 1e9
                    samples.setdefault(("cp -r x N", "-"), []).append(
                        dict(seconds=cp_s, delivered_gbps=cp_gbps, amplification=None,
                             vs_cp=1.0))
                    for method, io, mca in variants:
                        out_json = os.path.join(base, "report.json")
                        rep = run_stage(spec, n, method, out_json, mca)
                        shutil.rmtree(dest_base)
                        os.makedirs(dest_base)
                        samples.setdefault((method, io), []).append(
                            dict(seconds=rep["seconds"], delivered_gbps=rep["delivered_gbps"],
                                 amplification=rep["amplification"],
                                 command_seconds=rep["command_seconds"],
                                 vs_cp=rep["delivered_gbps"] / cp_gbps))
                for (method, io), ss in samples.items():
                    amps = [x["amplification"] for x in ss if x["amplification"] is not None]
                    row = dict(dataset=dname, nodes=n, method=method, mpi_io=io,
                               bytes_per_node=nbytes,
                               delivered_gbps=median(x["delivered_gbps"] for x in ss),
                               vs_cp=median(x["vs_cp"] for x in ss),
                               amplification=max(amps) if amps else None,
                               samples=ss)
                    rows.append(row)
                    amp = "-" if row["amplification"] is None else f"{row['amplification']:.2f}"
                    print(f"{dname} N={n} {method} [{io}]: {row['delivered_gbps']:.2f} GB/s "
                          f"({row['vs_cp']:.0%} of cp), amplification {amp}", flush=True)
    finally:
        load.__exit__()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(dest_base, ignore_errors=True)

    os.makedirs(args.out, exist_ok=True)
    meta = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(),
                cpus=os.cpu_count(), python=platform.python_version(),
                mpi=subprocess.run(["mpirun", "--version"], capture_output=True,
                                   text=True).stdout.splitlines()[0],
                source="/tmp (page cache)", destination="/dev/shm",
                load_average=load.summary(), load_text=load.text(),
                note=(f"one rank per emulated node; {args.repeat} interleaved rounds on a "
                      "2-core machine, medians shown"),
                exchange="emulated leaders: shared-memory window (stager.staging.transfer.shmem)")
    # a run of some datasets only does not replace the figures of a full run
    stem = "stage" if list(args.datasets) == list(DATASETS) else \
        "stage_" + "+".join(args.datasets)
    with open(os.path.join(args.out, f"{stem}.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=2)
    with open(os.path.join(args.out, f"{stem}.md"), "w") as f:
        f.write(render_md(meta, rows))
    print(render_md(meta, rows))
    return 0


def render_md(meta: Dict, rows: List[Dict]) -> str:
    out = [f"# Staging benchmark ({meta['date']}, {meta['cpus']} cores, {meta['mpi']})", "",
           f"Source {meta['source']}, destination {meta['destination']}; {meta['note']}; "
           f"{meta.get('load_text', 'load average not recorded')}.",
           "Delivered GB/s = bytes written on all nodes / wall time (median of the rounds); "
           "amplification = source bytes read (sum of /proc/self/io rchar over ranks) / dataset "
           "bytes (largest of the rounds); 'vs cp' = median over rounds of delivered / N parallel "
           "`cp -r` of the same round.", ""]
    out.append("| dataset | nodes | method | MPI-IO | GB/s | vs cp | amplification |")
    out.append("|---|---|---|---|---|---|---|")
    for r in rows:
        amp = "n/a" if r["amplification"] is None else f"{r['amplification']:.2f}"
        if r["method"].startswith("cp"):
            amp = f"{r['nodes']} (by construction)"
        out.append(f"| {r['dataset']} | {r['nodes']} | {r['method']} | {r['mpi_io']} | "
                   f"{r['delivered_gbps']:.2f} | {r['vs_cp']:.0%} | {amp} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
