"""The MPI executor: ``mpi4py.futures.MPICommExecutor`` on the communicator that staged.

Rank ``root`` runs the workflow's ``main`` and submits tasks; every other rank
serves tasks, with mpi4py's dynamic load balancing (a task goes to whichever
worker is free). As with ``MPICommExecutor``, entering the context returns the
executor on the root and -- only after the root shut it down -- ``None`` on
the other ranks::

    with MPIExecutor(comm) as ex:
        if ex is not None:          # root: build the graph, wait for results
            print(main(args).result())
    # every rank continues here once all tasks are done

The communicator is a parameter (``comm=None`` means ``MPI.COMM_WORLD``) and
the arguments are checked before the first collective, so all ranks fail alike.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Any, Callable, Optional

from ..errors import ExecutorError
from ..runtime import push_active
from .base import Executor

__all__ = ["MPIExecutor"]


class MPIExecutor(Executor):
    """Tasks on the ranks of ``comm`` other than ``root`` (collective context manager).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm, optional
        The communicator (default ``MPI.COMM_WORLD``). With one rank, tasks run
        in a thread of that rank (mpi4py's own fallback).
    root : int
        The rank that runs the workflow's main.
    **options
        Passed to ``MPICommExecutor`` (e.g. ``backoff``).
    """

    name = "mpi"

    def __init__(self, comm: Any = None, root: int = 0, **options: Any):
        super().__init__()
        from mpi4py import MPI

        comm = MPI.COMM_WORLD if comm is None else comm
        if comm.Is_inter():
            raise ExecutorError("MPIExecutor needs an intracommunicator")
        if not (0 <= root < comm.Get_size()):
            raise ExecutorError(f"root={root}: expecting root in range({comm.Get_size()})")
        self.comm = comm
        self.root = root
        self._options = options
        self._ctx: Any = None
        self._pool: Any = None

    @property
    def workers(self) -> int:
        return max(1, self.comm.Get_size() - 1)

    def __enter__(self) -> Optional[MPIExecutor]:
        """Collective over `comm`: every rank must call. Root gets the executor, others None."""
        from mpi4py.futures import MPICommExecutor

        if self._ctx is not None or self._closed:
            raise ExecutorError("an MPIExecutor can be entered only once")
        self._ctx = MPICommExecutor(self.comm, self.root, **self._options)
        serving = self.comm.Get_rank() != self.root and self.comm.Get_size() > 1
        old = os.environ.get("WORKFLOWS_WORKER")
        if serving:
            os.environ["WORKFLOWS_WORKER"] = "1"
        try:
            pool = self._ctx.__enter__()  # on workers: serves until the root shuts down
        finally:
            if serving:
                _restore("WORKFLOWS_WORKER", old)
        if pool is None:
            self._ctx.__exit__(None, None, None)
            self._closed = True
            return None
        self._pool = pool
        push_active(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._pool is None:  # a worker rank: nothing left to do
            return None
        return super().__exit__(exc_type, exc, tb)

    def submit(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        self._check_open()
        if self._pool is None:
            raise ExecutorError(
                "MPIExecutor.submit outside its context: use `with MPIExecutor(comm) as ex:` "
                "and submit on the root only (ex is None on the other ranks)"
            )
        return self._pool.submit(fn, *args, **kwargs)

    def _shutdown(self, wait: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)
            self._ctx.__exit__(None, None, None)


def _restore(var: str, old: Optional[str]) -> None:
    if old is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = old
