"""What the launcher tells a process before MPI starts: its rank and the job's size.

(And the environment without it, for a program a rank starts as a job of its own:
:func:`without_launcher`.)

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
from typing import Dict, Iterator, Optional

__all__ = ["launcher_rank", "launcher_size", "under_mpi_launcher", "first_rank_speaks",
           "without_launcher"]

#: What an MPI launcher (mpirun, or srun with PMI/PMIx) sets; srun alone sets the Slurm
#: ones, and so does a batch script's own step (one process, no MPI launcher).
_MPI_RANK = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
_MPI_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")
_RANK = _MPI_RANK + ("SLURM_PROCID",)
_SIZE = _MPI_SIZE + ("SLURM_STEP_NUM_TASKS",)


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


def under_mpi_launcher() -> bool:
    """True if an MPI launcher started this process (MPI will join it to a job), not
    only Slurm (a batch script's step, where MPI would run as one rank)."""
    return any(var in os.environ for var in _MPI_RANK + _MPI_SIZE)


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


#: What Open MPI's mpirun (and PMIx, PMI) tell one rank of a running job; the user's own
#: OMPI_MCA_* settings and OMPI_ALLOW_RUN_AS_ROOT* are kept.
_LAUNCHER_PREFIXES = ("PMIX_", "PMI_", "OMPI_COMM_WORLD_", "OMPI_MCA_ess", "OMPI_MCA_orte_",
                      "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME",
                      "OMPI_FILE_LOCATION", "OMPI_UNIVERSE_SIZE", "OMPI_APP_CTX_",
                      "OMPI_NUM_APP_CTX", "OMPI_FIRST_RANKS", "OMPI_COMMAND", "OMPI_ARGV")


def without_launcher(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``env`` (default: this process's) without the variables that place a process in
    the running MPI job."""
    return {k: v for k, v in (os.environ if env is None else env).items()
            if not k.startswith(_LAUNCHER_PREFIXES)}
