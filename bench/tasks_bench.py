"""Task throughput of the workflow runtime: executors, the mpi dispatchers, isolation's cost.

Run from the repository root (a few minutes)::

    .venv/bin/python bench/tasks_bench.py            # all three parts below
    .venv/bin/python bench/tasks_bench.py --only dispatch --n 5000 --repeats 1   # a quick look

1. **Executors** (``tasks.{json,md}``): no-op tasks/s on each executor and a
   10,000-leaf ``reduce_tree``.
2. **Dispatch** (``dispatch.{json,md}``, ``--only dispatch``): inside one
   ``mpirun`` per configuration (``-n 4`` and ``-n 8 --oversubscribe`` at 1, 2,
   4 emulated nodes), interleaved repetitions of: plain ``mpi4py.futures``
   (``MPICommExecutor.submit`` of a no-op, no workflow runtime), our
   ``central`` dispatcher and our ``nodes`` servers (both through ``@app`` +
   ``foreach``: the whole runtime), and ``central`` through ``executor.submit``
   (dispatcher only), and ``central`` with one task per message
   (``max_chunk=1``: what a central dispatcher does with long tasks, or with
   far more workers than queued tasks) or at most 4 (``max_chunk=4``: a third
   message rate, to check the model's line between the two); and the task
   arrays (``*-arrays``: ``foreach`` of ready values as one entry per chunk,
   ``docs/DISPATCH.md``) through ``central`` and ``nodes``, and through
   ``nodes`` with chunks of 4 (``max_chunk=4``, to separate the per-chunk from
   the per-item cost); the other runtime paths run with ``arrays=False``
   (one entry per task). Per run:
   tasks/s, rank-0 CPU seconds per task
   (``time.process_time`` of the root process, all its threads), CPU seconds
   per task summed over all ranks, and messages rank 0 handled per task (our
   link's counters; plain mpi4py sends one message per task and receives one
   per result by construction, ``mpi4py/futures/_lib.py: client_exec``).
   ``bench/dispatch_model.py`` fits the model of ``bench/dispatch_model.md`` to
   these points.
3. **Isolation** (part of ``tasks.json``, ``--only isolation``): seconds per
   no-op task run in the process, in the forked runner
   (``@app(isolate=True)``), and with a fresh ``fork`` per task.

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
import pickle
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


def noop_plain(x):
    return x


def _dispatch_one(method: str, comm, n: int, nodes: int) -> dict:
    """One measured run of ``method`` (collective); the root returns its figures."""
    from mpi4py import MPI  # noqa: F401

    cpu0 = time.process_time()
    out: dict = {}
    role = "root" if comm.rank == 0 else "worker"
    if method == "mpi4py":
        from mpi4py.futures import MPICommExecutor

        with MPICommExecutor(comm, root=0) as pool:
            if pool is not None:
                [f.result() for f in [pool.submit(noop_plain, i) for i in range(200)]]
                c, t = time.process_time(), time.perf_counter()
                futures = [pool.submit(noop_plain, i) for i in range(n)]
                for f in futures:
                    f.result()
                out = {"seconds": time.perf_counter() - t, "root_cpu": time.process_time() - c,
                       "root_messages": 2 * n, "root_bytes": None}
    else:
        from workflows.executors import MPIExecutor

        mode = "central" if method.startswith("central") else "nodes"
        chunk = {"central-1": 1, "central-4": 4, "nodes-arrays-4": 4}.get(method)
        from core.job import Job

        job = Job.from_comm(comm, f"emulate:{nodes}")
        mex = MPIExecutor(job, dispatch=mode, max_chunk=chunk, arrays="-arrays" in method)
        with mex as ex:
            if ex is not None:
                use_apps = not method.endswith("submit")
                if use_apps:
                    foreach(noop, range(200))[-1].result()
                    ex.runtime.wait()
                else:
                    [f.result() for f in [ex.submit(noop_plain, i) for i in range(200)]]
                link = ex._link
                m0, b0 = link.sent + link.received, link.bytes_sent + link.bytes_received
                c, t = time.process_time(), time.perf_counter()
                if use_apps:
                    futures = foreach(noop, range(n))
                else:
                    futures = [ex.submit(noop_plain, i) for i in range(n)]
                for f in futures:
                    f.result()
                out = {"seconds": time.perf_counter() - t, "root_cpu": time.process_time() - c,
                       "root_messages": link.sent + link.received - m0,
                       "root_bytes": link.bytes_sent + link.bytes_received - b0,
                       "workers": ex.workers, "servers": len(ex.roles.servers) - 1}
                if use_apps and ex.arrays:
                    from workflows.executors.mpi.arrays import array_chunks

                    out["array_k"] = array_chunks(n, ex.workers, chunk or 64)[0]
        role = mex.roles.role(comm.rank) if mex.roles else role
        job.free()
    cpu = time.process_time() - cpu0
    cpus = comm.gather((role, cpu), root=0)
    if comm.rank != 0:
        return {}
    servers_cpu = sum(c for r, c in cpus if r == "server")
    out.update(method=method, tasks=n, tasks_per_s=n / out["seconds"],
               root_cpu_per_task_us=1e6 * out["root_cpu"] / n,
               root_messages_per_task=out["root_messages"] / n,
               all_ranks_cpu_per_task_us=1e6 * sum(c for _, c in cpus) / n,
               servers_cpu_seconds=servers_cpu)
    out.setdefault("workers", comm.size - 1)
    out.setdefault("servers", 0)
    return out


DISPATCH_METHODS = ("mpi4py", "central", "nodes", "central-submit", "central-1", "central-4",
                    "central-arrays", "nodes-arrays", "nodes-arrays-4")


def dispatch_main(args) -> None:
    """Inside one mpirun: interleaved repetitions of every method; JSON on rank 0.

    A first round of every method with 2,000 tasks is not recorded: the first
    use of each path in a process pays imports and first-touch costs.
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for method in DISPATCH_METHODS:
        comm.Barrier()
        _dispatch_one(method, comm, min(args.n, 2000), args.nodes)
    runs = []
    for rep in range(args.repeats):
        for method in DISPATCH_METHODS:
            comm.Barrier()
            r = _dispatch_one(method, comm, args.n, args.nodes)
            if comm.rank == 0:
                r["repeat"] = rep
                runs.append(r)
    if comm.rank == 0:
        print("RESULT " + json.dumps(runs))


def isolation_costs(n: int) -> dict:
    """Seconds per no-op task: in process, in the isolated runner, a fork per task."""
    from workflows.limits import Limits
    from workflows.tasks import FunctionRef, TaskCall, execute

    ref = FunctionRef.of(noop_plain)
    plain = TaskCall("noop", ref, (1,), {})
    isolated = TaskCall("noop", ref, (1,), {}, Limits(isolate=True))
    execute(isolated)  # fork the runner once
    out = {}
    for label, call in (("in_process", plain), ("isolated_runner", isolated)):
        t = time.perf_counter()
        for _ in range(n):
            execute(call)
        out[label] = (time.perf_counter() - t) / n
    t = time.perf_counter()
    m = max(1, n // 10)
    for _ in range(m):  # what a fresh process per task would cost (not used)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, pickle.dumps(execute(plain).value))
            os._exit(0)
        os.close(w)
        os.read(r, 1 << 16)
        os.close(r)
        os.waitpid(pid, 0)
    out["fork_per_task"] = (time.perf_counter() - t) / m
    out["tasks"] = n
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
    for name, r in results.get("executors", {}).items():
        red = f"{r['reduce_seconds']:.2f}" if "reduce_seconds" in r else "not run"
        rows.append(f"| {name} | {r['workers']} | {r['tasks']} | {r['tasks_per_s_median']:,.0f} "
                    f"| {r['tasks_per_s_best']:,.0f} | {red} | {r['load_average_before']:.1f} | "
                    f"{r.get('load_average_during', {}).get('max', float('nan')):.1f} |")
    text = ["# Task throughput (bench/tasks_bench.py)", "",
            f"Measured {results['date']} on {results['host']['cpus']} CPUs "
            f"({results['host']['python']}); the benchmark's own processes load the machine "
            "(4 ranks on 2 cores) and the load average columns say what else did; compare rows "
            "of this one run. mpi = `mpirun -n 4` (rank 0 submits, 3 worker ranks, central "
            "dispatcher; the dispatchers are compared in `dispatch.md`).", ""]
    if len(rows) > 2:
        text += [*rows, "", f"Target: >= 2,000 no-op tasks/s through mpi with 3 workers: "
                 f"{'met' if results.get('mpi_target_met') else 'NOT met'}.", ""]
    iso = results.get("isolation")
    if iso:
        base = iso["in_process"]
        text += ["## Isolation's cost per task (`@app(isolate=True)`)", "",
                 f"{iso['tasks']:,} no-op tasks through `workflows.tasks.execute` in one process "
                 f"(load average {iso['load_average']['before']:.1f} before); the isolated "
                 "runner is what `isolate=True` uses, a fork per task is what it avoids.", "",
                 "| how | µs per task | vs in process |", "|---|---|---|"]
        for key, label in (("in_process", "in the worker's process"),
                           ("isolated_runner", "isolated: forked runner, pipe round trip"),
                           ("fork_per_task", "a fresh fork per task (not used)")):
            text.append(f"| {label} | {1e6 * iso[key]:,.1f} | {iso[key] / base:,.1f}x |")
        text.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(text))


DISPATCH_CONFIGS = ((4, 1), (4, 2), (8, 1), (8, 2), (8, 4))


def run_dispatch(n: int, repeats: int, configs=DISPATCH_CONFIGS) -> dict:
    """One mpirun per (ranks, emulated nodes); methods interleaved inside it."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = []
    for ranks, nodes in configs:
        cmd = [shutil.which("mpirun") or "mpirun", "-n", str(ranks), "--oversubscribe",
               sys.executable, os.path.abspath(__file__), "--dispatch-job", "--n", str(n),
               "--repeats", str(repeats), "--nodes", str(nodes)]
        print(f"dispatch: -n {ranks}, {nodes} emulated node(s) ...", flush=True)
        with LoadSampler(interval=2.0) as load:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=1800)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"dispatch -n {ranks} nodes {nodes} failed ({proc.returncode}):"
                               f"\n{proc.stderr[-3000:]}")
        runs = json.loads(lines[-1][len("RESULT "):])
        out.append({"ranks": ranks, "nodes": nodes, "runs": runs,
                    "load_average": load.summary(), "summary": summarise_dispatch(runs)})
    return {"date": time.strftime("%Y-%m-%d %H:%M"),
            "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "tasks": n, "repeats": repeats, "configs": out}


def summarise_dispatch(runs: list) -> dict:
    """Per method: medians, and its ratio to plain mpi4py over the same repetitions."""
    by: dict = {}
    for r in runs:
        by.setdefault(r["method"], []).append(r)
    base = {r["repeat"]: r["tasks_per_s"] for r in by.get("mpi4py", [])}
    out = {}
    for method, rs in by.items():
        ratios = [r["tasks_per_s"] / base[r["repeat"]] for r in rs if r["repeat"] in base]
        out[method] = {
            "tasks_per_s_median": statistics.median(r["tasks_per_s"] for r in rs),
            "tasks_per_s_min": min(r["tasks_per_s"] for r in rs),
            "tasks_per_s_max": max(r["tasks_per_s"] for r in rs),
            "vs_mpi4py_median": statistics.median(ratios) if ratios else None,
            "root_cpu_per_task_us": statistics.median(r["root_cpu_per_task_us"] for r in rs),
            "all_ranks_cpu_per_task_us": statistics.median(
                r["all_ranks_cpu_per_task_us"] for r in rs),
            "root_messages_per_task": statistics.median(
                r["root_messages_per_task"] for r in rs),
            "workers": rs[0]["workers"], "servers": rs[0]["servers"],
        }
    return out


LABELS = {"mpi4py": "plain mpi4py.futures (MPICommExecutor.submit)",
          "central": "central dispatcher (@app + foreach, one entry per task)",
          "nodes": "node task servers (@app + foreach, one entry per task)",
          "central-arrays": "central dispatcher, task arrays (@app + foreach, chunks of 64)",
          "nodes-arrays": "node task servers, task arrays (@app + foreach, chunks of 64)",
          "nodes-arrays-4": "node task servers, task arrays of 4 (max_chunk=4)",
          "central-submit": "central dispatcher (executor.submit, no runtime)",
          "central-1": "central dispatcher, one task per message (max_chunk=1)",
          "central-4": "central dispatcher, batches of at most 4 (max_chunk=4)"}


def write_dispatch_markdown(results: dict, path: str) -> None:
    text = ["# Dispatch: tasks/s and rank-0 cost per task (bench/tasks_bench.py --only dispatch)",
            "",
            f"Measured {results['date']} on {results['host']['cpus']} CPUs, "
            f"{results['tasks']:,} no-op tasks per run, {results['repeats']} interleaved "
            "repetitions of every method inside one `mpirun` per row group (so ratios compare "
            "runs made moments apart). Ranks are oversubscribed on the 2 cores: every rank, "
            "root included, competes for CPU, so *tasks/s* is a property of this machine; "
            "*rank-0 CPU per task* and *messages per task* are what carry over (see "
            "`bench/dispatch_model.md`). Provisional figures: the machine was shared "
            "(load average column).", ""]
    targets = []
    for cfg in results["configs"]:
        load = cfg["load_average"]
        text.append(f"## `mpirun -n {cfg['ranks']}`, {cfg['nodes']} emulated node(s) "
                    f"(load average {load['before']:.1f} before, {load['min']:.1f}-"
                    f"{load['max']:.1f} during)")
        text += ["", "| method | workers + servers | tasks/s median (min-max) | vs mpi4py "
                 "(median of paired runs) | rank-0 CPU µs/task | all ranks CPU µs/task | "
                 "rank-0 messages/task |", "|---|---|---|---|---|---|---|"]
        for method, m in cfg["summary"].items():
            ratio = m["vs_mpi4py_median"]
            text.append(
                f"| {LABELS.get(method, method)} | {m['workers']} + {m['servers']} | "
                f"{m['tasks_per_s_median']:,.0f} ({m['tasks_per_s_min']:,.0f}-"
                f"{m['tasks_per_s_max']:,.0f}) | {ratio:.2f} | "
                f"{m['root_cpu_per_task_us']:.1f} | {m['all_ranks_cpu_per_task_us']:.1f} | "
                f"{m['root_messages_per_task']:.3f} |")
        c = cfg["summary"].get("central", {}).get("vs_mpi4py_median")
        if c is not None:
            targets.append((cfg["ranks"], cfg["nodes"], c))
        text.append("")
    text.append("Target (issue 17): the single-dispatcher path >= 90 % of plain mpi4py.futures "
                "on the same ranks in the same run:")
    for ranks, nodes, c in targets:
        text.append(f"- `-n {ranks}`, {nodes} node(s): {100 * c:.0f} % "
                    f"({'met' if c >= 0.9 else 'NOT met'})")
    text.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(text))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--executor", default=None, help="(internal) measure this executor only")
    p.add_argument("--dispatch-job", action="store_true", help="(internal) inside mpirun")
    p.add_argument("--only", choices=("executors", "dispatch", "isolation"), default=None,
                   help="run one part only (default: all)")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--leaves", type=int, default=10000)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--nodes", type=int, default=1, help="(internal) emulated nodes")
    p.add_argument("--configs", default=None,
                   help="dispatch: RANKSxNODES,... (default: 4x1,4x2,8x1,8x2,8x4)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = p.parse_args()
    if args.executor:
        worker_main(args)
        return 0
    if args.dispatch_job:
        dispatch_main(args)
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.only in (None, "dispatch"):
        configs = DISPATCH_CONFIGS
        if args.configs:
            configs = tuple(tuple(int(v) for v in c.split("x")) for c in args.configs.split(","))
        results = run_dispatch(args.n, args.repeats, configs)
        with open(os.path.join(args.out, "dispatch.json"), "w") as fh:
            json.dump(results, fh, indent=1)
        write_dispatch_markdown(results, os.path.join(args.out, "dispatch.md"))
        print(open(os.path.join(args.out, "dispatch.md")).read())
    if args.only in (None, "isolation", "executors"):
        tasks_path = os.path.join(args.out, "tasks.json")
        previous = {}
        if args.only == "isolation" and os.path.exists(tasks_path):
            with open(tasks_path) as fh:
                previous = json.load(fh)
        results = previous or {"executors": {}}
        results.update({"date": time.strftime("%Y-%m-%d %H:%M"),
                        "host": {"cpus": os.cpu_count(), "python": platform.python_version()}})
        if args.only in (None, "executors"):
            plan = [("mpi", args.n, args.leaves), ("local", args.n, args.leaves),
                    ("parsl", min(args.n, 3000), 0), ("inline", args.n, args.leaves)]
            for name, n, leaves in plan:
                print(f"measuring {name} ...", flush=True)
                results["executors"][name] = run_one(name, n, args.repeats, leaves)
                print(json.dumps(results["executors"][name]), flush=True)
            results["mpi_target_met"] = (
                results["executors"]["mpi"]["tasks_per_s_median"] >= 2000)
        if args.only in (None, "isolation"):
            with LoadSampler(interval=2.0) as load:
                results["isolation"] = isolation_costs(min(args.n, 5000))
            results["isolation"]["load_average"] = load.summary()
        with open(tasks_path, "w") as fh:
            json.dump(results, fh, indent=2)
        write_markdown(results, os.path.join(args.out, "tasks.md"))
        print(open(os.path.join(args.out, "tasks.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
