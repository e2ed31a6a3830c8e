"""What a stage will cost: a plan replayed on a platform, staged and naive, side by side.

:func:`predict` is what ``stager plan SPEC --simulate PLATFORM --nodes N`` runs: the
real plan (:func:`stager.plan`), the staging options as ``stager stage`` resolves them
(keywords > ``STAGER_*`` > defaults), the replay (:mod:`stager.simulate.replay`) of the
chosen method and of ``naive`` (every node reads every file itself), each simulated in a
fresh process (SimGrid allows one engine per process), both at once.
"""
from __future__ import annotations

import pickle
import subprocess
import sys
import time
from typing import Any, Dict, List, Mapping, Optional

from stager.planning.plan import Plan, describe_size
from stager.simulate.platform import Platform, load_platform
from stager.simulate.replay import Scenario, groups_for, replay
from stager.simulate.twin import PHASES
from stager.staging.options import resolve_options

__all__ = ["predict", "simulate", "render", "scenario"]


def simulate(scenarios: List[Scenario], platform: Platform) -> List[Dict[str, Any]]:
    """Run each scenario in a fresh Python process (``python -m stager.simulate.twin``:
    the pickled scenario on its stdin, the pickled result on its stdout), in parallel.

    Raises
    ------
    RuntimeError
        A simulation failed (its stderr in the message).
    """
    procs = []
    for s in scenarios:
        p = subprocess.Popen([sys.executable, "-m", "stager.simulate.twin"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        procs.append((p, pickle.dumps((s, platform))))
    out = []
    for p, given in procs:
        data, err = p.communicate(given)
        if p.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError("the simulation failed: " + " | ".join(tail))
        out.append(pickle.loads(data))
    return out


def scenario(plan: Plan, platform: Platform, nodes: int, method: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, **options: Any) -> Scenario:
    """The replay of ``plan`` on ``nodes`` nodes of ``platform`` (options as ``stage``'s)."""
    kw = dict(options)
    if method is not None:
        kw["method"] = method
    opts = resolve_options(env, **kw)
    return replay(plan, nodes, opts, groups=groups_for(nodes, platform.group_nodes()),
                  dedup=platform.mpiio.dedup,
                  aggregators_per_node=platform.mpiio.aggregators_per_node,
                  align=platform.mpiio.align)


def predict(plan: Plan, platform: str, nodes: int, method: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, naive: bool = True,
            **options: Any) -> Dict[str, Any]:
    """The predicted stage of ``plan`` on ``nodes`` nodes of ``platform`` (a name or a
    ``.toml`` path), with the naive path beside it (``naive=False``: without).

    Returns the JSON document ``stager plan --simulate --json`` prints (keys: see
    :func:`render` and ``docs/guide/staging.md``).

    Raises
    ------
    PlatformError
        An unknown platform or a bad platform file.
    ValueError
        A method that cannot be simulated, bad options, ``nodes < 1``.
    """
    pf = load_platform(platform)
    staged = scenario(plan, pf, nodes, method, env, **options)
    wanted = [staged]
    if naive and staged.method != "naive":
        wanted.append(scenario(plan, pf, nodes, "naive", env, **options))
    t = time.perf_counter()
    results = simulate(wanted, pf)
    doc: Dict[str, Any] = {
        "platform": pf.name, "platform_file": pf.path, "nodes": nodes,
        "simulated_groups": staged.groups, "nodes_per_group": staged.k,
        "files": staged.files, "bytes_per_node": staged.bytes_per_node,
        "chunk_size": staged.chunk_size,
        "staged": _part(staged, results[0]),
        "simulator_seconds": round(time.perf_counter() - t, 3)}
    if len(results) > 1:
        doc["naive"] = _part(wanted[1], results[1])
        doc["speedup"] = (doc["naive"]["seconds"] / doc["staged"]["seconds"]
                          if doc["staged"]["seconds"] > 0 else None)
    return doc


def _part(sc: Scenario, res: Dict[str, Any]) -> Dict[str, Any]:
    seconds = res["seconds"]
    return {"method": sc.method, "seconds": seconds, "total_seconds": res["total_seconds"],
            "phases": res["phases"], "startup": res["startup"],
            "pfs_bytes": res["pfs_bytes"], "pfs_metadata_ops": res["pfs_meta_ops"],
            "written_bytes": res["written"], "network_bytes": res["sent"],
            "pfs_gbps": res["pfs_bytes"] / seconds / 1e9 if seconds > 0 else 0.0,
            "delivered_gbps": res["written"] / seconds / 1e9 if seconds > 0 else 0.0,
            "busy_group0": res["busy"], "simulator_seconds": res["wall_seconds"]}


def _s(x: float) -> str:
    return f"{x:.3g} s" if x < 100 else f"{x:.0f} s"


def render(doc: Dict[str, Any]) -> str:
    """The prediction for humans. Pure."""
    st = doc["staged"]
    out = [f"simulated on '{doc['platform']}' ({doc['nodes']} nodes as "
           f"{doc['simulated_groups']} groups of {doc['nodes_per_group']}): "
           f"{doc['files']} file(s), {describe_size(doc['bytes_per_node'])} per node"]

    def block(title: str, p: Dict[str, Any]) -> None:
        out.append(f"{title} ({p['method']}): {_s(p['seconds'])} to transfer, "
                   f"{_s(p['total_seconds'])} in all (with start-up {_s(p['startup'])})")
        out.append(f"  PFS: {describe_size(p['pfs_bytes'])} read ({p['pfs_gbps']:.3g} GB/s), "
                   f"{p['pfs_metadata_ops']} metadata operations; written on the nodes: "
                   f"{describe_size(p['written_bytes'])} ({p['delivered_gbps']:.3g} GB/s)")
        out.append("  phases: " + ", ".join(f"{name} {_s(p['phases'][name])}"
                                            for name in PHASES))
        busy = p["busy_group0"]
        out.append("  group 0 busy in the transfer: " + ", ".join(
            f"{name} {_s(v)}" for name, v in busy.items() if v > 0))

    block("staged", st)
    if "naive" in doc:
        block("naive", doc["naive"])
        x = doc.get("speedup")
        if x:
            out.append(f"staging is {max(x, 1 / x):.1f}x {'faster' if x >= 1 else 'slower'}"
                       " than every node reading the PFS itself")
    return "\n".join(out)
