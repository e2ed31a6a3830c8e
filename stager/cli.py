"""``stager`` command line: one subcommand per module in ``stager/commands/``.

``stager stream`` is the verb of the streaming package, which sits on stager: its
module (``streams.cli``) is named in :data:`COMMANDS` as a string and imported only
when the verb runs, so nothing in ``stager`` imports ``streams``.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``;
its one-line help is in :data:`COMMANDS`. Modules are imported only when their
command runs, so ``stager plan`` never imports MPI.

Exit codes: 0 success, 1 a runtime failure (staging, verify mismatch), 2 bad
input (spec error, missing file, bad option).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from stager.mpi.launcher import first_rank_speaks

__all__ = ["main", "COMMANDS"]

#: subcommand name -> (module, one-line help). Kept here, not discovered, so the
#: help text needs no imports.
COMMANDS = {
    "plan": ("stager.commands.plan", "expand a hook spec and print what would be staged"),
    "stage": ("stager.commands.stage", "stage a spec's files to every node (under mpirun)"),
    "verify": ("stager.commands.verify", "re-checksum every node's staged copies (under mpirun)"),
    "clean": ("stager.commands.clean", "remove exactly what was staged (run under mpirun)"),
    "drain": ("stager.commands.drain", "copy node results to the shared filesystem (under mpirun)"),
    "stream": ("streams.cli", "receive live detector streams (under mpirun), or watch"),
    "sbatch": ("stager.commands.sbatch", "render an sbatch template from slurm/"),
}


def _build_parser(command: Optional[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stager",
        description="Collective MPI-IO staging of detector data to node-local storage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``stager`` console script and ``python -m stager``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(command if command in COMMANDS else None)
    with first_rank_speaks(exit_quietly=True):  # under mpirun: a usage error said once
        args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:
        # `stager plan --json | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
