"""``@app`` and ``@command``: functions and programs that become tasks when called.

Calling an app returns an :class:`~workflows.futures.AppFuture` at once. Any
future among the arguments (also inside lists, tuples and dicts) is waited
for before the task runs, so dependencies are implicit and everything that
can run concurrently does (Swift/T semantics, Parsl's surface)::

    from workflows import app

    @app
    def square(x):
        return x * x

    @app(retries=2)
    def add(a, b):
        return a + b

    total = add(square(3), square(4))      # square(3), square(4) run concurrently
    total.result()                         # 25

The task goes to the innermost active executor (``with executor:`` or
``python -m workflows run``). Apps must be defined at module top level to be
sent by reference; others are sent by value with ``dill``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .command import CommandSpec
from .futures import AppFuture
from .runtime import active_runtime
from .tasks import FunctionRef

__all__ = ["App", "CommandApp", "app", "command"]


def _check_retries(retries: int) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    return retries


class App:
    """A Python function that runs as a task when called (see :func:`app`)."""

    def __init__(self, fn: Callable, name: Optional[str] = None, retries: int = 0):
        if not callable(fn):
            raise TypeError(f"@app needs a function, got {fn!r}")
        self.fn = fn
        self.name: str = str(name or getattr(fn, "__name__", "app"))
        self.retries = _check_retries(retries)
        self._ref: Optional[FunctionRef] = None
        functools.update_wrapper(self, fn)

    @property
    def target(self) -> Any:
        """What the worker calls: a reference to the plain function."""
        if self._ref is None:
            self._ref = FunctionRef.of(self.fn)
        return self._ref

    def __call__(self, *args: Any, **kwargs: Any) -> AppFuture:
        return active_runtime().launch(self.name, self.target, args, kwargs, self.retries)

    def __reduce__(self):
        # Pickle by name, so a worker (or a Parsl serializer) gets the module's App.
        qualname = getattr(self.fn, "__qualname__", "")
        if "<locals>" in qualname:
            raise TypeError(f"app {self.name} is defined inside a function and cannot be pickled")
        return (_lookup, (self.fn.__module__, qualname))

    def __repr__(self) -> str:
        return f"<App {self.name} retries={self.retries}>"


class CommandApp(App):
    """An external program run as a task (see :func:`command`)."""

    def __init__(self, fn: Callable, spec: CommandSpec, retries: int = 0):
        super().__init__(fn, spec.name, retries)
        self.spec = spec
        self.signature = inspect.signature(fn)
        values = {p.name: "" for p in self.signature.parameters.values()}
        try:  # a template key that is no argument fails at definition
            spec.render(values)
        except (ValueError, IndexError, AttributeError):
            pass  # format specs such as {i:03d} need real values

    @property
    def target(self) -> Any:
        return self.spec

    def __call__(self, *args: Any, **kwargs: Any) -> AppFuture:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"command {self.name}: {exc}") from None
        bound.apply_defaults()
        return active_runtime().launch(
            self.name, self.spec, (), dict(bound.arguments), self.retries
        )


def _lookup(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def app(fn: Optional[Callable] = None, *, name: Optional[str] = None, retries: int = 0):
    """Turn a function into an app: ``@app`` or ``@app(retries=2, name="x")``.

    Parameters
    ----------
    fn : callable
        The function; it runs on a worker with every future argument replaced
        by its result.
    name : str, optional
        Task name in messages (default: the function's name).
    retries : int
        How many times a failed task is run again before it fails.

    Returns
    -------
    App
    """
    _check_retries(retries)
    if fn is None:
        return lambda f: App(f, name=name, retries=retries)
    return App(fn, name=name, retries=retries)


def command(
    argv: Union[str, Sequence[str]],
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    stdout: Optional[str] = None,
    stderr: Optional[str] = None,
    timeout: Optional[float] = None,
    retries: int = 0,
    name: Optional[str] = None,
):
    """Turn a function signature into a command app running an external program.

    The decorated function's parameters (with their defaults) name the values
    for the ``{placeholders}``; its body is not run::

        @command("sort -n {src}", stdout="{dst}", cwd="{workdir}")
        def sort_file(src, dst, workdir="."):
            "Sort a file numerically."

        sort_file("in.txt", "out.txt").result().returncode   # 0

    Parameters
    ----------
    argv : str or list of str
        The program and its arguments with ``{name}`` placeholders; a string is
        split like a shell would (no shell runs). A token that is exactly
        ``{name}`` with a list value expands to one argument per item.
    cwd : str, optional
        Working directory template (made if missing); default: the worker's cwd.
    env : mapping, optional
        Extra environment variables (values may hold placeholders).
    stdout, stderr : str, optional
        File templates (relative to ``cwd``) for the program's output; when
        not given, stdout is captured into ``CommandResult.stdout`` and stderr
        only kept for the failure message.
    timeout : float, optional
        Seconds before the program is killed (the task then fails).
    retries : int
        Extra attempts after a failure.
    name : str, optional
        Task name (default: the function's name).

    Returns
    -------
    Callable[[function], CommandApp]
        Calling the app returns a future of a
        :class:`~workflows.command.CommandResult`; a non-zero exit fails it
        with :class:`~workflows.errors.CommandFailure` (``exit_code``,
        ``stderr_tail``).
    """
    _check_retries(retries)

    def wrap(fn: Callable) -> CommandApp:
        spec = CommandSpec.make(name or fn.__name__, argv, cwd, env, stdout, stderr, timeout)
        return CommandApp(fn, spec, retries)

    return wrap
