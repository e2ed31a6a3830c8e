"""The dataflow kernel: launches tasks when their inputs exist, retries, records failures.

One :class:`Runtime` belongs to each executor. ``launch`` returns an
:class:`~workflows.futures.AppFuture` immediately; when every future in the
arguments is done the task is handed to the executor (its engine future
carries an :class:`~workflows.tasks.Outcome`), and when that finishes the app
future is resolved, retried, or failed. A failed input fails the task without
running it (:class:`~workflows.errors.DependencyFailure`). This is the part of
Parsl's DataFlowKernel the workflows need, kept small because the engines
(mpi4py.futures, process pools, Parsl) already schedule and balance load.

The *active* executor -- the one app calls go to -- is a process-wide stack
(not thread-local: completions arrive on executor threads).
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Tuple

from .errors import (
    CommandFailure,
    DependencyFailure,
    ExecutorError,
    NoExecutorError,
    RemoteError,
    TaskFailure,
    abbreviate,
)
from .futures import (
    AppFuture,
    exception_of,
    find_futures,
    substitute,
    trampoline,
    when_all,
)
from .tasks import Outcome, TaskCall

__all__ = ["Runtime", "active_runtime", "push_active", "pop_active"]

_ACTIVE: List[Any] = []
_ACTIVE_LOCK = threading.Lock()


def push_active(executor: Any) -> None:
    """Make ``executor`` the one app calls go to (until :func:`pop_active`)."""
    with _ACTIVE_LOCK:
        _ACTIVE.append(executor)


def pop_active(executor: Any) -> None:
    with _ACTIVE_LOCK:
        if executor in _ACTIVE:
            _ACTIVE.remove(executor)


def active_runtime() -> Runtime:
    """The runtime of the innermost active executor.

    Raises
    ------
    NoExecutorError
        If no executor is active.
    """
    with _ACTIVE_LOCK:
        if not _ACTIVE:
            raise NoExecutorError(
                "no executor is active: call apps inside `with workflows.executors.make"
                "('inline'):` (or local/mpi/parsl), or run the flow with "
                "`python -m workflows run FLOW.py`"
            )
        return _ACTIVE[-1].runtime


class Runtime:
    """Task bookkeeping for one executor (see the module docstring)."""

    def __init__(self, executor: Any):
        self.executor = executor
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._outstanding = 0
        self.launched = 0
        self.succeeded = 0
        self.failures: List[TaskFailure] = []
        self.skipped: List[DependencyFailure] = []

    # -- launching -------------------------------------------------------
    def launch(
        self, name: str, target: Any, args: Tuple, kwargs: Dict, retries: int = 0
    ) -> AppFuture:
        """Create the task's future and submit it once its inputs are done."""
        fut = AppFuture(f"{name}#{next(self._ids)}")
        with self._cond:
            self._outstanding += 1
            self.launched += 1
        deps = find_futures((args, kwargs))
        when_all(deps, lambda: self._inputs_done(fut, target, args, kwargs, deps, retries))
        return fut

    def _inputs_done(self, fut, target, args, kwargs, deps, retries) -> None:
        bad = next((e for e in map(exception_of, deps) if e is not None), None)
        if bad is not None:
            self._fail(fut, DependencyFailure(fut.task.name, _abbrev(args, kwargs), bad))
            return
        call = TaskCall(fut.task.name, target, substitute(args), substitute(kwargs))
        self._submit(fut, call, 1, retries)

    def _submit(self, fut: AppFuture, call: TaskCall, attempt: int, retries: int) -> None:
        fut.task.attempts = attempt
        try:
            engine = self.executor.submit_call(call)
        except BaseException as exc:
            engine = Future()
            engine.set_exception(exc)
        engine.add_done_callback(
            lambda ef: trampoline(lambda: self._finished(fut, call, attempt, retries, ef))
        )

    def _finished(self, fut, call: TaskCall, attempt: int, retries: int, engine: Future) -> None:
        exc = exception_of(engine)
        if exc is not None:
            # The engine itself failed (broken pool, pickling, shutdown, a task
            # cancelled by shutdown(wait=False)): no Outcome.
            outcome = Outcome(None, _capture(exc), "executor", 0.0, 0.0)
        else:
            outcome = engine.result()
        info = fut.task
        info.where, info.start, info.end = outcome.where, outcome.start, outcome.end
        if outcome.error is None:
            with self._cond:
                self.succeeded += 1
            self._resolve(fut, outcome.value)
            return
        if attempt <= retries:
            self._submit(fut, call, attempt + 1, retries)
            return
        cls = CommandFailure if outcome.error.exit_code is not None else TaskFailure
        self._fail(fut, cls(info.name, abbreviate(call.args, call.kwargs), outcome.error, attempt))

    def _resolve(self, fut: AppFuture, value: Any) -> None:
        if fut.set_running_or_notify_cancel():
            fut.set_result(value)
        self._one_less()

    def _fail(self, fut: AppFuture, error: TaskFailure) -> None:
        with self._cond:
            if isinstance(error, DependencyFailure):
                self.skipped.append(error)
            else:
                self.failures.append(error)
        if fut.set_running_or_notify_cancel():
            fut.set_exception(error)
        self._one_less()

    def _one_less(self) -> None:
        with self._cond:
            self._outstanding -= 1
            if self._outstanding == 0:
                self._cond.notify_all()

    # -- waiting and reporting -------------------------------------------
    @property
    def outstanding(self) -> int:
        """Tasks launched and not yet finished (including those waiting for inputs)."""
        with self._cond:
            return self._outstanding

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until every launched task finished; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._outstanding == 0, timeout)

    def summary(self, limit: int = 10) -> str:
        """A human summary: counts, then each failed task with its remote traceback."""
        with self._cond:
            failures, skipped = list(self.failures), len(self.skipped)
            text = (
                f"{self.launched} tasks: {self.succeeded} succeeded, {len(failures)} failed, "
                f"{skipped} not run because an input failed"
            )
        for err in failures[:limit]:
            text += "\n\n" + err.details()
        if len(failures) > limit:
            text += f"\n\n... and {len(failures) - limit} more failed tasks"
        return text


def _abbrev(args: Tuple, kwargs: Dict) -> str:
    # Unresolved futures would render as reprs of futures; name the tasks instead.
    def show(v: Any) -> Any:
        return f"<{v.task.name}>" if isinstance(v, AppFuture) else v

    return abbreviate(tuple(show(a) for a in args), {k: show(v) for k, v in kwargs.items()})


def _capture(exc: BaseException) -> RemoteError:
    err = RemoteError.capture(exc)
    if isinstance(exc, ExecutorError):
        return err
    return RemoteError(
        err.type_name,
        f"executor failed to run the task: {err.message}",
        err.traceback,
        "submitting process",
    )
