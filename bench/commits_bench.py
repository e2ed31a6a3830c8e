"""Two commits of the stager and the runtime, measured in turn in one run: is there a regression?

The machine is shared and its speed drifts, so figures from different days cannot
show a regression of a few percent. This benchmark exports two commits with
``git archive`` (default: ``40ee473``, the last commit before the layout of issue
13, against ``HEAD``) and runs the same measurements from each, alternating
old, new, old, new ... in one process, so both see the same machine:

* ``stage frames``: ``mpirun -n N python -m stager stage SPEC --method M`` on 512 MiB
  of 8 MiB files, N emulated nodes (default 2, method ``stripe``): the command's
  wall time (start-up, planning, transfer, records) and the report's transfer time;
* ``stage small``: the same on 2,000 files of 4 KiB;
* ``tasks``: the commit's own ``bench/tasks_bench.py --executor mpi`` under
  ``mpirun -n 4`` (rank 0 submits, 3 workers): no-op tasks/s, median of 3 runs
  inside the job, and a 2,000-leaf ``reduce_tree``.

For each measurement the result is the ratio new/old computed pair by pair (one
old and the next new run form a pair), with the median and range of the ratios:
a ratio near 1 whose range straddles 1 is noise. Both commits run in the same
virtual environment (``PYTHONPATH`` points at the exported tree), so only the
project's code differs. Sources in /tmp (page-cached), destinations in /dev/shm,
removed after every run.

Usage::

    .venv/bin/python bench/commits_bench.py [--old 40ee473] [--new HEAD] [--rounds 5]
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
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from loadavg import LoadSampler  # noqa: E402

BASE_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# as in stage_bench.py: shared-memory transfers need the single-copy (CMA) path
BASE_ENV.pop("OMPI_MCA_btl_vader_single_copy_mechanism", None)


def export(commit: str, dest: str) -> str:
    """``git archive COMMIT`` into DEST; returns the full hash."""
    full = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    os.makedirs(dest)
    arch = subprocess.Popen(["git", "archive", full], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dest], stdin=arch.stdout, check=True)
    if arch.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")
    return full


def make_files(src: str, count: int, size: int) -> None:
    os.makedirs(src)
    block = os.urandom(min(size, 1 << 20))
    for i in range(count):
        sub = os.path.join(src, f"d{i // 1000:02d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i:05d}.bin"), "wb") as f:
            left = size
            while left:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n


def env_for(tree: str) -> Dict[str, str]:
    env = dict(BASE_ENV, PYTHONPATH=tree)
    return env


def stage_once(tree: str, spec: str, dest: str, nodes: int, method: str) -> Dict[str, float]:
    report = os.path.join(os.path.dirname(spec), "report.json")
    cmd = ["mpirun", "-n", str(nodes), "--oversubscribe", sys.executable, "-m", "stager",
           "stage", spec, "--emulate-nodes", str(nodes), "--method", method,
           "--force", "--no-progress", "--json", report]
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=tree, env=env_for(tree), capture_output=True, text=True,
                       timeout=900)
    wall = time.perf_counter() - t
    shutil.rmtree(dest, ignore_errors=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} in {tree} failed:\n{r.stderr[-3000:]}")
    with open(report) as f:
        rep = json.load(f)
    # the stager's own figure: the transfer phase between two barriers
    return {"wall_s": wall, "transfer_s": rep["seconds"]}


def tasks_once(tree: str, n: int, leaves: int) -> Dict[str, float]:
    cmd = ["mpirun", "-n", "4", "--oversubscribe", sys.executable,
           os.path.join(tree, "bench", "tasks_bench.py"), "--executor", "mpi", "--n", str(n),
           "--repeats", "3", "--leaves", str(leaves), "--workers", "3"]
    r = subprocess.run(cmd, cwd=tree, env=env_for(tree), capture_output=True, text=True,
                       timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"tasks in {tree} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    res = json.loads(lines[-1][len("RESULT "):])
    if not res.get("reduce_ok", True):
        raise RuntimeError(f"tasks in {tree}: reduce_tree gave a wrong sum")
    return {"tasks_per_s": res["tasks_per_s_median"], "reduce_s": res["reduce_seconds"]}


def ratios(old: List[float], new: List[float]) -> Dict[str, float]:
    r = [b / a for a, b in zip(old, new)]
    return {"median": median(r), "min": min(r), "max": max(r)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", default="40ee473")
    p.add_argument("--new", default="HEAD")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--method", default="stripe")
    p.add_argument("--frames-mib", type=int, default=512)
    p.add_argument("--small-count", type=int, default=2000)
    p.add_argument("--tasks", type=int, default=5000)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="commits-bench-", dir="/tmp")
    shm = tempfile.mkdtemp(prefix="commits-bench-", dir="/dev/shm")
    try:
        trees = {k: os.path.join(work, k) for k in ("old", "new")}
        hashes = {k: export(getattr(args, k), trees[k]) for k in trees}
        make_files(os.path.join(work, "frames"), args.frames_mib // 8, 8 << 20)
        make_files(os.path.join(work, "small"), args.small_count, 4096)
        specs = {}
        for ds in ("frames", "small"):
            specs[ds] = os.path.join(work, f"{ds}.hook")
            with open(specs[ds], "w") as f:
                f.write(f"broadcast to {shm}/{ds}/%n files {{ {work}/{ds}/** }}\n")
        cases: Dict[str, Callable[[str], Dict[str, float]]] = {
            f"stage {ds}": (lambda tree, ds=ds: stage_once(
                tree, specs[ds], os.path.join(shm, ds), args.nodes, args.method))
            for ds in ("frames", "small")}
        cases["tasks"] = lambda tree: tasks_once(tree, args.tasks, 2000)
        runs: Dict[str, Dict[str, List[Dict[str, float]]]] = {
            c: {"old": [], "new": []} for c in cases}
        with LoadSampler(interval=2.0) as load:
            for fn in cases.values():  # warm-up: page cache, imports
                for k in ("old", "new"):
                    fn(trees[k])
            for rnd in range(args.rounds):
                for name, fn in cases.items():
                    order = ("old", "new") if rnd % 2 == 0 else ("new", "old")
                    for k in order:
                        runs[name][k].append(fn(trees[k]))
                print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
        summary = {}
        for name, r in runs.items():
            for fig in r["old"][0]:
                old = [x[fig] for x in r["old"]]
                new = [x[fig] for x in r["new"]]
                summary[f"{name}: {fig}"] = {"old_median": median(old), "new_median": median(new),
                                             "new_over_old": ratios(old, new)}
        result = {"date": time.strftime("%Y-%m-%d %H:%M"), "old": hashes["old"],
                  "new": hashes["new"], "rounds": args.rounds, "nodes": args.nodes,
                  "method": args.method, "frames_mib": args.frames_mib,
                  "small_count": args.small_count, "tasks": args.tasks,
                  "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
                  "load_average_before": load.before, "load_average_during": load.summary(),
                  "runs": runs, "summary": summary}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "commits.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["# Two commits in turn (bench/commits_bench.py)", "",
             f"Measured {result['date']}, {result['host']['cpus']} CPUs, load average "
             f"{load.before:.1f} before, {result['load_average_during'].get('max', 0):.1f} max "
             f"during. old = `{hashes['old'][:10]}`, new = `{hashes['new'][:10]}`; "
             f"{args.rounds} rounds, old and new alternating; staging with `{args.method}` at "
             f"{args.nodes} emulated nodes ({args.frames_mib} MiB of 8 MiB files; "
             f"{args.small_count} files of 4 KiB); tasks: `mpirun -n 4`, 3 workers, "
             f"{args.tasks} no-op tasks, 2,000-leaf reduce.", "",
             "| measurement | old (median) | new (median) "
             "| new/old pair by pair: median (min-max) |",
             "|---|---|---|---|"]
    for name, s in summary.items():
        r = s["new_over_old"]
        lines.append(f"| {name} | {s['old_median']:,.3g} | {s['new_median']:,.3g} | "
                     f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}) |")
    lines += ["", "Times (`_s`): lower is better, a ratio above 1 is slower. `tasks_per_s`: higher "
              "is better.", ""]
    with open(os.path.join(args.out, "commits.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
