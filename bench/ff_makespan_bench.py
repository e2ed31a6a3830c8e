"""FF-HEDM stage 2's makespan: many uneven grain refinements on our runtime vs raw mpi4py.futures.

Run (2-6 minutes on 2 cores, with the load)::

    mpirun -n 4 --oversubscribe .venv/bin/python bench/ff_makespan_bench.py [--tasks 40]

Writes bench/results/ff_makespan.json and bench/results/ff_makespan.md.

The paper's Figure 13 setting scaled to this machine: one task per grain, task lengths
varying about 5x (there 5-25 s per grain, 4,109 grains on many nodes; here ``--tasks``
tasks of 0.2-2 s on 3 worker ranks). Rank 0 makes the test sweep's exact spots
(``bench/ff_grains_bench.py``: ``--grains`` grains of :data:`hedm.ffsynth.SWEEP_GEOMETRY`)
and indexes them once, untimed; each task is a real refinement
(:func:`hedm.ffrefine.refine_grain`) of one indexed grain, repeated ``reps`` times
(1-5, drawn once with a fixed seed and kept in the same order for both ways) to give the
paper's spread of lengths. Inside ONE ``mpirun``, interleaved repetitions of:

* **mpi4py**: ``mpi4py.futures.MPICommExecutor(comm, root=0)`` -- every rank enters, rank 0
  submits the plain function, the others serve (no workflow runtime);
* **runtime**: our ``MPIExecutor(comm)`` with the task as an ``@app`` (the whole graph
  machinery stage 2 uses: futures, dispatch, result routing).

The makespan runs from the first submission to the last result. Beside it: the sum of the
task times measured on the workers over the worker count (the ideal makespan of perfect
packing), the longest task, and the packing efficiency (that ideal over the makespan),
which divides out the load's stretching of the tasks themselves. A first pass of each way
(two short tasks per worker) warms the workers (numba kernels loaded, imports) and is not
counted.

Why ``MPICommExecutor`` and not ``MPIPoolExecutor``: under ``mpirun -n N python
script.py`` every rank runs the script, and each rank's ``MPIPoolExecutor`` tries to
*spawn* its own workers (``MPI_Comm_spawn``); on an oversubscribed Open MPI job the
spawned processes wait for slots that never come and the run hangs.
``MPIPoolExecutor`` needs ``mpirun -n N python -m mpi4py.futures script.py`` (the
workers are the job's other ranks) or a singleton run that may spawn;
``MPICommExecutor`` is the same pool on an existing communicator, as our executor is.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from workflows import app  # noqa: E402


def refine_task(grain, observed, p, reps):
    """``reps`` refinements of one grain; (seconds on the worker, converged, worker pid)."""
    from hedm.ffparams import ff_arrays
    from hedm.ffrefine import refine_grain

    t0 = time.perf_counter()
    arrays = ff_arrays(p, 360, (192, 192))
    out = {}
    for _ in range(reps):
        out = refine_grain(grain, observed, arrays, p)
    return time.perf_counter() - t0, bool(out.get("converged")), os.getpid()


@app
def refine_app(grain, observed, p, reps):
    return refine_task(grain, observed, p, reps)


def _mpi4py(comm, tasks):
    from mpi4py.futures import MPICommExecutor

    with MPICommExecutor(comm, root=0) as pool:
        if pool is None:
            return None
        t0 = time.perf_counter()
        futures = [pool.submit(refine_task, *t) for t in tasks]
        got = [f.result() for f in futures]
        return time.perf_counter() - t0, got


def _runtime(comm, tasks):
    from workflows.executors import MPIExecutor

    with MPIExecutor(comm) as ex:
        if ex is None:
            return None
        t0 = time.perf_counter()
        futures = [refine_app(*t) for t in tasks]
        got = [f.result() for f in futures]
        return time.perf_counter() - t0, got


def _case(args):
    """Rank 0: the indexed grains of the exact-spot sweep and the task list."""
    from ff_grains_bench import exact_spots

    from hedm.ffindex import index_spots

    p, arrays, spots, _ = exact_spots(args.grains, args.seed)
    res = index_spots(spots, arrays, p)
    grains, observed = res["grains"], res["observed"]
    rng = np.random.default_rng(args.seed)
    reps = rng.integers(1, 6, args.tasks)
    tasks = [(grains[i % len(grains)], observed, p, int(r)) for i, r in enumerate(reps)]
    return tasks, len(grains)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--grains", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2, help="measured passes of each way")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    from mpi4py import MPI

    from loadavg import LoadSampler

    comm = MPI.COMM_WORLD
    if comm.size < 2:
        print("run under mpirun -n 4 (rank 0 submits, the others serve)", file=sys.stderr)
        return 2
    tasks, n_grains = _case(args) if comm.rank == 0 else (None, 0)
    ways = {"mpi4py": _mpi4py, "runtime": _runtime}
    runs = {k: [] for k in ways}
    sampler = LoadSampler(interval=2.0) if comm.rank == 0 else None
    if sampler:
        sampler.__enter__()
    t_all = time.perf_counter()
    warm = [t[:3] + (1,) for t in tasks[: 2 * (comm.size - 1)]] if tasks else None
    for rep in range(args.repeats + 1):          # pass 0 (short tasks) warms the workers
        for name, way in (ways.items() if rep % 2 == 0 else reversed(ways.items())):
            got = way(comm, tasks if rep > 0 else warm)
            comm.Barrier()
            if got is not None and rep > 0:
                seconds, results = got
                busy = [r[0] for r in results]
                runs[name].append({"makespan_s": round(seconds, 3),
                                   "busy_s": round(sum(busy), 3),
                                   "longest_task_s": round(max(busy), 3),
                                   "converged": sum(r[1] for r in results),
                                   "workers_used": len({r[2] for r in results}),
                                   "efficiency": round(sum(busy) / (comm.size - 1) / seconds,
                                                       3)})
    if comm.rank != 0:
        return 0
    sampler.__exit__(None, None, None)
    workers = comm.size - 1
    out = {"case": {"tasks": args.tasks, "grains_indexed": n_grains,
                    "reps": [t[3] for t in tasks], "ranks": comm.size, "workers": workers,
                    "repeats": args.repeats,
                    "seconds_total": round(time.perf_counter() - t_all, 1)},
           "runs": runs, "load": sampler.summary(), "python": platform.python_version(),
           "cpus": os.cpu_count()}
    med = {k: statistics.median(r["makespan_s"] for r in v) for k, v in runs.items()}
    ideal = {k: statistics.median(r["busy_s"] / workers for r in v) for k, v in runs.items()}
    out["median_makespan_s"] = med
    out["ratio_runtime_over_mpi4py"] = round(med["runtime"] / med["mpi4py"], 3)
    out["efficiency"] = {k: statistics.median(r["efficiency"] for r in v)
                         for k, v in runs.items()}
    out["efficiency_ratio_runtime_over_mpi4py"] = round(
        out["efficiency"]["runtime"] / out["efficiency"]["mpi4py"], 3)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "ff_makespan.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    md = ["# FF-HEDM stage 2: makespan of uneven grain tasks (`bench/ff_makespan_bench.py`)", "",
          f"{args.tasks} refinement tasks ({n_grains} indexed grains, each task 1-5 "
          f"refinements), `mpirun -n {comm.size}` ({workers} workers) on {os.cpu_count()} "
          f"CPUs; {args.repeats} interleaved passes of each way after a warm-up pass; "
          f"{sampler.text()}.", "",
          "| way | makespan (median) | makespans | busy / workers (median) | longest task | "
          "efficiency per pass | efficiency (median) |", "|---|---|---|---|---|---|---|"]
    for k, label in (("mpi4py", "raw `mpi4py.futures` (MPICommExecutor)"),
                     ("runtime", "our runtime (MPIExecutor, `@app`)")):
        md.append(f"| {label} | {med[k]:.2f} s | "
                  f"{', '.join(str(r['makespan_s']) for r in runs[k])} | {ideal[k]:.2f} s | "
                  f"{max(r['longest_task_s'] for r in runs[k]):.2f} s | "
                  f"{', '.join(str(r['efficiency']) for r in runs[k])} | "
                  f"{out['efficiency'][k]:.3f} |")
    md += ["", f"Ratio runtime / mpi4py: median makespans "
               f"**{out['ratio_runtime_over_mpi4py']}**, median packing efficiencies "
               f"**{out['efficiency_ratio_runtime_over_mpi4py']}**. Efficiency = the pass's "
               "busy seconds (task times measured on the workers) / workers / makespan: 1 is "
               "perfect packing with no dispatch cost. On a shared machine the load stretches "
               "the tasks themselves from pass to pass (see busy / workers), and the makespan "
               "with them; the efficiency divides that out, so it is the figure that compares "
               "the two dispatchers.", ""]
    with open(os.path.join(ROOT, "bench", "results", "ff_makespan.md"), "w") as fh:
        fh.write("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
