"""``@app`` and ``@command``: functions and programs that become tasks when called.

Calling an app returns an :class:`~workflows.futures.AppFuture` at once. Any future
among the arguments (also inside lists, tuples and dicts) is waited for before the task
runs, so dependencies are implicit and everything that can run concurrently does
(Swift/T semantics, Parsl's surface)::

    @app(retries=2)
    def add(a, b):
        return a + b

    total = add(square(3), square(4))      # square(3), square(4) run concurrently
    fit.on("node3")(grain)                 # prefer a worker of node3 (hard=True: only there)

The task goes to the innermost active executor (``with executor:`` or ``python -m
workflows run``). Apps must be defined at module top level to be sent by reference;
others are sent by value with ``dill``.
"""

from __future__ import annotations

import functools
import inspect
import pkgutil
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .command import CommandSpec
from .futures import AppFuture
from .limits import check_seconds
from .runtime import active_runtime
from .tasks import FunctionRef

__all__ = ["App", "CommandApp", "app", "command"]


def _check_retries(retries: int) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    return retries


class App:
    """A Python function that runs as a task when called (see :func:`app`)."""

    def __init__(self, fn: Callable, name: Optional[str] = None, retries: int = 0,
                 timeout: Optional[float] = None, isolate: bool = False):
        if not callable(fn):
            raise TypeError(f"@app needs a function, got {fn!r}")
        self.fn = fn
        self.name: str = str(name or getattr(fn, "__name__", "app"))
        self.retries = _check_retries(retries)
        self.timeout = check_seconds(timeout, f"app {self.name}: timeout")
        self.isolate = bool(isolate)
        self._ref: Optional[FunctionRef] = None
        functools.update_wrapper(self, fn)

    @property
    def target(self) -> Any:
        """What the worker calls: a reference to the plain function."""
        if self._ref is None:
            self._ref = FunctionRef.of(self.fn)
        return self._ref

    def __call__(self, *args: Any, **kwargs: Any) -> AppFuture:
        return self._launch(args, kwargs)

    def _launch(self, args: Tuple, kwargs: Dict, place: Optional[Tuple[Any, bool]] = None
                ) -> AppFuture:
        return active_runtime().launch(self.name, self.target, args, kwargs, self.retries,
                                       self.timeout, self.isolate, place)

    def map(self, items: Iterable[Any], *args: Any, **kwargs: Any) -> List[AppFuture]:
        """``[self(item, *args, **kwargs) for item in items]``, launched together.

        Same tasks and futures as the loop; an executor that can (the mpi
        executor) runs the ready ones as task arrays, at a fraction of the
        submitting rank's cost per task (``docs/DISPATCH.md``).
        """
        return active_runtime().launch_many(self.name, self.target,
                                            [(item,) + args for item in items], kwargs,
                                            self.retries, self.timeout, self.isolate)

    def on(self, node: Union[int, str], *, hard: bool = False) -> Callable[..., AppFuture]:
        """This app, placed: ``app.on(node)(*args)`` runs the task on a worker of ``node``.

        Parameters
        ----------
        node : int or str
            Node index (``0 <= node < n_nodes``, in the stager's node order) or
            node name (``node1`` when emulating, else the host name or
            ``--node-id-env`` value).
        hard : bool
            ``False`` (default): preferred; the task may run elsewhere when
            that node's workers are all busy and others idle (counted in the
            run's summary). ``True``: only there (it waits for that node).

        Executors without nodes (inline, local, parsl) have one node, index 0.
        """
        if isinstance(node, bool) or not isinstance(node, (int, str)):
            raise TypeError(f"app {self.name}: node must be an index or a name, got {node!r}")
        place = (node, bool(hard))

        def placed(*args: Any, **kwargs: Any) -> AppFuture:
            return self._launch(args, kwargs, place)

        return placed

    def __reduce__(self):
        # Pickle by name, so a worker (or a Parsl serializer) gets the module's App.
        qualname = getattr(self.fn, "__qualname__", "")
        if "<locals>" in qualname:
            raise TypeError(f"app {self.name} is defined inside a function and cannot be pickled")
        return (pkgutil.resolve_name, (f"{self.fn.__module__}:{qualname}",))

    def __repr__(self) -> str:
        extra = f" timeout={self.timeout:g}" if self.timeout else ""
        extra += " isolate" if self.isolate else ""
        return f"<App {self.name} retries={self.retries}{extra}>"


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

    def _launch(self, args: Tuple, kwargs: Dict, place: Optional[Tuple[Any, bool]] = None
                ) -> AppFuture:
        # the arguments fill the command's template (no timeout or isolation of its own)
        return super()._launch((), self._bind(args, kwargs), place)

    def map(self, items: Iterable[Any], *args: Any, **kwargs: Any) -> List[AppFuture]:
        """One command per item (each binds its own arguments: never arrayed)."""
        return [self(item, *args, **kwargs) for item in items]

    def _bind(self, args: Tuple, kwargs: Dict) -> Dict[str, Any]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"command {self.name}: {exc}") from None
        bound.apply_defaults()
        return dict(bound.arguments)


def app(fn: Optional[Callable] = None, *, name: Optional[str] = None, retries: int = 0,
        timeout: Optional[float] = None, isolate: bool = False):
    """Turn a function into an app: ``@app`` or ``@app(retries=2, timeout=60, name="x")``.

    Parameters
    ----------
    fn : callable
        The function; it runs on a worker with every future argument replaced
        by its result.
    name : str, optional
        Task name in messages (default: the function's name).
    retries : int
        How many times a failed task is run again before it fails (a timed-out
        or crashed attempt counts as failed).
    timeout : float, optional
        Seconds an attempt may run; then it is interrupted and fails with
        :class:`~workflows.errors.TaskTimeout` (see :mod:`workflows.limits`).
        Default: ``workflows run --task-timeout``, else none.
    isolate : bool
        Run the task in a forked child of its worker, so a task that kills its
        process (a signal, ``os._exit``, a segfault) fails with
        :class:`~workflows.errors.TaskCrashed` naming the signal instead of
        taking its worker -- and on the mpi executor the whole job -- with it;
        a timeout then ends even native code. Costs a pipe round trip per task
        (see :mod:`workflows.isolate`). Default: ``workflows run --isolate``.

    Returns
    -------
    App
    """
    _check_retries(retries)
    check_seconds(timeout, "timeout")
    if fn is None:
        return lambda f: App(f, name=name, retries=retries, timeout=timeout, isolate=isolate)
    return App(fn, name=name, retries=retries, timeout=timeout, isolate=isolate)


def command(argv: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, stdout: Optional[str] = None,
            stderr: Optional[str] = None, timeout: Optional[float] = None, retries: int = 0,
            name: Optional[str] = None):
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
