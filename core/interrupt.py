"""SIGINT and SIGTERM while staging: ranks stop together, clean up, and say how to resume.

Ctrl-C on ``mpirun`` reaches every rank as SIGTERM, with SIGKILL one second later
(``odls_base_sigkill_timeout``); ``scancel`` and a time limit send SIGTERM too. What the
user sees is docs/staging-state.md, section 6. While :class:`Handling` is in place:

1. The first signal only sets a flag (:func:`pending`). The transfer loops carry it in
   each collective round's status like a failure, so every leader stops after the same
   round; the pipeline cleans up and raises :class:`Interrupted` on every rank (agreed).
2. A watchdog thread, woken through ``signal.set_wakeup_fd`` -- which works while the
   main thread is blocked inside an MPI call, where no Python handler can run -- gives
   that ``grace`` seconds; if the ranks cannot stop together (a peer was killed inside
   a collective) it runs the emergency clean-up itself and exits with 128 + the signal.
   Every complete copy is already journaled, so nothing complete is lost either way.
3. A second signal during the grace takes the emergency path at once.

Outside the main thread (or with ``enabled=False``) nothing is installed and
:func:`pending` stays ``None``. The previous handlers are restored on exit.
"""
from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Any, Callable, List, Optional

from core.errors import Interrupted

__all__ = ["Handling", "pending", "check", "signal_name", "DEFAULT_GRACE"]

#: Below Open MPI's 1 s between SIGTERM and SIGKILL, with room for the clean-up.
DEFAULT_GRACE = 0.6
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_pending: List[int] = []


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def pending() -> Optional[int]:
    """The signal that interrupted this process's staging run, or ``None``."""
    return _pending[0] if _pending else None


def check(what: str = "staging") -> None:
    """Raise :class:`Interrupted` if a signal is pending (call before a collective,
    inside ``agreed``, so every rank stops at the same point)."""
    s = pending()
    if s is not None:
        raise Interrupted(f"interrupted by {signal_name(s)} while {what}", signum=s)


class Handling:
    """Context manager: SIGINT/SIGTERM handling for one staging run (see the module).

    Parameters
    ----------
    grace : float
        Seconds the ranks get to stop together before the emergency path.
    emergency : callable, optional
        ``emergency(signum)``: this process's last-resort clean-up (remove temporary
        files, print the line on rank 0); runs in the watchdog thread.
    enabled : bool
    """

    def __init__(self, grace: float = DEFAULT_GRACE,
                 emergency: Optional[Callable[[int], None]] = None,
                 enabled: bool = True) -> None:
        self.grace = grace
        self.emergency = emergency
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self._old: List[Any] = []
        self._old_fd = -1
        self._pipe: Optional[tuple] = None
        self._thread: Optional[threading.Thread] = None

    def _handler(self, signum: int, frame: Any) -> None:
        # the watchdog has normally recorded it already; this covers a wakeup byte lost
        if not _pending:
            _pending.append(signum)

    def __enter__(self) -> Handling:
        _pending.clear()
        if not self.enabled:
            return self
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._old = [signal.signal(s, self._handler) for s in _SIGNALS]
        self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="stager-interrupt", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        assert self._pipe is not None
        r = self._pipe[0]
        deadline: Optional[float] = None
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([r], [], [], timeout)
            if not ready:  # the grace is over and the ranks did not stop
                self._die(_pending[0])
            data = os.read(r, 64)
            if not data:
                return  # __exit__ closed the pipe: staging ended
            for b in data:
                if b not in _SIGNALS:
                    continue
                if deadline is not None:
                    self._die(_pending[0])  # a second signal: stop now
                if not _pending:
                    _pending.append(b)
                deadline = time.monotonic() + self.grace

    def _die(self, signum: int) -> None:
        try:
            if self.emergency is not None:
                self.emergency(signum)
        finally:
            os._exit(128 + signum)

    def __exit__(self, *exc: object) -> None:
        if not self.enabled or self._pipe is None:
            return
        signal.set_wakeup_fd(self._old_fd)
        for s, old in zip(_SIGNALS, self._old):
            signal.signal(s, old)
        r, w = self._pipe
        os.close(w)  # the watchdog reads EOF and returns
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        os.close(r)
        self._pipe = None
