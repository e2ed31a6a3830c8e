"""``stager plan SPEC [--json]``: what a spec would stage, and whether it fits here.

Runs on one process, without MPI. Every block kind is shown: whole files, and
the HDF5 copies of ``h5`` blocks with their selections and estimated size
(which the space check counts). The space a destination needs is counted as
``stager stage`` counts it: every copy rounded up to whole blocks of the
destination's filesystem. Exit 0 when the plan is valid (even if a destination
lacks room here: this machine may not be a compute node; ``--check`` makes that
exit 1), 2 on a spec or plan error, with ``FILE:LINE:COL: message`` as the first
line on stderr.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

from hooks import SpecError, load_spec
from stager.errors import PlanError
from stager.nodelocal.space import DestinationSpace, allocated, block_size, check_space
from stager.planning import build_plan
from core.nodes import expand_node
from stager.planning.plan import Plan, describe_size
from stager.planning.kinds import kind, kinds, split
from stager.planning.scatter import node_bytes, placement
from stager.planning.sources import check_disjoint, real_dest

SHOWN = 50


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC", help="hook spec file")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--all", action="store_true",
                   help=f"list every file (default: the first {SHOWN})")
    p.add_argument("--node", default=None,
                   help="node name for %%n when checking space (default: this host's name)")
    p.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="for scatter blocks: place their files (and split their HDF5 "
                        "selections into frame ranges) on N nodes and show each node's "
                        "bytes (without it, the space check counts them whole)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a destination does not fit on this machine")
    p.add_argument("--simulate", metavar="PLATFORM", default=None,
                   help="predict the stage on --nodes N nodes of a simulated machine (here, "
                        "bgq, dragonfly, or a platform .toml): transfer time, PFS bytes and "
                        "metadata operations, phases, the naive path beside it (SimGrid)")
    p.add_argument("--method", default=None,
                   help="with --simulate: the transfer method to replay (default: stage's, "
                        "$STAGER_METHOD, else stripe)")


def run(args: argparse.Namespace) -> int:
    if args.simulate is not None:
        return simulate(args)
    per_node: Optional[List[int]] = None
    held: Dict[Tuple[str, int], Tuple[int, ...]] = {}
    node = args.node or socket.gethostname().split(".")[0]
    try:
        plan = build_plan(load_spec(args.spec))
        for b in plan.blocks:  # with %n, the overlap with the sources depends on the node
            if "%n" in b.dest:
                dest = expand_node(b.dest, node)
                check_disjoint(real_dest(dest), plan.areas, f"{b.location} (as node {node})", dest)
        if args.nodes is not None and args.nodes < 1:
            raise PlanError(f"--nodes {args.nodes}: give the number of nodes, 1 or more")
        if plan.scatters and args.nodes is not None:
            plan = split(plan, args.nodes)
            held = placement(plan, args.nodes)
            per_node = node_bytes(plan, args.nodes)
        space = destination_space(plan, node, held)
        too_big = _too_big(plan, space, node)
        if too_big:
            raise PlanError(too_big)
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except PlanError as e:
        print(f"stager plan: {e}", file=sys.stderr)
        return 2
    if args.json:
        doc = plan.to_dict()
        doc["node"] = node
        big = _largest(plan)
        doc["largest"] = None if big is None else {"source": big.source, "size": big.size}
        if per_node is not None:
            doc["bytes_per_node"] = per_node
            doc["holders"] = {}
            for (k, i), h in held.items():  # files by source, other kinds by destination
                u = plan.units(k)[i]
                key = u.source if kind(k).whole_files else u.dest.replace("\x00", "%")
                doc.setdefault("holders" if kind(k).whole_files else f"{k}_holders",
                               {})[key] = list(h)
        doc["destinations"] = [dict(dest=s.dest, probe=s.probe, needs=s.needs, free=s.free,
                                    filesystem_needs=s.fs_needs, fits=s.fits) for s in space]
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(render_text(plan, space, node, limit=None if args.all else SHOWN, per_node=per_node))
    short = [s for s in space if not s.fits]
    if short:
        print(f"stager plan: {len(short)} destination(s) do not fit on this machine, first "
              f"{short[0].dest} (short by {describe_size(short[0].shortfall)})"
              + ("" if args.check else "; exit 0 as this machine may not be a compute node "
                 "(--check: exit 1)"), file=sys.stderr)
    return 1 if short and args.check else 0


def simulate(args: argparse.Namespace) -> int:
    """``--simulate PLATFORM --nodes N``: the plan replayed on a simulated machine."""
    from stager.simulate import PlatformError, predict, render

    try:
        if args.nodes is None or args.nodes < 1:
            raise PlanError("--simulate needs --nodes N (1 or more): the nodes to simulate")
        plan = build_plan(load_spec(args.spec))
        doc = predict(plan, args.simulate, args.nodes, args.method)
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except (PlanError, PlatformError, ValueError) as e:
        print(f"stager plan: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(render(doc))
    return 0


def destination_space(plan: Plan, node: str,
                      held: Optional[Dict[Tuple[str, int], Tuple[int, ...]]] = None
                      ) -> List[DestinationSpace]:
    """Free space for each block's destination on this machine, as node ``node``.

    A scatter block counts the bytes of the most loaded node when ``held`` (its
    placement) is given, else its whole size (one node holding everything). Every
    copy counts whole blocks of its destination's filesystem, as the capacity check
    of ``stager stage`` counts it (:func:`stager.nodelocal.space.allocated`).
    """
    dests = [expand_node(b.dest, node) for b in plan.blocks]
    blocks = {d: block_size(d) for d in dict.fromkeys(dests)}
    needs: Dict[str, int] = OrderedDict((d, 0) for d in dests)
    share: Dict[int, List[int]] = {}
    nodes = 1 + max(n for hs in held.values() for n in hs) if held else 1
    for k in plan.outputs:
        for i, u in enumerate(plan.units(k)):
            size = allocated(u.out_bytes, blocks[dests[u.block]])
            if plan.blocks[u.block].mode == "scatter" and held:
                per = share.setdefault(u.block, [0] * nodes)
                for n in held.get((k, i), ()):
                    per[n] += size
            else:
                needs[dests[u.block]] += size
    for index, d in enumerate(dests):
        if plan.blocks[index].mode == "scatter" and held:
            needs[d] += max(share.get(index, [0]))
    return check_space(needs.items())


def _too_big(plan: Plan, space: List[DestinationSpace], node: str) -> str:
    """A scatter output larger than its destination's free space (no node could hold it)."""
    free = {s.dest: s.free for s in space}
    for e in (u for us in plan.outputs.values() for u in us):
        b = plan.blocks[e.block]
        room = free.get(expand_node(b.dest, node)) if b.mode == "scatter" else None
        if room is not None and e.out_bytes > room:
            what = e.source if not getattr(e, "frames", ()) else \
                f"frames {e.frames[0]}..{e.frames[1] - 1} of {e.source}"
            return (f"{b.location}: {what} ({describe_size(e.out_bytes)}) is larger than the "
                    f"free space of its destination ({describe_size(room)}): no node can hold "
                    "it; free space there, stage it to a larger filesystem, or (HDF5) run on "
                    "more nodes so that each frame range is smaller")
    return ""


def _largest(plan: Plan) -> Any:
    """The largest whole file of the plan (``None``: none)."""
    return max((u for k in kinds() if k.whole_files for u in plan.units(k.name)),
               key=lambda e: e.size, default=None)


def render_text(plan: Plan, space: List[DestinationSpace], node: str,
                limit=SHOWN, per_node: Optional[List[int]] = None) -> str:
    """The human-readable plan. Pure."""
    out = [f"spec {plan.spec_path}: {len(plan.blocks)} block(s), "
           f"{plan.n_outputs} file(s), {describe_size(plan.total_bytes)}"]
    for i, b in enumerate(plan.blocks, 1):
        out.append(f"  block {i} ({b.location}): {kind(b.kind).describe_block(b)} "
                   f"-> {b.dest.replace(chr(0), '%')}")
    if per_node is not None:
        out.append(f"bytes per node on {len(per_node)} node(s): "
                   + ", ".join(f"node {k}: {describe_size(v)}" for k, v in enumerate(per_node)))
    elif plan.scatters:
        out.append("scatter blocks: pass --nodes N to place their files and see each node's "
                   "bytes (the space check below counts them whole)")
    else:
        out.append(f"each node receives {describe_size(plan.total_bytes)} "
                   f"({plan.total_bytes} bytes)")
    largest = _largest(plan)
    if largest is not None:
        out.append(f"largest file: {largest.source} ({describe_size(largest.size)})")
    out.append(f"destinations on this machine (as node {node!r}):")
    for s in space:
        verdict = "fits" if s.fits else f"DOES NOT FIT (short by {describe_size(s.shortfall)})"
        out.append(f"  {s.dest}: needs {describe_size(s.needs)}, free "
                   f"{describe_size(s.free)} (at {s.probe}): {verdict}")
    if plan.skipped_links:
        shown = ", ".join(plan.skipped_links[:5])
        more = f" and {len(plan.skipped_links) - 5} more" if len(plan.skipped_links) > 5 else ""
        out.append(f"not followed: {len(plan.skipped_links)} symbolic link(s) to directories "
                   f"below '**' or in a copied directory: {shown}{more}")
    out.append("plan:")
    for name, units in plan.outputs.items():
        k = kind(name)
        for u in units if limit is None else units[:limit]:
            out.append(f"  {k.describe_unit(u)}")
        if limit is not None and len(units) > limit:
            out.append(f"  ... {len(units) - limit} more of {k.what} (--all lists them, "
                       "--json prints them all)")
    return "\n".join(out)
