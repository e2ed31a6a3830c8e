"""FF-HEDM stage 2's makespan: many uneven grain refinements on our runtime vs raw mpi4py.futures.

Run (2-6 minutes on 2 cores, with the load)::

    mpirun -n 4 --oversubscribe .venv/bin/python bench/ff_makespan_bench.py [--tasks 40]

Writes bench/results/ff_makespan.json and bench/results/ff_makespan.md.

``--indexing`` (no mpirun; 5-30 minutes with the load) measures instead stage 2 as a user
runs it on issue 42's case: a 20-grain sweep on a 512 x 512 detector with MIDAS's example
step sizes (:data:`GEOMETRY_512`: ``StepSizePos 50``, ``Rsample 300``, ``StepSizeOrient
0.2``; 565 candidate positions, 14,400 fibre orientations each), rendered by
:func:`hedm.ffsynth.make_sweep` and put through stage 1 once (untimed), then ``python -m
workflows run hedm/ffgrains.py --executor local --workers N`` for N in ``--workers``
(default 1 2 4): the makespan of each run (its wall time, start-up included), the
indexing and refinement spans of its run record, the speed-up over one worker, the load
average, and whether Grains.csv and Grains.h5 are byte-identical to the one-worker run's
(the waves' grains are the serial search's on any worker count). Writes
bench/results/ff_indexing.json and .md.

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


#: Issue 42's sweep: the test sweep's gold at 250 mm on 512 x 512 px of 200 um (MIDAS's
#: example detector of 2,048 px at 1 m, scaled), rings {111}..{331}, with MIDAS's example
#: step sizes and a sample of Rsample 300 um, Hbeam 200 um.
GEOMETRY_512 = {"Lsd": "250000", "BC": "256.3 255.7", "RhoD": "51000", "Rsample": "300",
                "Hbeam": "200", "StepSizePos": "50", "StepSizeOrient": "0.2",
                "BeamThickness": "200"}


def _geometry_512() -> str:
    from hedm.ffsynth import SWEEP_GEOMETRY

    lines = []
    for line in SWEEP_GEOMETRY.splitlines():
        key = line.split()[0]
        lines.append(f"{key} {GEOMETRY_512[key]}" if key in GEOMETRY_512 else line)
    return "\n".join(lines) + "\n"


def _flow(flow, out, workers, flow_args):
    """Run a flow as a user does: (wall seconds, CPU seconds of the run and its workers)."""
    import resource
    import subprocess

    env = dict(os.environ, STAGER_PROGRESS="0")
    cmd = [sys.executable, "-m", "workflows", "run", os.path.join(ROOT, "hedm", flow),
           "--executor", "local", "--workers", str(workers), "--out", out, "--", *flow_args]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)     # the workers, reaped, included
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return seconds, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def indexing(args) -> int:
    """Issue 42's FF stage 2 at 1, 2, 4 workers (module docstring, ``--indexing``)."""
    import hashlib
    import tempfile

    from loadavg import LoadSampler

    from hedm.ffsynth import load_sweep_truth, make_sweep, score_grains

    tmp = tempfile.mkdtemp(prefix="ff_indexing-")
    data = os.path.join(tmp, "data")
    t0 = time.perf_counter()
    info = make_sweep(data, grains=args.grains, seed=args.seed, shape=(512, 512),
                      geometry=_geometry_512())
    t_synth = time.perf_counter() - t0
    t_stage1, _ = _flow("ff.py", os.path.join(tmp, "s1"), 2, ["--params", info["params"]])
    peaks = os.path.join(tmp, "s1", "ff_peaks.h5")
    truth = load_sweep_truth(data)
    runs = []
    with LoadSampler(interval=2.0) as load:
        for w in args.workers:
            out = os.path.join(tmp, f"w{w}")
            with LoadSampler(interval=2.0) as run_load:
                seconds, cpu = _flow("ffgrains.py", out, w, ["--params", info["params"],
                                                             "--PeaksFile", peaks])
            with open(os.path.join(out, "ffgrains_run.json")) as fh:
                rec = json.load(fh)
            files = {}
            for name in ("Grains.csv", "Grains.h5"):
                with open(os.path.join(out, name), "rb") as fh:
                    files[name] = hashlib.sha256(fh.read()).hexdigest()
            g = np.loadtxt(os.path.join(out, "Grains.csv"), comments="%", ndmin=2)
            score = score_grains(truth, g[:, 1:10].reshape(-1, 3, 3), g[:, 10:13],
                                 np.zeros((len(g), 3, 3)))
            spans = {k: v for k, v in rec["phases"].items() if isinstance(v, dict)}
            runs.append({"workers": w, "makespan_s": round(seconds, 1), "cpu_s": round(cpu, 1),
                         # the makespan the CPU time gives on 2 idle cores (tasks packed)
                         "cpu_over_cores_s": round(cpu / min(w, 2), 1),
                         "index_s": rec["index"]["seconds"], "waves": rec["index"]["waves"],
                         "index_tasks": rec["index"]["tasks"],
                         "seeds_tried": rec["index"]["seeds_tried"],
                         "grains": rec["result"]["grains"], "found": score["found"],
                         "missed": score["missed"], "extra": score["extra"],
                         "refine_tasks": len(rec["refine"]), "phases": spans,
                         "files_sha256": files, "load": run_load.summary(),
                         "load_text": run_load.text()})
            print(json.dumps(runs[-1]), flush=True)
    base = runs[0]
    for r in runs:
        r["speedup"] = round(base["makespan_s"] / r["makespan_s"], 2)
        r["same_files_as_first"] = r["files_sha256"] == base["files_sha256"]
    out = {"case": {"grains": args.grains, "seed": args.seed, "shape": [512, 512],
                    "frames": 360, "geometry": GEOMETRY_512, "spots_rendered": info["spots"],
                    "synth_s": round(t_synth, 1), "stage1_s": round(t_stage1, 1)},
           "runs": runs, "load": load.summary(), "python": platform.python_version(),
           "cpus": os.cpu_count()}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "ff_indexing.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    md = ["# FF-HEDM stage 2 at MIDAS's step sizes, 1-4 workers "
          "(`bench/ff_makespan_bench.py --indexing`)", "",
          f"{args.grains} grains on a 512 x 512 px detector, 360 frames "
          f"({info['spots']} spots rendered), `StepSizePos 50`, `Rsample 300`, `Hbeam 200`, "
          "`StepSizeOrient 0.2` (565 positions x 14,400 fibre orientations per seed); stage 1 "
          f"once ({t_stage1:.0f} s, untimed); then `python -m workflows run hedm/ffgrains.py "
          f"--executor local --workers N` on {os.cpu_count()} CPUs; {load.text()}.", "",
          "| workers | makespan | speed-up | CPU (all processes) | CPU / min(workers, 2) "
          "| indexing | waves / tasks | seeds tried | grains (found / missed / extra) | "
          "files = 1 worker's | load during the run |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        md.append(f"| {r['workers']} | {r['makespan_s']:.0f} s | {r['speedup']} | "
                  f"{r['cpu_s']:.0f} s | {r['cpu_over_cores_s']:.0f} s | "
                  f"{r['index_s']:.0f} s | {r['waves']} / {r['index_tasks']} | "
                  f"{r['seeds_tried']} | {r['grains']} ({r['found']} / {r['missed']} / "
                  f"{r['extra']}) | {r['same_files_as_first']} | {r['load_text']} |")
    md += ["", "Makespan: the run's wall time, start-up and writing included. CPU: user + "
           "system seconds of the run and its worker processes (getrusage of the reaped "
           "children); over min(workers, 2) it is the makespan the same work takes on this "
           "machine's 2 cores when nobody else runs (tasks perfectly packed), the figure the "
           "load does not stretch. Indexing: the "
           "run record's span of the search (waves of 2 seeds per worker, the rotation-sense "
           "check beside the first). Byte-identical Grains.csv and Grains.h5 on every worker "
           "count: the grains of one serial search.", ""]
    with open(os.path.join(ROOT, "bench", "results", "ff_indexing.md"), "w") as fh:
        fh.write("\n".join(md))
    print("\n".join(md))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--indexing", action="store_true",
                    help="issue 42's 512 x 512 sweep at MIDAS's step sizes, 1-4 workers")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--grains", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2, help="measured passes of each way")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.indexing:
        if "--grains" not in (argv if argv is not None else sys.argv):
            args.grains = 20
        return indexing(args)
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
