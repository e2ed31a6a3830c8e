"""``stager verify SPEC [--emulate-nodes K | --node-id-env VAR]`` (run under mpirun/srun).

Every leader re-checksums its node's staged copies against the records written
by ``stage``. Exit 0 if all match; 1 with one line per mismatch (node and
file) on rank 0's stderr; 2 on a spec error.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import stager
from core.job import job_of
from stager.commands.stage import add_node_arguments, run_collective
from stager.errors import VerifyError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC", help="hook spec file used to stage")
    add_node_arguments(p)


def run(args: argparse.Namespace) -> int:
    def body(comm: Any) -> int:
        try:
            rep = stager.verify(args.spec, job_of(args, comm), wait=args.wait)
        except VerifyError as e:
            if comm.rank == 0:
                for m in getattr(e, "mismatches", []):
                    print(f"stager verify: mismatch: {m}", file=sys.stderr)
                print(f"stager verify: {len(getattr(e, 'mismatches', []))} mismatch(es)",
                      file=sys.stderr)
            return 1
        if comm.rank == 0:
            print(f"verified {rep.files_checked} staged copies ({rep.bytes_checked} bytes) on "
                  f"{len(rep.nodes)} node(s): all match")
        return 0

    return run_collective("verify", body)
