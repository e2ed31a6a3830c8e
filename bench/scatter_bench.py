"""Scatter against broadcast staging: time, bytes each node holds, bytes read from the source.

For N = 1, 2, 4 emulated nodes (one rank per node), the same dataset (default
512 MiB of 8 MiB files in /tmp, page-cached) is staged to /dev/shm with a
``broadcast`` block and with a ``scatter`` block (one replica), alternating in
every round; medians over the rounds. Figures: the stager's transfer seconds and
the command's wall seconds, the largest node's bytes, the bytes written on all
nodes and the source bytes read (``/proc/self/io``). Scatter writes the dataset
once in all (each node ~1/N of it); broadcast writes it N times.

With ``--kind h5`` the dataset is one HDF5 file, a ``(frames, 256, 1024)`` uint16
stack of 512 KiB frames (one chunk per frame, unfiltered), staged as an ``h5``
selection: broadcast (every node gets every frame, the collective HDF5 path) against
``scatter ... h5`` (one contiguous frame range per node, read by its holder alone).
Results: ``results/scatter.md`` (files), ``results/scatter_h5.md`` (h5).

    .venv/bin/python bench/scatter_bench.py [--kind files|h5] [--mib 512] [--rounds 3]
                                            [--nodes 1 2 4]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from loadavg import LoadSampler  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
ENV.pop("OMPI_MCA_btl_vader_single_copy_mechanism", None)  # as stage_bench.py


def run(spec: str, n: int, report: str) -> dict:
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", sys.executable, "-m", "stager", "stage",
           spec, "--emulate-nodes", str(n), "--force", "--no-progress", "--json", report]
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    rep = json.load(open(report))
    return {"wall_s": wall, "transfer_s": rep["seconds"], "node_bytes_max": rep["bytes_per_node"],
            "bytes_written": rep["bytes_written"], "source_bytes_read": rep["source_bytes_read"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--kind", choices=("files", "h5"), default="files")
    p.add_argument("--replicas", type=int, default=1,
                   help="replicas of the scatter block (node counts below it are skipped)")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="scatter-bench-", dir="/tmp")
    shm = tempfile.mkdtemp(prefix="scatter-bench-", dir="/dev/shm")
    rows = []
    try:
        src = os.path.join(work, "src")
        os.makedirs(src)
        block = os.urandom(8 << 20)
        if a.kind == "files":
            for i in range(a.mib // 8):
                with open(os.path.join(src, f"frame{i:04d}.bin"), "wb") as f:
                    f.write(block[i % 97:] + block[:i % 97])
            what = f"{src}/*.bin"
        else:
            import h5py
            import numpy as np

            frames = a.mib * 2  # 512 KiB each
            with h5py.File(os.path.join(src, "stack.h5"), "w") as f:
                ds = f.create_dataset("/entry/data/data", (frames, 256, 1024), np.uint16,
                                      chunks=(1, 256, 1024))
                one = np.frombuffer(block[:512 << 10], np.uint16).reshape(256, 1024)
                for i in range(frames):
                    ds[i] = np.roll(one, i)
            what = f"{src}/stack.h5:/entry/data/data"
        specs = {}
        for mode in ("broadcast", "scatter"):
            specs[mode] = os.path.join(work, f"{mode}.hook")
            with open(specs[mode], "w") as f:
                rep = f" replicas {a.replicas}" if mode == "scatter" else ""
                f.write(f"{mode} to {shm}/%n {a.kind}{rep} {{ {what} }}\n")
        with LoadSampler(interval=2.0) as load:
            for n in [n for n in a.nodes if n >= a.replicas]:
                got: dict = {"broadcast": [], "scatter": []}
                for r in range(a.rounds):
                    order = ("broadcast", "scatter") if r % 2 == 0 else ("scatter", "broadcast")
                    for mode in order:
                        got[mode].append(run(specs[mode], n, os.path.join(work, "r.json")))
                        for d in os.listdir(shm):
                            shutil.rmtree(os.path.join(shm, d))
                for mode, runs in got.items():
                    rows.append({"nodes": n, "mode": mode, "runs": runs,
                                 **{k: median(x[k] for x in runs) for k in runs[0]
                                    if runs[0][k] is not None}})
        doc = {"date": time.strftime("%Y-%m-%d %H:%M"), "mib": a.mib, "rounds": a.rounds,
               "load_average_before": load.before, "load_average_during": load.summary(),
               "rows": rows}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    os.makedirs(a.out, exist_ok=True)
    name = ("scatter" if a.kind == "files" else "scatter_h5") + \
        (f"_r{a.replicas}" if a.replicas > 1 else "")
    data = "8 MiB files" if a.kind == "files" else "one HDF5 stack of 512 KiB frames (--kind h5)"
    doc["kind"] = a.kind
    doc["replicas"] = a.replicas
    json.dump(doc, open(os.path.join(a.out, f"{name}.json"), "w"), indent=1)
    lines = ["# Scatter against broadcast (bench/scatter_bench.py)", "",
             f"Command: `.venv/bin/python bench/scatter_bench.py --kind {a.kind} --mib {a.mib} "
             f"--rounds {a.rounds} --nodes {' '.join(map(str, a.nodes))} "
             f"--replicas {a.replicas}`", "",
             f"Measured {doc['date']}, {a.mib} MiB, {data}, {a.rounds} rounds alternating, "
             f"medians; load average {load.before:.1f} before, "
             f"{doc['load_average_during'].get('max', 0):.1f} max during (2 CPUs, shared).", "",
             "| nodes | block | transfer s | command s | largest node MiB | written, all nodes MiB "
             "| source read MiB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        # the h5 kind reads through HDF5, which the stager's source meter does not count
        src_read = r.get("source_bytes_read") if a.kind == "files" else None
        lines.append(f"| {r['nodes']} | {r['mode']} | {r['transfer_s']:.2f} | {r['wall_s']:.2f} | "
                     f"{r['node_bytes_max'] / 2**20:.0f} | {r['bytes_written'] / 2**20:.0f} | "
                     f"{'-' if src_read is None else f'{src_read / 2**20:.0f}'} |")
    open(os.path.join(a.out, f"{name}.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
