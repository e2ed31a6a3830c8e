"""Fit the dispatch model (bench/dispatch_model.md) to results/dispatch.json, check, project.

Run after ``bench/tasks_bench.py --only dispatch`` (from the repository root)::

    .venv/bin/python bench/dispatch_model.py     # writes bench/results/dispatch_model.{json,md}

1. Fit ``rank-0 CPU per task = c_task + c_msg * m`` (``m`` = messages rank 0
   handled per task) by least squares over every run of the runtime paths
   (``central``, ``nodes``, ``central-1``), all configurations together
   (``central-4`` runs are held out and only checked);
   ``c_disp`` (the dispatcher without the workflow runtime) from the
   ``central-submit`` runs with the same ``c_msg``; a node server's CPU per
   task it serves from the ``nodes`` runs that had servers.
2. Check: the fitted line against every measured point (relative error).
3. Task arrays (``*-arrays`` runs: a ``foreach`` as one entry per chunk of
   ``k`` items): the same line with the fixed part split into a part per item
   and a part per chunk, ``t = c_item + c_chunk / k + c_msg * m``, ``c_msg``
   from step 1, ``c_item`` and ``c_chunk`` by least squares over the runs at
   ``k`` = 64 and 4 (``nodes-arrays-4``); a node server's CPU per task from the
   ``nodes-arrays`` runs.
4. Project dispatch capacity (tasks/s the root can sustain on one core) at
   1,000 and 8,192 nodes x 64 workers for the central dispatcher, the node
   servers, and the node servers with task arrays (chunks of ``ARRAY_K``), and
   the shortest task duration each sustains with every worker busy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RUNTIME_METHODS = ("central", "nodes", "central-1", "central-4")
#: Fitted on these; central-4 (about 0.5 messages per task) is held out to check the line.
FIT_METHODS = ("central", "nodes", "central-1")
ARRAY_METHODS = ("central-arrays", "nodes-arrays", "nodes-arrays-4")
#: Chunk size of the projection: a foreach of at least 4 x 64 items per worker gets
#: chunks of 64 (workflows/executors/mpi/arrays.py: array_chunks).
ARRAY_K = 64
WORKERS_PER_NODE = 64
NODES = (1000, 8192)
TASK_SECONDS = (1.0, 10.0, 60.0)
#: As in workflows/executors/mpi/server.py.
ROOT_BUDGET = 20000.0
MIN_FLUSH = 0.002


def fit_line(points):
    """Least squares y = a + b x over (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def workers_under_servers(ranks: int, nodes: int) -> int:
    from core.nodes import assign_nodes, name_nodes
    from workflows.executors.mpi.roles import plan_roles

    index, names, _ = assign_nodes(name_nodes(ranks, f"emulate:{nodes}"))
    roles = plan_roles(index, names, 0, "nodes")
    return sum(1 for r in roles.workers if roles.server_of[r] != 0)


def calibrate(data: dict) -> dict:
    points, submit, servers, m4p, arrays, array_servers = [], [], [], [], [], []
    for cfg in data["configs"]:
        under = workers_under_servers(cfg["ranks"], cfg["nodes"])
        for r in cfg["runs"]:
            x, y = r["root_messages_per_task"], r["root_cpu_per_task_us"] * 1e-6
            if r["method"] in RUNTIME_METHODS:
                points.append((x, y, cfg["ranks"], cfg["nodes"], r["method"]))
            elif r["method"] == "central-submit":
                submit.append((x, y))
            elif r["method"] == "mpi4py":
                m4p.append(y)
            elif r["method"] in ARRAY_METHODS and r.get("array_k"):
                arrays.append((x, y, r["array_k"], cfg["ranks"], cfg["nodes"], r["method"]))
            if r["method"] == "nodes" and r.get("servers") and under:
                share = under / r["workers"]
                servers.append(r["servers_cpu_seconds"] / (r["tasks"] * share))
            if r["method"] == "nodes-arrays" and r.get("servers") and under:
                share = under / r["workers"]
                array_servers.append(r["servers_cpu_seconds"] / (r["tasks"] * share))
    c_task, c_msg = fit_line([(x, y) for x, y, _r, _n, m in points if m in FIT_METHODS])
    c_disp = statistics.median(y - c_msg * x for x, y in submit) if submit else None
    checks = []
    for x, y, ranks, nodes, method in points:
        pred = c_task + c_msg * x
        checks.append({"ranks": ranks, "nodes": nodes, "method": method,
                       "held_out": method not in FIT_METHODS,
                       "messages_per_task": x, "measured_us": 1e6 * y,
                       "predicted_us": 1e6 * pred, "error": (pred - y) / y})
    c_item = c_chunk = None
    if arrays:
        # y - c_msg x = c_item + c_chunk / k: a line in 1/k (k = 64 and 4).
        pts = [(1.0 / k, y - c_msg * x) for x, y, k, _r, _n, _m in arrays]
        if len({p[0] for p in pts}) > 1:
            c_item, c_chunk = fit_line(pts)
        else:
            c_item, c_chunk = statistics.median(p[1] for p in pts), 0.0
        for x, y, k, ranks, nodes, method in arrays:
            pred = c_item + c_chunk / k + c_msg * x
            checks.append({"ranks": ranks, "nodes": nodes, "method": f"{method} (k={k})",
                           "held_out": False, "messages_per_task": x, "measured_us": 1e6 * y,
                           "predicted_us": 1e6 * pred, "error": (pred - y) / y})
    arrays_by_method = {}
    for m in ARRAY_METHODS + RUNTIME_METHODS:
        ys = [y for x, y, *_rest in arrays if _rest[-1] == m] if m in ARRAY_METHODS else [
            y for x, y, _r, _n, mm in points if mm == m]
        if ys:
            arrays_by_method[m] = 1e6 * statistics.median(ys)
    return {"c_task_us": 1e6 * c_task, "c_msg_us": 1e6 * c_msg,
            "c_item_us": None if c_item is None else 1e6 * c_item,
            "c_chunk_us": None if c_chunk is None else 1e6 * c_chunk,
            "c_server_array_task_us": (1e6 * statistics.median(array_servers)
                                       if array_servers else None),
            "root_us_median": arrays_by_method,
            "c_disp_us": None if c_disp is None else 1e6 * c_disp,
            "c_server_task_us": 1e6 * statistics.median(servers) if servers else None,
            "mpi4py_root_us": 1e6 * statistics.median(m4p) if m4p else None,
            "points": len(points), "checks": checks,
            "max_abs_error": max(abs(c["error"]) for c in checks),
            "median_abs_error": statistics.median(abs(c["error"]) for c in checks),
            "held_out_median_error": _median_or_none(
                [c["error"] for c in checks if c["held_out"]])}


def _median_or_none(values):
    return statistics.median(values) if values else None


def project(cal: dict) -> list:
    c_task, c_msg = cal["c_task_us"] * 1e-6, cal["c_msg_us"] * 1e-6
    c_srv = (cal["c_server_task_us"] or cal["c_task_us"]) * 1e-6
    window = 8 * WORKERS_PER_NODE
    feed = window / 2  # a server asks for tasks at half its window: >= 256 per FEED
    rows = []
    for n in NODES:
        workers = n * WORKERS_PER_NODE
        # Central: one task per message both ways (tasks of 10 ms or more go one at a time;
        # guided batches need a backlog of 2 x workers x batch tasks).
        central = 1.0 / (c_task + 2 * c_msg)
        # Node servers: FEED per >= 256 tasks; UP at most every `interval` per server.
        interval = max(MIN_FLUSH, n / ROOT_BUDGET)
        x = 1.0 / c_task
        for _ in range(100):
            up = min(1.0, n / (x * interval))
            x = 1.0 / (c_task + c_msg * (1.0 / feed + up + 2.0 / n))
        servers_total = n / (c_srv + 2 * c_msg)
        nodes = min(x, servers_total)
        mpi4py = 1e6 / cal["mpi4py_root_us"] if cal.get("mpi4py_root_us") else None
        dispatcher_only = (1.0 / ((cal["c_disp_us"] or cal["c_task_us"]) * 1e-6
                                  + c_msg * (1.0 / feed + min(1.0, n / (x * interval)))))
        arrays = arrays_bound = arrays_servers = None
        if cal.get("c_item_us") is not None:
            arrays_bound, arrays_servers = arrays_capacity(cal, n, ARRAY_K)
            arrays = min(arrays_bound, arrays_servers)
        rows.append({
            "nodes": n, "workers": workers, "central_tasks_per_s": central,
            "arrays_tasks_per_s": arrays, "arrays_root_bound": arrays_bound,
            "arrays_servers_bound": arrays_servers, "array_k": ARRAY_K,
            "nodes_tasks_per_s": nodes, "nodes_root_bound": x,
            "nodes_servers_bound": servers_total, "result_flush_s": interval,
            "mpi4py_tasks_per_s": mpi4py, "dispatcher_only_tasks_per_s": dispatcher_only,
            "demand": {str(t): workers / t for t in TASK_SECONDS},
            "shortest_task_s": {"central": workers / central, "nodes": workers / nodes,
                                "mpi4py": workers / mpi4py if mpi4py else None,
                                "dispatcher_only": workers / dispatcher_only,
                                "arrays": workers / arrays if arrays else None},
        })
    return rows


def arrays_capacity(cal: dict, n: int, k: int):
    """Node servers + task arrays of ``k`` at ``n`` nodes: (root bound, servers bound) tasks/s.

    ``t = c_item + c_chunk / k + c_msg m``, ``m = 1/(256 k) + min(1/k, n/(X I)) + 2/(n k)``:
    a FEED per 256 entries, at most one UP per chunk and per flush interval, the
    root's own node's workers.
    """
    c_msg = cal["c_msg_us"] * 1e-6
    c_arr = (cal["c_item_us"] + cal["c_chunk_us"] / k) * 1e-6
    interval = max(MIN_FLUSH, n / ROOT_BUDGET)
    feed = 8 * WORKERS_PER_NODE / 2
    x = 1.0 / c_arr
    for _ in range(100):
        up = min(1.0 / k, n / (x * interval))
        x = 1.0 / (c_arr + c_msg * (1.0 / (feed * k) + up + 2.0 / (n * k)))
    c_srv = (cal.get("c_server_array_task_us") or cal["c_server_task_us"]
             or cal["c_task_us"]) * 1e-6
    return x, n / (c_srv + 2 * c_msg / k)


def array_sizes(cal: dict, rows: list) -> list:
    """(k, [(rank-0 µs/task, capacity, smallest foreach, shortest task s) per row]) by k."""
    out = []
    for k in (2, 4, 16, 64):
        cells = []
        for r in rows:
            cap = min(arrays_capacity(cal, r["nodes"], k))
            cells.append((1e6 / cap, cap, 4 * k * r["workers"], r["workers"] / cap))
        out.append((k, cells))
    return out


def write_markdown(data: dict, cal: dict, rows: list, path: str) -> None:
    t = ["# Dispatch model: fit, check, projection (bench/dispatch_model.py)", "",
         f"Calibrated on `results/dispatch.json` ({data['date']}, {cal['points']} runs of "
         "the runtime paths). Model and assumptions: `bench/dispatch_model.md`.", "",
         "| constant | fitted | meaning |", "|---|---|---|",
         f"| c_task | {cal['c_task_us']:.1f} µs | rank-0 CPU per task besides messages "
         "(runtime + dispatcher) |",
         f"| c_msg | {cal['c_msg_us']:.1f} µs | rank-0 CPU per message handled |"]
    if cal["c_disp_us"] is not None:
        t.append(f"| c_disp | {cal['c_disp_us']:.1f} µs | rank-0 CPU per task of the "
                 "dispatcher alone (executor.submit) |")
    if cal["c_server_task_us"] is not None:
        t.append(f"| c_server | {cal['c_server_task_us']:.1f} µs | a node server's CPU per "
                 "task it serves, batched (the projection adds 2 c_msg) |")
    if cal.get("c_item_us") is not None:
        t.append(f"| c_item | {cal['c_item_us']:.1f} µs | task arrays: rank-0 CPU per item "
                 "besides messages and chunks (its future, record, resolving it) |")
        t.append(f"| c_chunk | {cal['c_chunk_us']:.1f} µs | task arrays: rank-0 CPU per chunk "
                 "(pickling it, its entry and record, unpickling its results) |")
    if cal.get("c_server_array_task_us") is not None:
        t.append(f"| c_server (arrays) | {cal['c_server_array_task_us']:.1f} µs | a node "
                 "server's CPU per task it serves in chunks |")
    if cal["mpi4py_root_us"] is not None:
        t.append(f"| mpi4py | {cal['mpi4py_root_us']:.1f} µs | rank-0 CPU per task of plain "
                 "MPICommExecutor (2 messages) |")
    held = cal.get("held_out_median_error")
    t += ["", f"Check against the measured points: median |error| "
          f"{100 * cal['median_abs_error']:.0f} %, max {100 * cal['max_abs_error']:.0f} %"
          + (f"; the held-out central-4 runs (not used in the fit): median error "
             f"{100 * held:+.0f} %." if held is not None else "."), "",
          "| -n | nodes | method | rank-0 msgs/task | measured µs/task | model µs/task | error |",
          "|---|---|---|---|---|---|---|"]
    for c in cal["checks"]:
        label = c["method"] + (" (held out)" if c.get("held_out") else "")
        t.append(f"| {c['ranks']} | {c['nodes']} | {label} | {c['messages_per_task']:.3f} "
                 f"| {c['measured_us']:.1f} | {c['predicted_us']:.1f} | "
                 f"{100 * c['error']:+.0f} % |")
    t += ["", "## Projection: 64 workers per node", "",
          "Capacity = tasks/s rank 0 sustains on one core; shortest task = the task "
          "duration at which every worker stays busy (workers / capacity).", "",
          "| nodes | workers | central | node servers (root bound / servers bound) | node "
          f"servers + task arrays, chunks of {ARRAY_K} (root / servers bound) | plain "
          "mpi4py | dispatcher only (no runtime) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["shortest_task_s"]
        m4p = (f"{r['mpi4py_tasks_per_s']:,.0f}/s ({s['mpi4py']:.0f} s)"
               if r["mpi4py_tasks_per_s"] else "-")
        arr = (f"{r['arrays_tasks_per_s']:,.0f}/s ({s['arrays']:.0f} s); "
               f"{r['arrays_root_bound']:,.0f} / {r['arrays_servers_bound']:,.0f}"
               if r.get("arrays_tasks_per_s") else "-")
        t.append(f"| {r['nodes']:,} | {r['workers']:,} | {r['central_tasks_per_s']:,.0f}/s "
                 f"({s['central']:.0f} s) | {r['nodes_tasks_per_s']:,.0f}/s ({s['nodes']:.0f} s)"
                 f"; {r['nodes_root_bound']:,.0f} / {r['nodes_servers_bound']:,.0f}, results "
                 f"flushed every {1e3 * r['result_flush_s']:.0f} ms | {arr} | {m4p} | "
                 f"{r['dispatcher_only_tasks_per_s']:,.0f}/s ({s['dispatcher_only']:.0f} s) |")
    if cal.get("c_item_us") is not None:
        t += ["", "Task arrays by chunk size (`array_chunks` gives a `foreach` of `n` ready "
              "items chunks of `k = n / (4 x workers)`, at most 64): rank-0 capacity with "
              "node servers, and the smallest `foreach` that gets chunks of `k`.", "",
              "| k | " + " | ".join(f"{r['nodes']:,} nodes: rank-0 µs/task, capacity, "
                                    "foreach of at least, shortest task" for r in rows) + " |",
              "|---" * (1 + len(rows)) + "|"]
        for k, cells in array_sizes(cal, rows):
            t.append(f"| {k} | " + " | ".join(
                f"{per:.1f} µs, {cap:,.0f}/s, {n_items:,} items, {short:.1f} s"
                for per, cap, n_items, short in cells) + " |")
    t += ["", "Demand with every worker busy (tasks/s): " + "; ".join(
        f"{r['nodes']:,} nodes: " + ", ".join(f"{float(k):g} s tasks {v:,.0f}"
                                             for k, v in r["demand"].items()) for r in rows), ""]
    with open(path, "w") as fh:
        fh.write("\n".join(t))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=os.path.join(ROOT, "bench", "results", "dispatch.json"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = p.parse_args()
    with open(args.input) as fh:
        data = json.load(fh)
    cal = calibrate(data)
    rows = project(cal)
    with open(os.path.join(args.out, "dispatch_model.json"), "w") as fh:
        json.dump({"calibration": cal, "projection": rows, "source": args.input}, fh, indent=1)
    md = os.path.join(args.out, "dispatch_model.md")
    write_markdown(data, cal, rows, md)
    print(open(md).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
