"""Time limits of tasks: what a task may use, and the interrupt that ends it in its own process.

A task's :class:`Limits` are its ``timeout`` (seconds from its start: ``@app(timeout=...)``
or ``workflows run --task-timeout``) and the run's ``deadline`` (wall clock, ``workflows
run --timeout``). They are enforced where the task runs, on every executor, by
:func:`alarm`: a :class:`TaskInterrupt` raised *inside the task*. In the main thread it
comes from ``SIGALRM``, so it also breaks a task blocked at 0 % CPU in a system call, and
repeats every :data:`REPEAT` seconds in case the task swallows it. In another thread it
could only be an asynchronous exception, never seen in a blocked system call, so a task
with a limit that would run outside the main thread runs isolated instead.

Native code that never returns to the interpreter is ended by isolation
(:mod:`workflows.isolate`: the process is killed) or, on the mpi executor, by its task
server, which gives up on the worker :data:`GRACE` seconds later. ``TaskInterrupt``
derives from ``BaseException`` so that a task's own ``except Exception`` does not
swallow it (as ``asyncio.CancelledError``).
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

__all__ = ["Alarm", "Limits", "TaskInterrupt", "alarm", "check_seconds", "grace_seconds", "GRACE",
           "REPEAT", "NO_LIMITS"]

#: Seconds between repeated interrupts of a task that swallowed the first one.
REPEAT = 1.0
#: Seconds after its limit before a task that ignores interrupts is given up
#: (its worker is reported lost), unless ``WORKFLOWS_TIMEOUT_GRACE`` says otherwise.
GRACE = 10.0


class TaskInterrupt(BaseException):
    """Raised inside a task whose time limit passed (see the module docstring)."""


def check_seconds(value: Optional[float], what: str) -> Optional[float]:
    """Validate a limit in seconds: ``None`` or a positive finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def grace_seconds() -> float:
    """``WORKFLOWS_TIMEOUT_GRACE`` (seconds, > 0) or :data:`GRACE`."""
    from core.options import parse_number

    text = os.environ.get("WORKFLOWS_TIMEOUT_GRACE", "")
    return parse_number(0, strict=True)(text, "WORKFLOWS_TIMEOUT_GRACE") if text else GRACE


@dataclass(frozen=True)
class Limits:
    """How long one task may run, and whether it runs in its own process.

    Attributes
    ----------
    timeout : float or None
        Seconds from the task's start.
    deadline : float or None
        Absolute ``time.time()`` by which the run must be over.
    isolate : bool
        Run the task in a separate process (see :mod:`workflows.isolate`).
    """

    timeout: Optional[float] = None
    deadline: Optional[float] = None
    isolate: bool = False

    def __reduce__(self):
        # A plain tuple: it travels with every task.
        return (Limits, (self.timeout, self.deadline, self.isolate))

    def seconds_left(self, start: float) -> Optional[float]:
        """Seconds the task may still run if it starts at ``start`` (may be <= 0)."""
        left = self.timeout
        if self.deadline is not None:
            to_deadline = self.deadline - start
            left = to_deadline if left is None else min(left, to_deadline)
        return left

    def describe(self, start: float) -> str:
        """Which limit ends a task started at ``start``, for messages."""
        if self.deadline is not None and (
            self.timeout is None or self.deadline - start < self.timeout
        ):
            return "the run's time limit (workflows run --timeout)"
        return f"its timeout of {self.timeout:g} s"

    @property
    def bounded(self) -> bool:
        return self.timeout is not None or self.deadline is not None


NO_LIMITS = Limits()


class Alarm:
    """What :func:`alarm` yields: ``fired`` tells whether the limit passed.

    A task that swallowed every interrupt and then returned still ran past
    its limit: the caller checks ``fired`` and reports a timeout anyway.
    """

    __slots__ = ("fired",)

    def __init__(self) -> None:
        self.fired = False


@contextmanager
def alarm(seconds: Optional[float]) -> Iterator[Alarm]:
    """Raise :class:`TaskInterrupt` in this thread after ``seconds`` (``None``: never).

    ``seconds <= 0`` raises at once. Nested use in one thread is not supported
    (the inner alarm replaces the outer one), and a task that sets its own
    ``SIGALRM`` handler replaces ours.
    """
    state = Alarm()
    if seconds is None:
        yield state
        return
    if seconds <= 0:
        state.fired = True
        raise TaskInterrupt()
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _signal_alarm(seconds, state):
            yield state
    else:
        with _thread_alarm(seconds, state):
            yield state


@contextmanager
def _signal_alarm(seconds: float, state: Alarm) -> Iterator[None]:
    armed = [True]

    def handler(signum, frame):
        if armed[0]:
            state.fired = True
            raise TaskInterrupt()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT)
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextmanager
def _thread_alarm(seconds: float, state: Alarm) -> Iterator[None]:
    tid = threading.get_ident()
    done = threading.Event()
    armed = threading.Lock()  # held while the alarm may still fire

    def fire() -> None:
        wait = seconds
        while not done.wait(wait):
            with armed:
                if done.is_set():
                    return
                state.fired = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid),
                                                           ctypes.py_object(TaskInterrupt))
            wait = REPEAT

    timer = threading.Thread(target=fire, name="workflows-alarm", daemon=True)
    timer.start()
    try:
        yield
    finally:
        with armed:
            done.set()
            # An exception already scheduled but not yet raised is withdrawn.
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)
        timer.join()

