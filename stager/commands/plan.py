"""``stager plan SPEC [--json]``: what a spec would stage, and whether it fits here.

Runs on one process, without MPI. Exit 0 when the plan is valid (even if a
destination lacks room here: this machine may not be a compute node), 2 on a
spec or plan error, with ``FILE:LINE:COL: message`` as the first line on stderr.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
from collections import OrderedDict
from typing import Dict, List

from hooks import SpecError, load_spec
from stager.errors import PlanError
from stager.manifest import Manifest, expand_node
from stager.plan import build_manifest, describe_size
from stager.space import DestinationSpace, check_space

HELP = "expand a hook spec and print what would be staged"
SHOWN = 50


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC", help="hook spec file")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--all", action="store_true",
                   help=f"list every file (default: the first {SHOWN})")
    p.add_argument("--node", default=None,
                   help="node name for %%n when checking space (default: this host's name)")


def run(args: argparse.Namespace) -> int:
    try:
        manifest = build_manifest(load_spec(args.spec))
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except PlanError as e:
        print(f"stager plan: {e}", file=sys.stderr)
        return 2
    node = args.node or socket.gethostname().split(".")[0]
    space = destination_space(manifest, node)
    if args.json:
        doc = manifest.to_dict()
        doc["node"] = node
        doc["largest"] = _largest(manifest)
        doc["destinations"] = [dict(dest=s.dest, probe=s.probe, needs=s.needs, free=s.free,
                                    filesystem_needs=s.fs_needs, fits=s.fits) for s in space]
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(render_text(manifest, space, node, limit=None if args.all else SHOWN))
    return 0


def destination_space(manifest: Manifest, node: str) -> List[DestinationSpace]:
    """Free space for each block's destination on this machine, as node ``node``."""
    needs: Dict[str, int] = OrderedDict()
    for block in manifest.blocks:
        dest = expand_node(block.dest, node)
        needs[dest] = needs.get(dest, 0) + block.bytes
    return check_space(needs.items())


def _largest(manifest: Manifest):
    e = manifest.largest
    return None if e is None else {"source": e.source, "size": e.size}


def render_text(manifest: Manifest, space: List[DestinationSpace], node: str,
                limit=SHOWN) -> str:
    """The human-readable plan. Pure."""
    out = [f"spec {manifest.spec_path}: {len(manifest.blocks)} block(s), "
           f"{len(manifest.entries)} file(s), {describe_size(manifest.total_bytes)}"]
    for i, b in enumerate(manifest.blocks, 1):
        out.append(f"  block {i} ({b.location}): {b.files} file(s), {describe_size(b.bytes)} "
                   f"-> {b.dest.replace(chr(0), '%')}")
    out.append(f"each node receives {describe_size(manifest.total_bytes)} "
               f"({manifest.total_bytes} bytes)")
    largest = manifest.largest
    if largest is not None:
        out.append(f"largest file: {largest.source} ({describe_size(largest.size)})")
    out.append(f"destinations on this machine (as node {node!r}):")
    for s in space:
        verdict = "fits" if s.fits else f"DOES NOT FIT (short by {describe_size(s.shortfall)})"
        out.append(f"  {s.dest}: needs {describe_size(s.needs)}, free "
                   f"{describe_size(s.free)} (at {s.probe}): {verdict}")
    out.append("manifest:")
    entries = manifest.entries if limit is None else manifest.entries[:limit]
    for e in entries:
        out.append(f"  {e.source} -> {e.dest.replace(chr(0), '%')}  {e.size} B  "
                   f"mode {e.mode:04o}")
    if limit is not None and len(manifest.entries) > limit:
        out.append(f"  ... {len(manifest.entries) - limit} more (--all lists every file, "
                   "--json prints them all)")
    return "\n".join(out)
