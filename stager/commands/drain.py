"""``stager drain SRC DEST``: copy every node's node-local results to the shared filesystem.

Run under ``mpirun``/``srun`` with at least one rank per node. Rank 0 prints one
summary line on stdout (files, bytes, seconds, rate). Exit 0 on success, 1 when the drain
failed on any rank (the same one-line reason on every rank), 2 on bad options.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import stager
from core.job import add_node_id_arguments, job_of
from core.localfs import write_bytes_atomic
from stager.commands.stage import run_collective


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="node-local results directory (%%n = node name)")
    p.add_argument("dest", metavar="DEST",
                   help="shared directory; files go to DEST/<node>/... (see --merge)")
    p.add_argument("--merge", action="store_true",
                   help="put every node's files directly in DEST "
                        "(names must be unique across nodes)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files that already exist at DEST "
                        "(default: refuse, before copying anything)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="do not read the shared copies back to compare checksums")
    add_node_id_arguments(p)
    p.add_argument("--json", metavar="FILE",
                   help="write the report (with checksums) as JSON to FILE")


def run(args: argparse.Namespace) -> int:
    def body(comm: Any) -> int:
        report = stager.drain(args.src, args.dest, job=job_of(args, comm), merge=args.merge,
                              overwrite=args.overwrite, verify=args.verify)
        if comm.rank == 0:
            print(report.summary())
            if args.json:
                write_bytes_atomic(os.path.abspath(args.json),
                                   json.dumps(report.to_dict(), indent=1).encode(), mode=0o644)
        return 0

    return run_collective("drain", body)
