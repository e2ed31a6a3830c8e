"""Isolated tasks: a task that may kill its process runs in a supervised child of the worker.

A task that segfaults, is killed or calls ``os._exit`` takes its worker with it, and on
the mpi executor the whole MPI job, with nobody able to say which task did it.
``@app(isolate=True)`` (``workflows run --isolate``) runs it in a :class:`Runner`: a child
forked once by the worker and reused for every isolated task, so imports and caches stay
warm (a fork per task cost far more, ``bench/results/tasks.md``). If the child dies the
worker reports :class:`~workflows.errors.TaskCrashed` (signal or exit code, rank, host,
pid) and forks a new one. A time limit is enforced twice: by the child's own
:func:`~workflows.limits.alarm` (a traceback of where the task was) and by the worker,
which kills the child (``SIGTERM``, ``SIGKILL`` after :data:`KILL_AFTER` s) when no
outcome came :data:`SLACK` seconds after the limit, so a task stuck in native code ends too.

The child never calls MPI: it is a fork of an MPI process and shares its connections
(local queries such as ``COMM_WORLD.Get_rank()`` still answer; on InfiniBand verbs set
``RDMAV_FORK_SAFE=1``). State a task leaves behind lives in the child, not the worker.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
from typing import Any, Callable, Optional, Tuple

__all__ = ["Runner", "runner", "describe_status", "KILL_AFTER", "SLACK"]

#: Seconds between SIGTERM and SIGKILL when a runner is stopped.
KILL_AFTER = 1.0
#: Seconds after a task's limit that the worker waits for the child's own interrupt.
SLACK = 2.0

_PR_SET_PDEATHSIG = 1


def describe_status(status: int) -> Tuple[str, Optional[int]]:
    """Describe a ``waitpid`` status: (``"killed by signal 9 (SIGKILL)"``, exit code or None)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        core = " (core dumped)" if os.WCOREDUMP(status) else ""
        return f"killed by signal {sig} ({name}){core}", -sig
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        return f"exited with code {code} (os._exit or sys.exit in native code)", code
    return f"ended with wait status {status}", None


class Runner:
    """A forked child that runs isolated tasks one at a time (see the module docstring).

    Parameters
    ----------
    run : callable
        What the child calls with each payload; returns a picklable outcome.
    """

    def __init__(self, run: Callable[[Any], Any]):
        self._run = run
        self.pid: Optional[int] = None
        self._conn: Any = None
        self.started = 0  # children forked so far

    def _start(self) -> None:
        from multiprocessing.connection import Pipe

        parent, child = Pipe(duplex=True)
        pid = os.fork()
        if pid == 0:  # the child: serve until the pipe closes, never return
            code = 0
            try:
                parent.close()
                _die_with_parent()
                os.environ["WORKFLOWS_WORKER"] = "1"
                os.environ["WORKFLOWS_ISOLATED"] = "1"
                _serve(child, self._run)
            except BaseException:
                code = 70
            finally:
                os._exit(code)  # no atexit handlers: they belong to the MPI process
        child.close()
        self.pid, self._conn = pid, parent
        self.started += 1

    def call(self, payload: Any, limit: Optional[float]) -> Tuple[str, Any]:
        """Run ``payload`` in the child.

        Returns
        -------
        ("ok", outcome) | ("crash", (message, exit_code)) | ("timeout", message)
        """
        if self.pid is not None and self._reap(block=False) is not None:
            # It died between tasks: PR_SET_PDEATHSIG fires when the *thread* that
            # forked it ends (e.g. the dispatcher thread of an earlier executor at -n 1).
            self._forget()
        if self.pid is None:
            self._start()
        try:
            self._conn.send(payload)
        except (OSError, EOFError):
            return self._crashed()
        expires = None if limit is None else time.monotonic() + max(limit, 0.0) + SLACK
        while True:
            wait = None if expires is None else max(0.0, expires - time.monotonic())
            try:
                ready = self._conn.poll(wait)
            except (OSError, EOFError):
                return self._crashed()
            if ready:
                try:
                    return "ok", self._conn.recv()
                except (OSError, EOFError):
                    return self._crashed()
            if expires is not None and time.monotonic() >= expires:
                pid = self.pid
                self.stop()
                return "timeout", f"the isolated task process (pid {pid}) was killed"

    def _crashed(self) -> Tuple[str, Any]:
        pid = self.pid
        status = self._reap(block=True)
        self._forget()
        if status is None:
            return "crash", (f"the isolated task process (pid {pid}) vanished", None)
        text, code = describe_status(status)
        return "crash", (f"the isolated task process (pid {pid}) {text}", code)

    def _reap(self, block: bool) -> Optional[int]:
        if self.pid is None:
            return None
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return None
        return status if pid else None

    def _forget(self) -> None:
        self._close_pipe()
        self.pid = None

    def _close_pipe(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def stop(self) -> None:
        """End the child: close its pipe, SIGTERM, SIGKILL after :data:`KILL_AFTER` s; reap it."""
        if self.pid is None:
            return
        pid = self.pid
        self._close_pipe()
        for sig, wait in ((signal.SIGTERM, KILL_AFTER), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait
            while time.monotonic() < end:
                if self._reap(block=False) is not None:
                    self.pid = None
                    return
                time.sleep(0.01)
        self._reap(block=False)
        self.pid = None


def _serve(conn: Any, run: Callable[[Any], Any]) -> None:
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        outcome = run(payload)
        try:
            conn.send(outcome)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            conn.send(_unpicklable(outcome, exc))


def _unpicklable(outcome: Any, exc: BaseException) -> Any:
    # The child's run() returns something with a replace_value hook (tasks.Outcome).
    return outcome.unpicklable(exc)


def _die_with_parent() -> None:
    # A child stuck in a task must not outlive its worker (killed by mpirun).
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_RUNNER: Optional[Runner] = None
_RUNNER_PID: Optional[int] = None


def runner(run: Callable[[Any], Any]) -> Runner:
    """This process's runner (made on first use; a forked process gets its own)."""
    global _RUNNER, _RUNNER_PID
    if _RUNNER is None or _RUNNER_PID != os.getpid():
        _RUNNER, _RUNNER_PID = Runner(run), os.getpid()
    return _RUNNER
