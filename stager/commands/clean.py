"""``stager clean SPEC [--emulate-nodes K | --node-id-env VAR] [--wait]`` (under mpirun/srun).

Removes exactly the copies this spec's records name, each only if it is still the
recorded copy, then the directories the stager created if they are empty
(:mod:`stager.nodelocal.clean`). Everything left -- a root that is not yours, a
file that was replaced -- gets one ``stager clean: left PATH: why`` line. Exit 0,
1 on a failure (or a run still using a destination), 2 on a spec error.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import stager
from stager.commands import verify
from core.job import job_of
from stager.commands.stage import run_collective

#: the same arguments as ``stager verify``: the spec used to stage, the nodes, ``--wait``
add_arguments = verify.add_arguments


def run(args: argparse.Namespace) -> int:
    def body(comm: Any) -> int:
        rep = stager.clean(args.spec, job_of(args, comm), wait=args.wait)
        if comm.rank == 0:
            print(f"removed {rep.files_removed} staged file(s) and {rep.dirs_removed} "
                  f"director{'y' if rep.dirs_removed == 1 else 'ies'} on {len(rep.nodes)} node(s)")
            for p in rep.skipped:
                print(f"stager clean: left {p}", file=sys.stderr)
        return 0

    return run_collective("clean", body)
