"""The one interface every executor implements: ``submit -> Future``, ``shutdown``, ``with``.

Executors are engines that already exist (the caller's thread, a process
pool, ``mpi4py.futures``, Parsl); this module only gives them one shape. Each
executor owns a :class:`~workflows.runtime.Runtime` that resolves task
dependencies on the submitting side, so ``submit`` only ever receives tasks
whose inputs are ready. ``with executor:`` makes it the target of app calls,
and on leaving waits for every launched task before shutting down.
"""

from __future__ import annotations

import abc
import os
from concurrent.futures import Future
from typing import Any, Callable, Optional

from ..errors import ExecutorError
from ..runtime import Runtime, pop_active, push_active
from ..tasks import TaskCall, execute

__all__ = ["Executor", "env_int"]


class Executor(abc.ABC):
    """Abstract executor (see the module docstring).

    Subclasses implement :meth:`submit`, :meth:`_shutdown` and
    :attr:`workers`; they may override :meth:`submit_call` to batch tasks.
    """

    #: Name used by ``make()`` and ``--executor``.
    name = "abstract"

    def __init__(self) -> None:
        self.runtime = Runtime(self)
        self._closed = False

    @abc.abstractmethod
    def submit(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        """Schedule ``fn(*args, **kwargs)``; return a future of its result."""

    @abc.abstractmethod
    def _shutdown(self, wait: bool) -> None:
        """Release the engine (workers, threads, connections)."""

    @property
    @abc.abstractmethod
    def workers(self) -> int:
        """How many tasks can run at once."""

    def submit_call(self, call: TaskCall) -> Future:
        """Submit one task attempt; the future's result is a :class:`~workflows.tasks.Outcome`."""
        self._check_open()
        return self.submit(execute, call)

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorError(f"the {self.name} executor is shut down: no new tasks can start")

    def shutdown(self, wait: bool = True) -> None:
        """Stop accepting tasks and release the engine (idempotent).

        With ``wait=True`` first waits for every task launched through apps.
        """
        if self._closed:
            return
        if wait:
            self.runtime.wait()
        self._closed = True
        self._shutdown(wait)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Optional[Executor]:
        push_active(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.runtime.wait()
        finally:
            pop_active(self)
            self.shutdown(wait=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} workers={self.workers} {state}>"


def env_int(value: Optional[int], var: str, default: int, minimum: int = 1) -> int:
    """Config precedence keyword > environment variable > default, parsed strictly."""
    if value is None:
        text = os.environ.get(var)
        if text is None or text == "":
            return default
        try:
            value = int(text)
        except ValueError:
            raise ExecutorError(f"{var}={text!r} is not an integer") from None
        source = var
    else:
        source = "argument"
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ExecutorError(f"{source}: expected an integer >= {minimum}, got {value!r}")
    return value
