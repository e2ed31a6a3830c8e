"""The dispatch twin: FF stage 2's grains and NF's fits through rank 0, at 1,024-8,192 nodes.

A SimGrid model of the mpi executor's two dispatch ways (``docs/DISPATCH.md``):

* ``central`` -- rank 0 sends every task to a worker and takes every result back;
* ``nodes`` -- rank 0 sends chunks of tasks to one server per node, which feeds its
  workers (the results come back through the server, in batches).

Costs are the ones fitted to runs here (``bench/results/dispatch_model.json``, made by
``bench/dispatch_model.py``): rank 0's CPU per task ``c_task + c_msg * m`` (``m``: the
messages rank 0 handles per task: 2 per task in ``central`` once there are fewer tasks
than workers, ``2 N / T`` with ``nodes``), a node server's CPU per task
``c_server_task``. Task durations (``WORKLOADS``): log-normal, seeded, with the median and
spread of FF stage 2's refinement tasks measured here (``bench/results/ff_makespan.md``:
80 tasks, 0.43 s mean, 1.5 s longest), or NF's per-point fitting cost measured on MIDAS's
gold geometry (``bench/results/nf_projection.md``), one grid point per task. Nodes are
aggregated as in the staging twin: a group of ``k``
nodes is one actor standing for ``k x 64`` workers (a list scheduler: each task on the
worker free first), its ``k`` node servers a wait of their share of the server CPU; rank 0
is one core. Every
configuration runs in a fresh process (SimGrid allows one engine per process).

Usage::

    .venv/bin/python bench/simulate_dispatch.py [--workloads ff nf-ff] [--nodes 1024 8192]
    # -> bench/results/simulate_dispatch.{json,md}
"""
from __future__ import annotations

import argparse
import heapq
import math
import json
import os
import pickle
import subprocess
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = 64
GROUPS = 64
#: workload -> (median task seconds, log-normal sigma, task counts, where the figures are from)
WORKLOADS = {
    "ff": (0.35, 0.6, (5000, 50000),
           "FF stage 2, one task per grain: ff_makespan.md, mean 0.43 s = median x "
           "exp(sigma^2 / 2)"),
    "nf-ff": (0.0639, 0.2, (100000,),
              "NF fits seeded by FF's grains, one point per task, MIDAS's gold example "
              "(10^5 points): t_p 63.9 ms, nf_projection.md (spread assumed)"),
    "nf-uniform": (15.98, 0.2, (100000,),
                   "NF fits with MIDAS's 243,129 uniform seeds, one point per task: t_p "
                   "15.98 s, nf_projection.md (spread assumed)"),
}


def run_one(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """One configuration, in this process (call once per process)."""
    import random

    import simgrid as sg

    e = sg.Engine(["dispatch", "--log=root.thres:critical"])
    cal = cfg["cal"]
    n, T, mode = cfg["nodes"], cfg["tasks"], cfg["mode"]
    G = min(GROUPS, n)
    k = n // G
    zone = sg.NetZone.create_full_zone("z")
    root = zone.create_host("root", 1.0).seal()  # 1 flop = 1 s of one core
    workers = []
    for g in range(G):
        h = zone.create_host(f"w{g}", 1.0)
        h.core_count = k * WORKERS
        workers.append(h.seal())
    net = zone.create_link("net", 1e12)  # task messages are small: latency only
    net.set_latency(2e-6)
    net.seal()
    for w in workers:
        zone.add_route(root.netpoint, w.netpoint, None, None, [sg.LinkInRoute(net)], True)
    zone.seal()
    rng = random.Random(cfg["seed"])
    median_s, sigma = WORKLOADS[cfg["workload"]][:2]
    durations = [rng.lognormvariate(0.0, sigma) * median_s for _ in range(T)]
    W = n * WORKERS
    if mode == "central":
        m = 2.0 if T <= W else 2.0 * W / T + 2.0 * 0.0338
    else:
        m = 2.0 * min(n, T) / T
    per_task = (cal["c_task_us"] + cal["c_msg_us"] * m) * 1e-6
    rounds = 32
    boxes = [sg.Mailbox.by_name(f"g{g}") for g in range(G)]
    out: Dict[str, float] = {"root_busy": 0.0, "end": 0.0}

    def root_actor() -> None:
        # tasks dealt round-robin over the groups, in `rounds` slices per group
        share = [durations[g::G] for g in range(G)]
        for r in range(rounds):
            for g in range(G):
                part = share[g][r::rounds]
                if not part:
                    continue
                t = sg.Engine.clock
                sg.this_actor.execute(per_task * len(part))
                out["root_busy"] += sg.Engine.clock - t
                boxes[g].put_init(part, 0).detach()
        for g in range(G):
            boxes[g].put_init(None, 0).detach()

    def group_actor(g: int) -> None:
        # the group's k x 64 workers as a list scheduler: a task arriving at time t runs
        # on the worker free first, from max(t, its free time) (exact for tasks that
        # touch nothing but their core; more tasks than workers queue, none share a core)
        free = [0.0] * (k * WORKERS)  # a heap of the workers' free times
        while True:
            part = boxes[g].get()
            if part is None:
                break
            if mode == "nodes":  # each of the k servers handles its share, in parallel
                sg.this_actor.sleep_for(cal["c_server_task_us"] * 1e-6 * len(part) / k)
            for d in part:
                heapq.heapreplace(free, max(free[0], sg.Engine.clock) + d)
        sg.this_actor.sleep_until(max(free))
        out["end"] = max(out["end"], sg.Engine.clock)

    sg.Actor.create("root", root, root_actor)
    for g in range(G):
        sg.Actor.create(f"group{g}", workers[g], group_actor, g)
    e.run()
    busy = sum(durations)
    return {**{x: cfg[x] for x in ("workload", "nodes", "tasks", "mode")},
            "work_bound": busy / (n * WORKERS),
            "makespan": out["end"], "root_busy": out["root_busy"],
            "root_utilisation": out["root_busy"] / out["end"] if out["end"] else 0.0,
            "longest_task": max(durations), "work": busy,
            "root_tasks_per_s": 1.0 / per_task}


def render(rows: List[Dict[str, Any]], cal: Dict[str, float]) -> str:
    """simulate_dispatch.md: per workload, makespan and rank 0's share, central vs nodes."""
    md = ["# The dispatch twin: FF stage 2 and NF fits through rank 0 "
          "(`bench/simulate_dispatch.py`)", "",
          "64 workers per node; rank 0's and the node servers' CPU per task from "
          "`dispatch_model.json` (fitted to runs here); task durations log-normal, seeded. "
          "Bounds: *dispatch* = rank 0's CPU for all tasks, *work* = the tasks' total time "
          "over all workers, *longest* = the longest task; the makespan is at least the "
          "largest. Load average (of this machine, while simulating) in the last column.", ""]
    for w, (med, sig, _, src) in WORKLOADS.items():
        sel = [r for r in rows if r["workload"] == w]
        if not sel:
            continue
        mean = med * math.exp(sig ** 2 / 2)
        sat = {way: mean / (c * 1e-6) / WORKERS for way, c in (
            ("central", cal["c_task_us"] + 2 * cal["c_msg_us"]), ("nodes", cal["c_task_us"]))}
        md += [f"## {w}: median {med} s, sigma {sig}", "", f"Source: {src}. With more tasks "
               f"than workers, rank 0 saturates once the workers finish tasks faster than it "
               f"hands them out (workers x its CPU per task > the mean task, {mean:.3g} s): "
               f"beyond {sat['central']:,.0f} nodes `central` (2 messages a task), "
               f"{sat['nodes']:,.0f} with node servers (messages batched away).", "",
               "| tasks | nodes | way | makespan s | rank 0 busy | dispatch s | work s "
               "| longest s | central / nodes | load |", "|---" * 10 + "|"]
        for r in sel:
            twin = [x for x in sel if x["tasks"] == r["tasks"] and x["nodes"] == r["nodes"]]
            ratio = (twin[0]["makespan"] / twin[1]["makespan"]) if len(twin) == 2 else 0
            md.append(f"| {r['tasks']} | {r['nodes']} | {r['mode']} | {r['makespan']:.2f} | "
                      f"{r['root_utilisation']:.0%} | {r['tasks'] / r['root_tasks_per_s']:.2f} | "
                      f"{r['work_bound']:.2f} | {r['longest_task']:.2f} | "
                      f"{ratio:.2f} | {r.get('load', '')} |")
        md.append("")
    return "\n".join(md)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        cfg = pickle.loads(sys.stdin.buffer.read())
        res = run_one(cfg)
        sys.stdout.buffer.write(pickle.dumps(res))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    args = ap.parse_args()
    with open(os.path.join(HERE, "results", "dispatch_model.json")) as f:
        cal = json.load(f)["calibration"]
    rows = []
    for w in args.workloads:
        for T in WORKLOADS[w][2]:
            for n in args.nodes:
                for mode in ("central", "nodes"):
                    cfg = {"cal": cal, "workload": w, "nodes": n, "tasks": T, "mode": mode,
                           "seed": 43}
                    p = subprocess.run([sys.executable, __file__, "--one"],
                                       input=pickle.dumps(cfg), capture_output=True, check=True)
                    r = pickle.loads(p.stdout)
                    r["load"] = round(os.getloadavg()[0], 2)
                    rows.append(r)
                    print(f"{w} T={T} N={n} {mode}: makespan {r['makespan']:.2f} s, rank 0 "
                          f"busy {r['root_utilisation']:.0%}", flush=True)
    with open(os.path.join(HERE, "results", "simulate_dispatch.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(HERE, "results", "simulate_dispatch.md"), "w") as f:
        f.write(render(rows, cal) + "\n")
    print("wrote bench/results/simulate_dispatch.{json,md}")


if __name__ == "__main__":
    main()
