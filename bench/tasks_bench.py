"""Task throughput of the workflow runtime: no-op tasks/s per executor, and a 10,000-leaf reduce.

Run from the repository root (takes about a minute)::

    .venv/bin/python bench/tasks_bench.py            # writes bench/results/tasks.{json,md}

The driver starts one subprocess per executor: ``mpirun -n 4`` of this file
for ``mpi`` (rank 0 submits, 3 worker ranks), and plain processes for
``local`` (a process pool of 3) and ``parsl`` (HighThroughputExecutor with a
LocalProvider, 3 workers). A no-op task is an ``@app`` returning its
argument; tasks/s counts from the first submission to the last result, over
the whole graph machinery (futures, dependency resolution, engine round trip).
The reduce is ``reduce_tree(add, range(10_000))``: 9,999 merge tasks.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.loadavg import LoadSampler  # noqa: E402
from workflows import app, foreach, reduce_tree  # noqa: E402


@app
def noop(x):
    return x


@app
def add(a, b):
    return a + b


def measure(ex, n: int, repeats: int, leaves: int) -> dict:
    """Run on the active executor ``ex``: throughput runs, then the big reduce."""
    foreach(noop, range(min(n, 200)))[-1].result()  # warm up workers and imports
    ex.runtime.wait()
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        futures = foreach(noop, range(n))
        for f in futures:
            f.result()
        rates.append(n / (time.perf_counter() - t))
    out = {"tasks": n, "repeats": repeats, "workers": ex.workers,
           "tasks_per_s_median": statistics.median(rates), "tasks_per_s_best": max(rates),
           "tasks_per_s_all": rates}
    if leaves:
        t = time.perf_counter()
        total = reduce_tree(add, range(leaves)).result()
        out["reduce_leaves"] = leaves
        out["reduce_seconds"] = time.perf_counter() - t
        out["reduce_ok"] = total == leaves * (leaves - 1) // 2
    return out


def worker_main(args) -> None:
    """One executor's measurement (inside mpirun for mpi); prints JSON on rank 0."""
    from workflows import executors

    if args.executor == "mpi":
        from mpi4py import MPI

        from workflows.executors import MPIExecutor

        with MPIExecutor(MPI.COMM_WORLD) as ex:
            if ex is not None:
                print("RESULT " + json.dumps(measure(ex, args.n, args.repeats, args.leaves)))
        return
    options: dict = {}
    if args.executor == "local":
        options = {"max_workers": args.workers}
    elif args.executor == "parsl":
        options = {"workers": args.workers}
    with executors.make(args.executor, **options) as ex:
        print("RESULT " + json.dumps(measure(ex, args.n, args.repeats, args.leaves)))


def run_one(name: str, n: int, repeats: int, leaves: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--executor", name, "--n", str(n),
           "--repeats", str(repeats), "--leaves", str(leaves), "--workers", "3"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if name == "mpi":
        cmd = [shutil.which("mpirun") or "mpirun", "-n", "4", "--oversubscribe"] + cmd
    with LoadSampler(interval=2.0) as load:
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=900)
        wall = time.perf_counter() - t
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name} benchmark failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result["process_wall_seconds"] = wall
    result["load_average_before"] = load.before
    result["load_average_during"] = load.summary()
    return result


def write_markdown(results: dict, path: str) -> None:
    rows = ["| executor | workers | no-op tasks | tasks/s (median of runs) | best | "
            "10,000-leaf reduce_tree (s) | load avg before | load avg during (max) |",
            "|---|---|---|---|---|---|---|---|"]
    for name, r in results["executors"].items():
        red = f"{r['reduce_seconds']:.2f}" if "reduce_seconds" in r else "not run"
        rows.append(f"| {name} | {r['workers']} | {r['tasks']} | {r['tasks_per_s_median']:,.0f} "
                    f"| {r['tasks_per_s_best']:,.0f} | {red} | {r['load_average_before']:.1f} | "
                    f"{r.get('load_average_during', {}).get('max', float('nan')):.1f} |")
    text = ["# Task throughput (bench/tasks_bench.py)", "",
            f"Measured {results['date']} on {results['host']['cpus']} CPUs "
            f"({results['host']['python']}), no other jobs running (the benchmark's own "
            "processes load the machine: 4 ranks on 2 cores); compare rows of this one run. "
            "mpi = `mpirun -n 4` (rank 0 submits, 3 worker ranks).", "",
            *rows, "",
            f"Target: >= 2,000 no-op tasks/s through mpi with 3 workers: "
            f"{'met' if results['mpi_target_met'] else 'NOT met'}.", ""]
    with open(path, "w") as fh:
        fh.write("\n".join(text))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--executor", default=None, help="(internal) measure this executor only")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--leaves", type=int, default=10000)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = p.parse_args()
    if args.executor:
        worker_main(args)
        return 0
    plan = [("mpi", 20000, 10000), ("local", 20000, 10000), ("parsl", 3000, 0),
            ("inline", 20000, 10000)]
    results = {"date": time.strftime("%Y-%m-%d %H:%M"),
               "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "executors": {}}
    for name, n, leaves in plan:
        print(f"measuring {name} ...", flush=True)
        results["executors"][name] = run_one(name, n, args.repeats, leaves)
        print(json.dumps(results["executors"][name]), flush=True)
    results["mpi_target_met"] = results["executors"]["mpi"]["tasks_per_s_median"] >= 2000
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tasks.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    write_markdown(results, os.path.join(args.out, "tasks.md"))
    print(open(os.path.join(args.out, "tasks.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
