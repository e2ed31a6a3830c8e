"""What the launcher tells a process before MPI starts: its rank and the job's size.

``mpirun`` (Open MPI), PMI/PMIx launchers and ``srun`` put them in the
environment, so a command can know before importing MPI whether it runs under
a launcher and whether it is the first rank -- to print an argument error once
instead of once per rank (:func:`first_rank_speaks`), or to say that a
collective command started without a launcher runs as one rank.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator, Optional

__all__ = ["launcher_rank", "launcher_size", "first_rank_speaks"]

_RANK = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")


def _first_int(names: tuple) -> Optional[int]:
    for var in names:
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            continue
    return None


def launcher_rank() -> Optional[int]:
    """This process's rank as the launcher set it, or ``None`` (not started by one)."""
    return _first_int(_RANK)


def launcher_size() -> Optional[int]:
    """The number of ranks the launcher started, or ``None`` (not started by one)."""
    return _first_int(_SIZE)


@contextlib.contextmanager
def first_rank_speaks(exit_quietly: bool = False) -> Iterator[None]:
    """Inside the block only the first rank (or a process without a launcher) writes to
    stdout and stderr: what every rank would print alike (argparse's usage and error)
    is printed once. Exceptions pass through unchanged; with ``exit_quietly`` a
    ``SystemExit`` of another rank becomes exit 0, so that the first rank's status ends
    the job (one that left first with an error made ``mpirun`` end the job before the
    first rank had said why)."""
    if (launcher_rank() or 0) == 0:
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null), \
            contextlib.redirect_stdout(null):
        try:
            yield
        except SystemExit:
            if exit_quietly:
                raise SystemExit(0) from None
            raise
        finally:
            sys.stderr.flush()
