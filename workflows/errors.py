"""The workflow runtime's errors: one hierarchy rooted in :class:`WorkflowError`.

A task that raises on a worker does not send its exception object back (it may
not pickle, and its class may not import on the submitting side); the worker
sends a :class:`RemoteError` record instead -- exception type, message, remote
traceback text, rank, host -- and the submitting side raises a
:class:`TaskFailure` built from it. Dependents of a failed task fail with
:class:`DependencyFailure`, which names the upstream failure, so one failure
never leaves a future pending forever.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Optional

from core.errors import MpistageError
from core.mpi.launcher import launcher_rank

__all__ = ["WorkflowError", "NoExecutorError", "ExecutorError", "TaskFailure", "CommandFailure",
           "DependencyFailure", "TaskTimeout", "TaskCrashed", "FlowError", "HookError",
           "ResultsError", "RemoteError", "failure_class", "where", "abbreviate"]

#: Longest rendering of one task's arguments in messages.
ARGS_LIMIT = 160


class WorkflowError(MpistageError):
    """Base class of every error raised by :mod:`workflows`."""


class NoExecutorError(WorkflowError):
    """An app was called while no executor was active."""


class ExecutorError(WorkflowError):
    """An executor could not start, or was used after shutdown."""


class FlowError(WorkflowError):
    """A workflow file is missing, does not import, or has no ``main``."""


class HookError(WorkflowError):
    """A leader hook failed on some node (raised on every rank)."""


class ResultsError(WorkflowError):
    """Per-rank results do not fit together (dtype or trailing shape differ)."""


def where() -> str:
    """Describe this process for error messages: ``rank R on HOST (pid P)``."""
    rank = _rank()
    who = f"rank {rank}" if rank is not None else "process"
    return f"{who} on {socket.gethostname()} (pid {os.getpid()})"


def _rank() -> Optional[int]:
    # mpi4py is only asked if this process already imported it: importing MPI
    # just to label an error would initialise MPI in a process that never
    # meant to use it.
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            if mpi.Is_initialized() and not mpi.Is_finalized():
                return int(mpi.COMM_WORLD.Get_rank())
        except Exception:  # pragma: no cover - MPI in a broken state
            pass
    return launcher_rank()


def abbreviate(args: tuple, kwargs: dict, limit: int = ARGS_LIMIT) -> str:
    """Render call arguments for a message, cut to ``limit`` characters."""
    parts = [_short(a) for a in args]
    parts += [f"{k}={_short(v)}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any, limit: int = 60) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"<{type(value).__name__} {dtype} {tuple(shape)}>"
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class RemoteError:
    """What a worker sends back when a task raised: plain, always picklable data."""

    type_name: str
    message: str
    traceback: str
    where: str
    exit_code: Optional[int] = None
    stderr_tail: str = ""
    #: ``"error"`` (the task raised), ``"timeout"`` (it ran out of time) or
    #: ``"crash"`` (the process running it died: a signal, ``os._exit``).
    kind: str = "error"

    @classmethod
    def capture(cls, exc: BaseException) -> RemoteError:
        """Record ``exc`` (being handled) together with this process's identity."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type_name=_type_name(exc), message=str(exc), traceback=text, where=where(),
                   exit_code=getattr(exc, "exit_code", None),
                   stderr_tail=getattr(exc, "stderr_tail", "") or "")


class TaskFailure(WorkflowError):
    """A task failed: names the task, its arguments (abbreviated) and where it ran.

    Attributes
    ----------
    task : str
        Task name (the app's name and a task number, e.g. ``square#12``).
    args : str
        The task's arguments, abbreviated.
    where : str
        ``rank R on HOST (pid P)`` of the process that ran the last attempt.
    remote_traceback : str
        The traceback text from the worker.
    attempts : int
        How many times the task ran (1 + retries used).
    """

    def __init__(self, task: str, args: str, remote: RemoteError, attempts: int = 1,
                 message: Optional[str] = None):
        self.task = task
        self.args_text = args
        self.remote = remote
        self.where = remote.where
        self.remote_traceback = remote.traceback
        self.attempts = attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(message or (
            f"task {task}({args}) failed{tries} on {remote.where}: "
            f"{remote.type_name}: {remote.message}"
        ))

    def __reduce__(self):
        return (type(self), (self.task, self.args_text, self.remote, self.attempts))

    def details(self) -> str:
        """The message followed by the remote traceback, for a failure summary."""
        return f"{self}\n--- remote traceback ---\n{self.remote_traceback.rstrip()}"


class CommandFailure(TaskFailure):
    """A ``@command`` task exited non-zero; carries the exit code and stderr's tail."""

    @property
    def exit_code(self) -> Optional[int]:
        return self.remote.exit_code

    @property
    def stderr_tail(self) -> str:
        return self.remote.stderr_tail


class TaskTimeout(TaskFailure):
    """A task ran past its time limit (``@app(timeout=...)`` or ``workflows run --timeout``)."""


class TaskCrashed(TaskFailure):
    """The process running a task died under it (a signal, ``os._exit``, a segfault).

    Reported exactly for isolated tasks (``@app(isolate=True)``): the worker
    saw its task process end and names the signal or exit code.
    """


def failure_class(remote: RemoteError) -> type:
    """The :class:`TaskFailure` subclass that reports ``remote``."""
    if remote.kind == "timeout":
        return TaskTimeout
    if remote.kind == "crash":
        return TaskCrashed
    if remote.exit_code is not None:
        return CommandFailure
    return TaskFailure


class DependencyFailure(TaskFailure):
    """A task did not run because a task it depends on failed."""

    #: The first failure up the chain (a TaskFailure, or an executor error).
    root: BaseException

    def __init__(self, task: str, args: str, upstream: BaseException):
        self.upstream = upstream
        root: BaseException = (
            upstream.root if isinstance(upstream, DependencyFailure) else upstream
        )
        self.root = root
        remote = RemoteError(type_name=type(root).__name__, message=str(root),
                             traceback=getattr(root, "remote_traceback", "") or "",
                             where=getattr(root, "where", "submitting process"))
        super().__init__(task, args, remote, 0,
                         f"task {task}({args}) not run: it depends on a failed task: {root}")

    def __reduce__(self):
        return (type(self), (self.task, self.args_text, self.upstream))


def _type_name(exc: BaseException) -> str:
    module = type(exc).__module__
    name = type(exc).__qualname__
    return name if module == "builtins" else f"{module}.{name}"
