"""``stager`` command line: one subcommand per module in ``stager/commands/``.

``stager stream`` is the verb of the streaming package, which sits on stager: its
module (``streams.cli``) is named in :data:`COMMANDS` as a string and imported only
when the verb runs, so nothing in ``stager`` imports ``streams``.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``;
its row and one-line help are in :data:`COMMANDS` (a :class:`core.table.Table`).
Modules are imported only when their command runs, so ``stager plan`` never
imports MPI.

Exit codes: 0 success, 1 a runtime failure (staging, verify mismatch), 2 bad
input (spec error, missing file, bad option).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional

from core.table import Table

from core.mpi.launcher import first_rank_speaks

__all__ = ["main", "COMMANDS"]

#: subcommand name -> its module, and its one-line help. Kept here, not discovered, so
#: the help text needs no imports.
COMMANDS: Table[Any] = Table("command", {
    "plan": "stager.commands.plan",
    "stage": "stager.commands.stage",
    "verify": "stager.commands.verify",
    "clean": "stager.commands.clean",
    "drain": "stager.commands.drain",
    "stream": "streams.cli",
    "sbatch": "stager.commands.sbatch",
}, about={
    "plan": "expand a hook spec and print what would be staged",
    "stage": "stage a spec's files to every node (under mpirun)",
    "verify": "re-checksum every node's staged copies (under mpirun)",
    "clean": "remove exactly what was staged (run under mpirun)",
    "drain": "copy node results to the shared filesystem (under mpirun)",
    "stream": "receive live detector streams (under mpirun), or watch",
    "sbatch": "render an sbatch template from slurm/",
})

def _build_parser(command: Optional[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stager",
        description="Collective MPI-IO staging of detector data to node-local storage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        help_text = COMMANDS.about(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            COMMANDS.load(name).add_arguments(p)
    return parser


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace
            ) -> argparse.ArgumentParser:
    """The innermost (sub)command parser ``args`` went through (``stager stream receive``'s)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(args, action.dest, None) or "")
            if sub is not None:
                return _chosen(sub, args)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``stager`` console script and ``python -m stager``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(command if command in COMMANDS else None)
    with first_rank_speaks(exit_quietly=True):  # under mpirun: a usage error said once
        args, extra = parser.parse_known_args(argv)
        if extra:   # the subcommand's usage, not stager's (argparse leaves them to the top)
            _chosen(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    module = COMMANDS.load(args.command)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        # Ctrl-C in a command that reads or renders (plan, sbatch, stream watch): one line,
        # no traceback; the MPI commands stop through core.interrupt and say more
        print(f"{_chosen(parser, args).prog}: interrupted by SIGINT; nothing was being "
              "written", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        # `stager plan --json | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
