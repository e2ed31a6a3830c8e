"""One large file to N emulated nodes: the single-large-file anomaly of issue 18.

The issue measured one 2 GiB (sparse) file to 2 emulated nodes at 7.0-11.8 s with
``stripe`` against 2.2-2.7 s with ``naive``. The cause (bench/README.md): the chunk
exchange between emulated leaders went through Open MPI's shared-memory transport,
and an ``Iallgatherv`` progresses only while both leaders are inside MPI at once --
one ``process_vm_readv`` per piece with the transport's single-copy mechanism (CMA),
~1,000 fragment round trips per 32 MiB chunk without it. On two shared cores the
leaders are rarely inside MPI together, so ``stripe`` had a heavy tail (up to 8x
``naive``), worst without CMA. Leaders on one host now exchange through a
shared-memory window (``stager.staging.transfer.shmem``), with one small reduction
per round.

This runs, interleaved in the same rounds so the load hits all alike:

* ``stripe`` -- the default (leaders on one host: the shared-memory window);
* ``stripe-messages`` -- ``STAGER_SHARED_EXCHANGE=0``: the ``Iallgatherv`` exchange,
  the only one before the fix (what leaders on different hosts use);
* ``naive`` -- every leader copies the file itself (no exchange);

and, with ``--no-single-copy``, ``stripe-messages`` again with
``OMPI_MCA_btl_vader_single_copy_mechanism=none``. Sources: a *fresh sparse* file
(a new one per run, as in the issue: its holes fill the page cache on first read)
and a *dense* file already in the page cache; N = 1, 2, 4. Reported per variant:
median, minimum and maximum transfer seconds (the stager's report; the tail is the
anomaly) and median CPU seconds of the whole job, with the load average.

Usage::

    .venv/bin/python bench/large_file_bench.py [--nodes 1 2 4] [--rounds 5] [--bytes 2G]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from statistics import median
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadavg import LoadSampler

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
ENV.pop("OMPI_MCA_btl_vader_single_copy_mechanism", None)  # as in stage_bench.py
VARIANTS = {
    "stripe": ("stripe", {}),
    "stripe-messages": ("stripe", {"STAGER_SHARED_EXCHANGE": "0"}),
    "bcast": ("bcast", {}),
    "naive": ("naive", {}),
}
NO_CMA = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def make_source(path: str, nbytes: int, sparse: bool) -> None:
    if os.path.exists(path):
        os.unlink(path)
    with open(path, "wb") as f:
        if sparse:
            f.truncate(nbytes)
            return
        import numpy as np
        rng = np.random.default_rng(5)
        left = nbytes
        while left:
            n = min(left, 64 << 20)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            left -= n
    with open(path, "rb") as f:  # into the page cache, like the other datasets
        while f.read(64 << 20):
            pass


def run_one(spec: str, n: int, method: str, out: str, extra: Dict[str, str]) -> Dict:
    env = dict(ENV, **extra)
    mca = [a for k in extra for a in ("-x", k)]
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", *mca, sys.executable, "-m", "stager",
           "stage",
           spec, "--emulate-nodes", str(n), "--method", method, "--force", "--no-progress",
           "--json", out]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
    with open(out) as f:
        rep = json.load(f)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": rep["seconds"], "cpu_seconds": cpu, "gbps": rep["delivered_gbps"],
            "load": os.getloadavg()[0],
            "exchange": rep["extra"].get("files", {}).get("exchange")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", default="2G", help="size of the file (default 2G)")
    ap.add_argument("--sources", nargs="+", default=["sparse", "dense"],
                    choices=["sparse", "dense"])
    ap.add_argument("--variants", nargs="+", default=["stripe", "stripe-messages", "naive"],
                    choices=sorted(VARIANTS))
    ap.add_argument("--no-single-copy", action="store_true",
                    help="also run every variant with OMPI_MCA_btl_vader_single_copy_mechanism"
                         "=none (no CMA: what containers often force)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from core.options import parse_size
    nbytes = parse_size(args.bytes)

    base = tempfile.mkdtemp(prefix="large-file-bench-", dir="/tmp")
    dest = tempfile.mkdtemp(prefix="large-file-bench-", dir="/dev/shm")
    variants = []
    for name in args.variants:
        method, env = VARIANTS[name]
        variants.append((name, method, env))
        if args.no_single_copy and method != "naive":
            variants.append((f"{name} (no CMA)", method, dict(env, **NO_CMA)))
    rows: List[Dict] = []
    load = LoadSampler()
    try:
        load.__enter__()
        for source in args.sources:
            src = os.path.join(base, f"big-{source}.bin")
            spec = os.path.join(base, f"{source}.hook")
            with open(spec, "w") as f:
                f.write(f"broadcast to {dest}/%n files {{\n  {src}\n}}\n")
            if source == "dense":
                make_source(src, nbytes, sparse=False)
            for n in args.nodes:
                samples: Dict[str, List[Dict]] = {v[0]: [] for v in variants}
                for _ in range(args.rounds):
                    for name, method, extra in variants:
                        if source == "sparse":
                            make_source(src, nbytes, sparse=True)  # fresh: cold holes
                        s = run_one(spec, n, method, os.path.join(base, "r.json"), extra)
                        shutil.rmtree(dest)
                        os.makedirs(dest)
                        samples[name].append(s)
                        print(f"{source} N={n} {name}: {s['seconds']:.2f} s, cpu "
                              f"{s['cpu_seconds']:.2f} s, load {s['load']:.1f}", flush=True)
                for name, ss in samples.items():
                    rows.append(dict(source=source, nodes=n, variant=name, bytes=nbytes,
                                     seconds=median(x["seconds"] for x in ss),
                                     min_seconds=min(x["seconds"] for x in ss),
                                     max_seconds=max(x["seconds"] for x in ss),
                                     cpu_seconds=median(x["cpu_seconds"] for x in ss),
                                     exchange=ss[0]["exchange"], samples=ss))
    finally:
        load.__exit__()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
    meta = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(),
                cpus=os.cpu_count(), rounds=args.rounds, load_average=load.summary(),
                load_text=load.text(), destination="/dev/shm",
                note="one rank per emulated node; variants interleaved in every round; medians")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "large_file.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=2)
    md = render_md(meta, rows)
    with open(os.path.join(args.out, "large_file.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


def render_md(meta: Dict, rows: List[Dict]) -> str:
    out = [f"# One large file to N emulated nodes ({meta['date']}, {meta['cpus']} cores)", "",
           f"{meta['note']}; {meta['rounds']} rounds; {meta['load_text']}. Transfer = the "
           "stager's reported seconds (median, and the range over the rounds: the tail is "
           "the anomaly); CPU = user + system seconds of the whole job. `stripe-messages` "
           "is the `Iallgatherv` exchange, the only one before the fix; `(no CMA)`: "
           "`OMPI_MCA_btl_vader_single_copy_mechanism=none`.", "",
           "| source | N | variant | exchange | transfer s (min-max) | CPU s | vs naive |",
           "|---|---|---|---|---|---|---|"]
    naive = {(r["source"], r["nodes"]): r["seconds"] for r in rows if r["variant"] == "naive"}
    for r in rows:
        base = naive.get((r["source"], r["nodes"]))
        ratio = f"{r['seconds'] / base:.2f}x" if base else "-"
        out.append(f"| {r['source']} {r['bytes'] >> 30} GiB | {r['nodes']} | {r['variant']} | "
                   f"{r['exchange']} | {r['seconds']:.2f} ({r['min_seconds']:.2f}-"
                   f"{r['max_seconds']:.2f}) | {r['cpu_seconds']:.2f} | {ratio} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
