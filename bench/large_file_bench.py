"""One large file to N emulated nodes: the single-large-file anomaly of issue 18, before and after.

The issue measured one 2 GiB (sparse) file to 2 emulated nodes at 7.0-11.8 s with
``stripe`` against 2.2-2.7 s with ``naive``. The cause (py-spy, bench/README.md):
the transfer's rounds are lockstep, and the rank that finished its read and
write first waited in ``MPI_Waitall``, which spins in Open MPI's progress loop;
with ranks sharing 2 cores (emulated nodes, other users' jobs) the spinner took
the core its peer needed to write its copy. The engine now tests the requests
with a growing sleep in between (``stager.staging.transfer.engine._wait``).

This runs, interleaved in the same rounds so the load hits all alike:

* ``stripe`` -- this checkout;
* ``stripe-spin`` -- this checkout with the round's wait put back to
  ``MPI.Request.Waitall`` (a copy of the package, patched in a temporary
  directory and put first on ``PYTHONPATH``; the patch is checked to apply);
* ``naive`` -- every leader copies the file itself (no exchange, no waiting);

for a *fresh sparse* 2 GiB file (a new file per run, as in the issue: its holes
fill the page cache on first read) and a *dense* 2 GiB file already in the page
cache, at N = 1, 2, 4. Reported per variant: median transfer seconds (the
stager's report) and median CPU seconds of the whole job (user + system of
``mpirun`` and its ranks), with the load average.

Usage::

    .venv/bin/python bench/large_file_bench.py [--nodes 1 2 4] [--rounds 3] [--bytes 2G]
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
SPIN_FROM = "        _wait(reqs)\n"
SPIN_TO = "        MPI.Request.Waitall(reqs)\n"


def spin_copy(base: str) -> str:
    """A copy of this checkout's packages whose rounds wait with ``Waitall`` (spinning)."""
    dest = os.path.join(base, "spin")
    for pkg in ("stager", "hooks"):
        shutil.copytree(os.path.join(ROOT, pkg), os.path.join(dest, pkg),
                        ignore=shutil.ignore_patterns("__pycache__"))
    engine = os.path.join(dest, "stager", "staging", "transfer", "engine.py")
    with open(engine) as f:
        text = f.read()
    if text.count(SPIN_FROM) != 1:
        raise SystemExit(f"cannot make the spinning variant: {SPIN_FROM.strip()!r} not found "
                         "once in the engine")
    with open(engine, "w") as f:
        f.write(text.replace(SPIN_FROM, SPIN_TO))
    return dest


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


def run_one(spec: str, n: int, method: str, pythonpath: str, out: str) -> Dict:
    env = dict(ENV)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", sys.executable, "-m", "stager", "stage",
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
            "load": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bytes", default="2G", help="size of the file (default 2G)")
    ap.add_argument("--sources", nargs="+", default=["sparse", "dense"],
                    choices=["sparse", "dense"])
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from stager.options import parse_size
    nbytes = parse_size(args.bytes)

    base = tempfile.mkdtemp(prefix="large-file-bench-", dir="/tmp")
    dest = tempfile.mkdtemp(prefix="large-file-bench-", dir="/dev/shm")
    variants = [("stripe", "stripe", ""), ("stripe-spin", "stripe", spin_copy(base)),
                ("naive", "naive", "")]
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
                samples: Dict[str, List[Dict]] = {v: [] for v, _, _ in variants}
                for _ in range(args.rounds):
                    for name, method, path in variants:
                        if source == "sparse":
                            make_source(src, nbytes, sparse=True)  # fresh: cold holes
                        s = run_one(spec, n, method, path, os.path.join(base, "r.json"))
                        shutil.rmtree(dest)
                        os.makedirs(dest)
                        samples[name].append(s)
                        print(f"{source} N={n} {name}: {s['seconds']:.2f} s, cpu "
                              f"{s['cpu_seconds']:.2f} s, load {s['load']:.1f}", flush=True)
                for name, ss in samples.items():
                    rows.append(dict(source=source, nodes=n, variant=name, bytes=nbytes,
                                     seconds=median(x["seconds"] for x in ss),
                                     cpu_seconds=median(x["cpu_seconds"] for x in ss),
                                     samples=ss))
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
           "stager's reported seconds; CPU = user + system seconds of the whole job. "
           "`stripe-spin` is this code with the round's wait put back to `Waitall` "
           "(the code before the fix).", "",
           "| source | N | variant | transfer s | CPU s | vs naive (transfer) |",
           "|---|---|---|---|---|---|"]
    naive = {(r["source"], r["nodes"]): r["seconds"] for r in rows if r["variant"] == "naive"}
    for r in rows:
        ratio = r["seconds"] / naive[(r["source"], r["nodes"])]
        out.append(f"| {r['source']} 2 GiB | {r['nodes']} | {r['variant']} | "
                   f"{r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {ratio:.2f}x |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
