"""The dataflow kernel: launches tasks when their inputs exist, retries, records failures.

One :class:`Runtime` belongs to each executor. ``launch`` returns an
:class:`~workflows.futures.AppFuture` immediately; when every future in the
arguments is done the task is handed to the executor
(``executor.launch_call(call, done)``; ``done`` receives the
:class:`~workflows.tasks.Outcome`), and then the app future is resolved,
retried, or failed. A failed input fails the task without
running it (:class:`~workflows.errors.DependencyFailure`). This is the part of
Parsl's DataFlowKernel the workflows need, kept small because the engines
(the mpi executor's dispatcher, process pools, Parsl) schedule and balance load.
A task that ran out of time fails with :class:`~workflows.errors.TaskTimeout`,
one whose process died with :class:`~workflows.errors.TaskCrashed`; the run's
time limit (:meth:`Runtime.configure`) is carried by every task and enforced
where it runs, and :meth:`Runtime.expire` settles what is left when it passed.

The *active* executor -- the one app calls go to -- is a process-wide stack
(not thread-local: completions arrive on executor threads).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from .errors import (DependencyFailure, ExecutorError, NoExecutorError, RemoteError, TaskFailure,
                     TaskTimeout, WorkflowError, abbreviate, failure_class)
from .futures import AppFuture, exception_of, find_futures, substitute, trampoline, when_all
from .limits import Limits, check_seconds, grace_seconds
from .tasks import Outcome, TaskCall

__all__ = ["Runtime", "RunExpired", "active_runtime", "capture_executor_error", "push_active",
           "pop_active"]

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
    """Task bookkeeping for one executor (see the module docstring).

    Run-wide settings (:meth:`configure`): a deadline for the whole run, a
    default timeout for apps without one, isolation of every task. Placement
    counts: ``placed`` tasks asked for a node, ``placed_here`` ran on it.
    """

    def __init__(self, executor: Any):
        self.executor = executor
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._outstanding = 0
        self._live: Dict[int, AppFuture] = {}
        self.launched = 0
        self.succeeded = 0
        self.failures: List[TaskFailure] = []
        self.skipped: List[DependencyFailure] = []
        self.placed = 0
        self.placed_here = 0
        self.deadline: Optional[float] = None
        self.default_timeout: Optional[float] = None
        self.isolate_all = False
        self._limits: Dict[Tuple[Optional[float], bool], Limits] = {}
        self._clock: Optional[threading.Timer] = None
        self.expired = False

    def configure(self, run_seconds: Optional[float] = None,
                  default_timeout: Optional[float] = None, isolate: bool = False) -> None:
        """Run-wide limits for tasks launched from now on.

        Parameters
        ----------
        run_seconds : float, optional
            The run's time limit from now: every task carries the deadline
            (a task still running then is interrupted where it runs, one not
            started is not run), and :data:`~workflows.limits.GRACE` seconds
            later :meth:`expire` settles whatever is left, so that nothing
            waits past it. :attr:`expired` tells whether that happened.
        default_timeout : float, optional
            Timeout of apps that set none.
        isolate : bool
            Isolate every task (``@app(isolate=True)`` for all).
        """
        check_seconds(run_seconds, "the run's time limit")
        self.default_timeout = check_seconds(default_timeout, "default task timeout")
        self.isolate_all = bool(isolate)
        self._limits.clear()
        self.stop_clock()
        self.deadline = None
        if run_seconds is not None:
            self.deadline = time.time() + run_seconds
            after = run_seconds + grace_seconds() + 1.0
            reason = (f"the run's time limit of {run_seconds:g} s (workflows run --timeout) "
                      "passed and the task was still not finished")
            self._clock = threading.Timer(after, self._expire_now, (reason,))
            self._clock.daemon = True
            self._clock.start()

    def _expire_now(self, reason: str) -> None:
        if self.outstanding:
            self.expired = True
            self.expire(reason)

    def stop_clock(self) -> None:
        """Cancel the run's time limit timer (the run is over)."""
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None

    @property
    def past_deadline(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def _limits_for(self, timeout: Optional[float], isolate: bool) -> Limits:
        # One shared Limits object per kind of task: it pickles once per batch.
        key = (timeout if timeout is not None else self.default_timeout,
               isolate or self.isolate_all)
        limits = self._limits.get(key)
        if limits is None:
            limits = self._limits[key] = Limits(key[0], self.deadline, key[1])
        return limits

    # -- launching -------------------------------------------------------
    def launch(self, name: str, target: Any, args: Tuple, kwargs: Dict, retries: int = 0,
               timeout: Optional[float] = None, isolate: bool = False,
               place: Optional[Tuple[Any, bool]] = None) -> AppFuture:
        """Create the task's future and submit it once its inputs are done."""
        fut = self._new_future(name)
        self._track([fut])
        limits = self._limits_for(timeout, isolate)
        if place is not None:
            try:
                place = (self.executor.node_index(place[0], place[1]), place[1])
            except ValueError as exc:
                err = RemoteError("ValueError", str(exc), "", "submitting process")
                self._fail(fut, TaskFailure(fut.task.name, _abbrev(args, kwargs), err))
                return fut
            with self._cond:
                self.placed += 1
        deps = find_futures((args, kwargs))
        if not deps:
            call = TaskCall(fut.task.name, target, args, kwargs, limits, place)
            trampoline(lambda: self._submit(fut, call, 1, retries))
            return fut
        when_all(deps, lambda: self._inputs_done(fut, target, args, kwargs, deps, retries,
                                                 limits, place))
        return fut

    def launch_many(
        self, name: str, target: Any, arg_tuples: List[Tuple], kwargs: Dict, retries: int = 0,
        timeout: Optional[float] = None, isolate: bool = False,
    ) -> List[AppFuture]:
        """:meth:`launch` of one app over many argument tuples (``foreach``); the futures in order.

        Each call is its own task (own future, retries, timeout, failure). The
        calls whose arguments hold no future are handed to the executor
        together (``executor.launch_array(calls, dones)``, when it has one: the
        mpi executor's task arrays, ``docs/DISPATCH.md``); the others wait for
        their inputs and go one by one, as with :meth:`launch`.
        """
        arrays = getattr(self.executor, "launch_array", None)
        if arrays is None or len(arg_tuples) < 2 or find_futures(kwargs):
            return [self.launch(name, target, a, kwargs, retries, timeout, isolate)
                    for a in arg_tuples]
        limits = self._limits_for(timeout, isolate)
        out: List[AppFuture] = []
        ready: List[Tuple[AppFuture, TaskCall]] = []
        plain = _PLAIN
        for a in arg_tuples:
            if not all(type(v) in plain for v in a) and find_futures(a):
                out.append(self.launch(name, target, a, kwargs, retries, timeout, isolate))
                continue
            fut = self._new_future(name)
            out.append(fut)
            ready.append((fut, TaskCall(fut.task.name, target, a, kwargs, limits)))
        self._track([fut for fut, _ in ready])
        if ready:
            trampoline(lambda: self._submit_array(ready, retries))
        return out

    def _new_future(self, name: str) -> AppFuture:
        number = next(self._ids)
        fut = AppFuture(f"{name}#{number}")
        fut.task.number = number
        return fut

    def _track(self, futures: List[AppFuture]) -> None:
        """Count ``futures`` as launched and outstanding (until :meth:`_settle`)."""
        with self._cond:
            self._outstanding += len(futures)
            self.launched += len(futures)
            for fut in futures:
                self._live[fut.task.number] = fut

    def _dropped(self, fut: AppFuture) -> bool:
        """Settle ``fut`` if it is done before it was handed over (cancelled, or expired)."""
        if not fut.done():
            return False
        if self._settle(fut):
            # concurrent.futures.wait() counts a cancelled future only once notified.
            fut.set_running_or_notify_cancel()
        return True

    def _submit_array(self, ready: List[Tuple[AppFuture, TaskCall]], retries: int) -> None:
        calls: List[TaskCall] = []
        dones: List[Any] = []
        for fut, call in ready:
            if self._dropped(fut):
                continue
            fut.task.attempts = 1
            calls.append(call)
            dones.append(self._on_done(fut, call, 1, retries))
        if not calls:
            return
        try:
            self.executor.launch_array(calls, dones)
        except BaseException as exc:
            error = Outcome(None, capture_executor_error(exc), "executor", 0.0, 0.0)
            for done in dones:
                done(error)

    def _on_done(self, fut: AppFuture, call: TaskCall, attempt: int, retries: int) -> Any:
        def done(outcome: Outcome) -> None:
            trampoline(lambda: self._finished(fut, call, attempt, retries, outcome))

        return done

    def _inputs_done(self, fut, target, args, kwargs, deps, retries, limits, place) -> None:
        bad = next((e for e in map(exception_of, deps) if e is not None), None)
        if bad is not None:
            self._fail(fut, DependencyFailure(fut.task.name, _abbrev(args, kwargs), bad))
            return
        call = TaskCall(fut.task.name, target, substitute(args), substitute(kwargs), limits, place)
        self._submit(fut, call, 1, retries)

    def _submit(self, fut: AppFuture, call: TaskCall, attempt: int, retries: int) -> None:
        if self._dropped(fut):
            return
        fut.task.attempts = attempt
        done = self._on_done(fut, call, attempt, retries)
        try:
            self.executor.launch_call(call, done)
        except BaseException as exc:
            done(Outcome(None, capture_executor_error(exc), "executor", 0.0, 0.0))

    def _finished(self, fut, call: TaskCall, attempt: int, retries: int,
                  outcome: Outcome) -> None:
        info = fut.task
        info.where, info.start, info.end = outcome.where, outcome.start, outcome.end
        info.node = outcome.node if outcome.node is not None else self.executor.default_node
        if outcome.error is not None and attempt <= retries and not fut.done():
            self._submit(fut, call, attempt + 1, retries)
            return
        if call.place is not None and info.node == call.place[0]:
            with self._cond:
                self.placed_here += 1
        if outcome.error is None:
            if self._resolve(fut, outcome.value):
                with self._cond:
                    self.succeeded += 1
            return
        cls = failure_class(outcome.error)
        self._fail(fut, cls(info.name, abbreviate(call.args, call.kwargs), outcome.error, attempt))

    def _settle(self, fut: AppFuture) -> bool:
        # Exactly one settlement per task: a result arriving after the run's
        # deadline expired the task is dropped.
        with self._cond:
            if self._live.pop(fut.task.number, None) is None:
                return False
            self._outstanding -= 1
            if self._outstanding == 0:
                self._cond.notify_all()
            return True

    def _resolve(self, fut: AppFuture, value: Any) -> bool:
        if not self._settle(fut):
            return False
        if fut.set_running_or_notify_cancel():
            fut.set_result(value)
        return True

    def _fail(self, fut: AppFuture, error: TaskFailure) -> None:
        if not self._settle(fut):
            return
        with self._cond:
            if isinstance(error, DependencyFailure):
                self.skipped.append(error)
            else:
                self.failures.append(error)
        if fut.set_running_or_notify_cancel():
            fut.set_exception(error)

    def expire(self, reason: str) -> int:
        """Fail every task not finished yet (the run's time limit passed); return how many.

        A task that was running fails with :class:`~workflows.errors.TaskTimeout`
        (its worker may still be busy with it: the executor decides what to
        do with such workers); one still waiting for inputs is not run.
        """
        with self._cond:
            live = list(self._live.values())
        for fut in live:
            info = fut.task
            if info.attempts:
                err = RemoteError("TaskTimeout", reason, "", info.where or "unknown worker",
                                  kind="timeout")
                self._fail(fut, TaskTimeout(info.name, "...", err, info.attempts))
            else:
                self._fail(fut, DependencyFailure(info.name, "...", RunExpired(reason)))
        return len(live)

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
            if self.placed:
                text += (
                    f"; placement: {self.placed_here} of {self.placed} placed tasks ran on "
                    f"their node"
                )
        for err in failures[:limit]:
            text += "\n\n" + err.details()
        if len(failures) > limit:
            text += f"\n\n... and {len(failures) - limit} more failed tasks"
        return text


#: Argument types that never hold a future (``launch_many`` skips looking inside them).
_PLAIN = frozenset((int, float, str, bytes, bool, type(None), complex))


class RunExpired(WorkflowError):
    """The run's time limit passed (``workflows run --timeout``)."""


def _abbrev(args: Tuple, kwargs: Dict) -> str:
    # Unresolved futures would render as reprs of futures; name the tasks instead.
    def show(v: Any) -> Any:
        return f"<{v.task.name}>" if isinstance(v, AppFuture) else v

    return abbreviate(tuple(show(a) for a in args), {k: show(v) for k, v in kwargs.items()})


def capture_executor_error(exc: BaseException) -> RemoteError:
    """A RemoteError for an executor that failed to run a task (no Outcome came back)."""
    err = RemoteError.capture(exc)
    if isinstance(exc, ExecutorError):
        return err
    return dataclasses.replace(err, message=f"executor failed to run the task: {err.message}",
                               where="submitting process", exit_code=None, stderr_tail="")
