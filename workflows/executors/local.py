"""The local executor: a process pool on this machine (``concurrent.futures``).

Workers are forked by default, so they inherit the modules the submitting
process loaded (a workflow file loaded by path included); with another start
method, :class:`~workflows.tasks.FunctionRef` reloads such files by path.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable, Dict, Optional

from core.options import parse_choice, parse_int

from ..errors import RemoteError
from ..node import set_node, this_node
from ..tasks import Outcome, TaskCall
from .base import Executor, env_option

__all__ = ["LocalExecutor"]

_START_METHODS = ("fork", "forkserver", "spawn")


def _worker_init(node: str) -> None:
    os.environ["WORKFLOWS_WORKER"] = "1"
    # Ctrl-C reaches the terminal's whole process group: the runner says it once and
    # ends the pool (workflows.run), not a KeyboardInterrupt traceback per worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_node(node)   # a forkserver or spawn worker does not inherit the runner's


class LocalExecutor(Executor):
    """A pool of worker processes.

    Parameters
    ----------
    max_workers : int, optional
        Default: ``WORKFLOWS_LOCAL_WORKERS``, else the number of CPUs.
    start_method : str, optional
        ``fork`` (default), ``forkserver`` or ``spawn``; default:
        ``WORKFLOWS_LOCAL_START_METHOD``.
    """

    name = "local"

    @classmethod
    def run_options(cls, opts: Any, job: Any = None) -> Dict[str, Any]:
        return {"max_workers": opts.workers}

    def __init__(self, max_workers: Optional[int] = None, start_method: Optional[str] = None):
        super().__init__()
        self._workers = env_option(max_workers, "WORKFLOWS_LOCAL_WORKERS", os.cpu_count() or 1,
                                   parse_int(1), "max_workers")
        method = env_option(start_method, "WORKFLOWS_LOCAL_START_METHOD", "fork",
                            parse_choice(*_START_METHODS), "start_method")
        self._pool = ProcessPoolExecutor(self._workers,
                                         mp_context=multiprocessing.get_context(method),
                                         initializer=_worker_init, initargs=(this_node(),))

    @property
    def workers(self) -> int:
        return self._workers

    def launch_call(self, call: TaskCall, done: Callable[[Outcome], None]) -> None:
        def finished(outcome: Outcome) -> None:
            err = outcome.error
            if err is not None and err.type_name.endswith("BrokenProcessPool"):
                # The pool cannot say which task killed its worker; isolation can.
                err = RemoteError(
                    "TaskCrashed",
                    "a worker process of the local pool died (a task killed its process: a "
                    "signal or os._exit) while this task was queued or running there; every "
                    "such task fails. Run with --isolate (or @app(isolate=True)) to learn which "
                    "task it was and its signal",
                    err.traceback,
                    "local process pool",
                    kind="crash",
                )
                outcome = Outcome(None, err, outcome.where, outcome.start, outcome.end)
            done(outcome)

        super().launch_call(call, finished)

    def submit(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        self._check_open()
        return self._pool.submit(fn, *args, **kwargs)

    def _shutdown(self, wait: bool) -> None:
        if not wait:
            # A task that ignores its timeout interrupt (stuck in native code)
            # would keep the interpreter from exiting: end the workers.
            # ProcessPoolExecutor has no public way before Python 3.14.
            for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
                if proc.is_alive():
                    proc.kill()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
