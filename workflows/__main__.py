"""``python -m workflows run FLOW.py [options] [-- flow args]`` (see :mod:`workflows.run`)."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: python -m workflows run FLOW.py [--executor mpi|local|inline|parsl] "
            "[--stage SPEC] [--emulate-nodes K] [--node-id-env VAR] [--out DIR] "
            "[--leader-hook-startup X] [--leader-hook-shutdown X] [-- flow args]\n"
            "       python -m workflows run --help   for every option"
        )
        return 0 if argv else 2
    if argv[0] != "run":
        print(f"error: unknown command {argv[0]!r}; the only command is `run`", file=sys.stderr)
        return 2
    from .run import main as run_main

    return run_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
