"""The one interface every executor implements: ``submit -> Future``, ``shutdown``, ``with``.

Executors are engines (the caller's thread, a process pool, Parsl, and the
mpi executor's own dispatcher); this module only gives them one shape. Each
executor owns a :class:`~workflows.runtime.Runtime` that resolves task
dependencies on the submitting side, so ``submit`` only ever receives tasks
whose inputs are ready. ``with executor:`` makes it the target of app calls,
and on leaving waits for every launched task before shutting down.
"""

from __future__ import annotations

import abc
import gc
import socket
from concurrent.futures import Future
from typing import Any, Callable, Dict, Optional, Tuple, Union

from ..errors import ExecutorError
from ..futures import exception_of
from ..runtime import Runtime, capture_executor_error, pop_active, push_active
from ..tasks import Outcome, TaskCall, execute

__all__ = ["Executor", "env_option", "raise_gc_threshold", "restore_gc_threshold"]


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

    @classmethod
    def run_options(cls, opts: Any, job: Any = None) -> Dict[str, Any]:
        """This executor's keyword options from ``workflows run``'s parsed options
        (``--workers``, ``--dispatch``, ...) and the job: each executor picks its own,
        so adding one is its module and a row of ``ROWS``, not a branch in the runner."""
        return {}

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

    def launch_call(self, call: TaskCall, done: Callable[[Outcome], None]) -> None:
        """Submit one task attempt; call ``done(outcome)`` when it finished (any thread).

        The runtime's entry point. This default goes through :meth:`submit_call`
        and the engine's future; an executor with its own dispatcher (mpi)
        calls ``done`` directly and saves the future's locks and callbacks.
        """
        fut = self.submit_call(call)

        def finished(f: Future) -> None:
            exc = exception_of(f)
            if exc is not None:
                # The engine failed (broken pool, pickling, shutdown, a task
                # cancelled by shutdown(wait=False)): no Outcome.
                done(Outcome(None, capture_executor_error(exc), "executor", 0.0, 0.0))
            else:
                done(f.result())

        fut.add_done_callback(finished)

    @property
    def nodes(self) -> Tuple[str, ...]:
        """Names of the nodes tasks run on, by index (one node: this host)."""
        return (socket.gethostname(),)

    #: The node of a task whose outcome does not say (executors on one node).
    default_node: Optional[int] = 0

    def node_index(self, node: Union[int, str], hard: bool = False) -> int:
        """The index of ``node`` (an index or a name) among :attr:`nodes`.

        ``hard``: the task must run there (an executor may refuse a node
        without workers).

        Raises
        ------
        ValueError
            Naming the nodes there are.
        """
        names = self.nodes
        if isinstance(node, int) and not isinstance(node, bool) and 0 <= node < len(names):
            return node
        if isinstance(node, str) and node in names:
            return names.index(node)
        shown = ", ".join(f"{i}={n}" for i, n in enumerate(names[:8]))
        more = f", ... ({len(names)} nodes)" if len(names) > 8 else ""
        raise ValueError(
            f"no node {node!r} on the {self.name} executor (its nodes: {shown}{more}); place "
            "tasks with a node index or name of this run"
        )

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

    def __enter__(self) -> Optional[Executor]:
        self._gc_saved = raise_gc_threshold()
        push_active(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.runtime.wait()
        finally:
            pop_active(self)
            self.shutdown(wait=True)
            restore_gc_threshold(getattr(self, "_gc_saved", None))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} workers={self.workers} {state}>"


#: Python's cyclic garbage collector's first threshold while an executor is
#: active in the submitting process (``WORKFLOWS_GC_THRESHOLD``; 0 keeps Python's
#: 700). Each task allocates a dozen tracked objects (its future, condition,
#: lists, closures), so with 700 a collection runs every ~60 tasks and walks
#: them, about half the root's per-task cost (figures: ``bench/results/history.md``).
#: Garbage cycles wait a little longer, that is all.
GC_THRESHOLD = 20000


def raise_gc_threshold() -> Optional[Tuple[int, int, int]]:
    """Raise the collector's thresholds for a run; returns the old ones (None: unchanged)."""
    from core.options import parse_int

    value = env_option(None, "WORKFLOWS_GC_THRESHOLD", GC_THRESHOLD, parse_int(0), "gc threshold")
    old = gc.get_threshold()
    if value <= old[0]:
        return None
    gc.set_threshold(value, max(old[1], 20), max(old[2], 20))
    return old


def restore_gc_threshold(old: Optional[Tuple[int, int, int]]) -> None:
    if old is not None:
        gc.set_threshold(*old)


def env_option(value: Any, var: str, default: Any, parse: Callable[[Any, str], Any],
               name: str) -> Any:
    """Keyword ``name`` > environment variable ``var`` > default, parsed strictly by
    ``parse`` (:func:`core.options.resolve` of one option); an ExecutorError names it."""
    from core.options import Option, resolve

    try:
        return resolve([Option(name, default, parse, var)], {name: value})[name]
    except ValueError as e:
        raise ExecutorError(str(e)) from None
