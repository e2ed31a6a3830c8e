"""What travels to a worker: a picklable task call, and what comes back.

An ``@app`` function is sent *by reference* (module, qualified name, source
file), not by value: the worker imports the module -- or loads the source file
when the module is not importable there, as for a workflow file given on the
command line -- and calls the undecorated function. Functions that have no
importable name (closures, lambdas) are sent by value with ``dill``, which
Parsl already depends on. A worker never raises: it returns an
:class:`Outcome` carrying either the value or a :class:`RemoteError`, so an
exception that does not pickle cannot break the executor.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import RemoteError, where

__all__ = ["FunctionRef", "TaskCall", "Outcome", "execute"]

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
            return importlib.import_module(name)
        except ImportError:
            if not self.path:
                raise
        return load_module_from_path(name, self.path)


def load_module_from_path(name: str, path: str):
    """Import the source file ``path`` as module ``name`` and register it."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@dataclass(frozen=True)
class Outcome:
    """A task's result as sent back by the worker: a value or an error."""

    value: Any
    error: Optional[RemoteError]
    where: str
    start: float
    end: float


@dataclass(frozen=True)
class TaskCall:
    """One attempt of one task, with its dependencies already replaced by values.

    ``target`` is a :class:`FunctionRef` or any picklable callable (a
    ``workflows.command.CommandSpec`` for command apps).
    """

    name: str
    target: Any
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]

    def __call__(self) -> Outcome:
        return execute(self)


def execute(call: TaskCall) -> Outcome:
    """Run ``call`` here and return its :class:`Outcome`; never raises."""
    start = time.time()
    try:
        target = call.target
        fn = target.resolve() if isinstance(target, FunctionRef) else target
        value = fn(*call.args, **call.kwargs)
        return Outcome(value, None, where(), start, time.time())
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not _in_worker():
            raise
        return Outcome(None, RemoteError.capture(exc), where(), start, time.time())


def execute_batch(calls: Tuple[TaskCall, ...]) -> Tuple[Outcome, ...]:
    """Run several small tasks in one executor round trip (see ``MPIExecutor``)."""
    return tuple(execute(c) for c in calls)


def _in_worker() -> bool:
    # In the submitting process (inline executor), Ctrl-C must still stop the run.
    return os.environ.get("WORKFLOWS_WORKER") == "1"
