"""What travels to a worker: a picklable task call, and what comes back.

An ``@app`` function is sent *by reference* (module, qualified name, source
file), not by value: the worker imports the module -- or loads the source file
when the module is not importable there, as for a workflow file given on the
command line -- and calls the undecorated function. Functions that have no
importable name (closures, lambdas) are sent by value with ``dill``, which
Parsl already depends on. A worker never raises: it returns an
:class:`Outcome` carrying either the value or a :class:`RemoteError`, so an
exception that does not pickle cannot break the executor.

:func:`execute` also applies the task's :class:`~workflows.limits.Limits`:
its time limit (an interrupt raised inside the task, see
:mod:`workflows.limits`) and isolation (the task runs in this process's
forked runner, see :mod:`workflows.isolate`), so every executor enforces
them the same way, in the process that runs the task.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from core.table import load_module, load_path

from .errors import RemoteError, where
from .limits import NO_LIMITS, Limits, TaskInterrupt, alarm

__all__ = ["FunctionRef", "TaskCall", "Outcome", "execute", "where_cached"]

# Worker-side cache: resolving a reference costs an import walk; a worker runs
# thousands of tasks of the same few functions.
_RESOLVED: Dict[FunctionRef, Callable] = {}


@dataclass(frozen=True)
class FunctionRef:
    """A function's importable address (or its ``dill`` bytes as a last resort)."""

    module: str
    qualname: str
    path: Optional[str] = None
    by_value: Optional[bytes] = None

    def __reduce__(self):
        # A plain tuple: pickles in a third of a dataclass's time (it travels with every task).
        return (FunctionRef, (self.module, self.qualname, self.path, self.by_value))

    @classmethod
    def of(cls, fn: Callable) -> FunctionRef:
        """Reference ``fn``; functions without an importable name go by value."""
        module = getattr(fn, "__module__", None) or "__main__"
        qualname: str = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", ""))
        try:
            path = inspect.getsourcefile(fn)
        except TypeError:
            path = None
        if "<locals>" in qualname or "<lambda>" in qualname or not qualname:
            import dill

            return cls(module, qualname, path, dill.dumps(fn, recurse=True))
        return cls(module, qualname, os.path.abspath(path) if path else None)

    def resolve(self) -> Callable:
        """Return the plain function on this process (imports or loads as needed)."""
        fn = _RESOLVED.get(self)
        if fn is None:
            fn = self._resolve()
            _RESOLVED[self] = fn
        return fn

    def _resolve(self) -> Callable:
        if self.by_value is not None:
            import dill

            return dill.loads(self.by_value)
        module = self._module()
        obj: Any = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        # The module attribute is the App wrapper; the worker wants the function.
        return getattr(obj, "fn", obj)

    def _module(self):
        name = self.module
        mod = sys.modules.get(name)
        if name == "__main__" and mod is not None and self.path:
            if os.path.abspath(getattr(mod, "__file__", "") or "") != self.path:
                # A different program's __main__ (e.g. an MPI worker started by
                # `python -m workflows`): load the file under a private name.
                name, mod = "__workflows_main__", sys.modules.get("__workflows_main__")
        if mod is not None:
            return mod
        try:
            return load_module(name)
        except ImportError:
            if not self.path:
                raise
        return load_path(self.path, name)


@dataclass(frozen=True)
class Outcome:
    """A task's result as sent back by the worker: a value or an error.

    ``node`` is the index of the node it ran on, when the executor knows nodes
    (the mpi executor); ``None`` otherwise.
    """

    value: Any
    error: Optional[RemoteError]
    where: str
    start: float
    end: float
    node: Optional[int] = None

    def unpicklable(self, exc: BaseException) -> Outcome:
        """This outcome with its value replaced by an error saying it does not pickle."""
        err = RemoteError(type(exc).__name__,
                          f"the task's result cannot be sent back (it does not pickle): {exc}", "",
                          self.where)
        return Outcome(None, err, self.where, self.start, self.end, self.node)


class TaskCall:
    """One attempt of one task, with its dependencies already replaced by values.

    ``target`` is a :class:`FunctionRef` or any picklable callable (a
    ``workflows.command.CommandSpec`` for command apps). ``limits`` says how
    long it may run and whether it runs isolated; ``place`` is ``None`` or
    ``(node, hard)``: the node index it should run on, and whether it must.
    """

    __slots__ = ("name", "target", "args", "kwargs", "limits", "place")

    def __init__(self, name: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 limits: Limits = NO_LIMITS, place: Optional[Tuple[int, bool]] = None):
        self.name = name
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.limits = limits
        self.place = place

    def __reduce__(self):
        return (TaskCall, (self.name, self.target, self.args, self.kwargs, self.limits, self.place))

    def __repr__(self) -> str:
        return f"TaskCall({self.name!r}, {self.target!r}, limits={self.limits}, place={self.place})"

    def __call__(self) -> Outcome:
        return execute(self)


def execute(call: TaskCall) -> Outcome:
    """Run ``call`` here (or in this process's isolated runner) and return its Outcome.

    Never raises, except ``KeyboardInterrupt``/``SystemExit`` outside a worker.
    Time limits are enforced with :func:`~workflows.limits.alarm`.
    """
    limits = call.limits
    if os.environ.get("WORKFLOWS_ISOLATED") != "1" and (
        limits.isolate
        or (limits.bounded and threading.current_thread() is not threading.main_thread())
    ):
        # A time limit outside the main thread cannot interrupt a blocked system call
        # (workflows.limits): such a task runs isolated, where a kill ends it.
        return _execute_isolated(call)
    start = time.time()
    left = limits.seconds_left(start) if limits.bounded else None
    try:
        target = call.target
        fn = target.resolve() if isinstance(target, FunctionRef) else target
        with alarm(left) as timer:
            value = fn(*call.args, **call.kwargs)
        if timer.fired:  # it swallowed the interrupt(s), then returned: still too late
            raise TaskInterrupt()
        return Outcome(value, None, where_cached(), start, time.time())
    except TaskInterrupt as exc:
        return Outcome(None, _timeout_error(exc, limits, start, left), where_cached(), start,
                       time.time())
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not _in_worker():
            raise
        return Outcome(None, RemoteError.capture(exc), where_cached(), start, time.time())


def _timeout_error(exc: BaseException, limits: Limits, start: float,
                   left: Optional[float]) -> RemoteError:
    if left is not None and left <= 0:
        message = "not started: the run's time limit (workflows run --timeout) had passed"
    else:
        message = f"ran past {limits.describe(start)} and was interrupted"
    err = RemoteError.capture(exc)
    return RemoteError("TaskTimeout", message, err.traceback, err.where, kind="timeout")


def _execute_isolated(call: TaskCall) -> Outcome:
    from .isolate import runner

    start = time.time()
    left = call.limits.seconds_left(start) if call.limits.bounded else None
    kind, value = runner(execute).call(call, left)
    if kind == "ok":
        return value
    here = where_cached()
    if kind == "timeout":
        err = RemoteError("TaskTimeout",
                          f"ran past {call.limits.describe(start)} and did not stop; {value}", "",
                          here, kind="timeout")
    else:
        message, _code = value
        err = RemoteError("TaskCrashed", f"{message} while running the task", "", here,
                          kind="crash")
    return Outcome(None, err, here, start, time.time())


def _in_worker() -> bool:
    # In the submitting process (inline executor), Ctrl-C must still stop the run.
    return os.environ.get("WORKFLOWS_WORKER") == "1"


_WHERE: Tuple[Any, str] = ((None, None), "")


def where_cached() -> str:
    """:func:`workflows.errors.where`, computed once per process (and MPI state)."""
    global _WHERE
    key = (os.getpid(), "mpi4py.MPI" in sys.modules)
    if _WHERE[0] != key:
        _WHERE = (key, where())
    return _WHERE[1]
