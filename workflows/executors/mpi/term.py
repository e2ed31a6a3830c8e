"""What a rank says when ``mpirun`` terminates it: the tasks that were in workers' hands.

When a worker rank dies, Open MPI's ``mpirun`` sends ``SIGTERM`` to every other rank
about a second later and ``SIGKILL`` a second after that (Open MPI 4.1); the root and
the node servers use that second to print which task each worker was running or held,
and the run's counts. This is the fallback (docs/DISPATCH.md, "Failures"): a server
sees a dead worker on its own host at once (:meth:`~.server.Server.check_dead`).

A Python signal handler runs only in the main thread, once it runs Python code again --
never while the root's main thread waits on a future and the kernel delivered the
signal to another thread. So the signal is also written to a wakeup pipe
(``signal.set_wakeup_fd``) that the dispatcher thread polls every turn: whichever thread
sees it first reports, once, and ends the process.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable, List, Optional

__all__ = ["TermReport"]


class TermReport:
    """Report ``lines()`` (and ``summary()``) on SIGTERM, then die of it.

    Parameters
    ----------
    who : str
        Who speaks (``workflow run (root)``, ``task server rank 2``).
    lines : callable
        One line per task in workers' hands.
    summary : callable, optional
        The run's counts so far.
    kept : callable, optional
        What the terminated run keeps (its output directory), said on the first line.
    """

    def __init__(self, who: str, lines: Callable[[], List[str]],
                 summary: Optional[Callable[[], str]] = None,
                 kept: Optional[Callable[[], str]] = None):
        self.who = who
        self.lines = lines
        self.summary = summary
        self.kept = kept
        self._lock = threading.Lock()
        self._previous: Any = None
        self._old_fd: Optional[int] = None
        self._pipe: Optional[tuple] = None
        self.installed = False

    def install(self, wakeup: bool = False) -> None:
        """Install the handler (main thread only); ``wakeup``: also the pipe :meth:`poll` reads."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGTERM, self._handler)
        if wakeup:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._pipe = (r, w)
            self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        signal.signal(signal.SIGTERM, self._previous)
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_fd if self._old_fd is not None else -1)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
        self.installed = False

    def poll(self) -> None:
        """From any thread: if SIGTERM arrived, report and end the process."""
        pipe = self._pipe
        if pipe is None:
            return
        try:
            data = os.read(pipe[0], 64)
        except (BlockingIOError, OSError):
            return
        if int(signal.SIGTERM) in data:
            self._report(int(signal.SIGTERM))
            os._exit(128 + int(signal.SIGTERM))

    def _handler(self, sig: int, frame: Any) -> None:
        self._report(sig)
        previous = self._previous
        signal.signal(sig, previous if callable(previous) else signal.SIG_DFL)
        if callable(previous):
            previous(sig, frame)
        else:
            os.kill(os.getpid(), sig)

    def _report(self, sig: int) -> None:
        if not self._lock.acquire(blocking=False):
            return  # another thread is reporting; it ends the process
        try:
            os.write(2, self.text(sig).encode(errors="replace"))
        except Exception:
            pass

    def text(self, sig: int) -> str:
        name = signal.Signals(sig).name
        head = (f"{self.who}: terminated by {name} (Ctrl-C or scancel on mpirun; or mpirun "
                "ending every rank because one rank died: its message then names that rank "
                "and its signal or exit code)")
        if self.kept is not None:
            try:
                head += f"; {self.kept()}"
            except Exception:
                pass
        try:
            lines = self.lines()
        except Exception as exc:  # a report must never fail
            lines = [f"(could not list the tasks: {exc})"]
        if lines:
            head += "; tasks in workers' hands:\n  " + "\n  ".join(lines[:50])
            if len(lines) > 50:
                head += f"\n  ... and {len(lines) - 50} more"
        else:
            head += "; no task in any worker's hands"
        if self.summary is not None:
            try:
                head += "\nso far: " + self.summary()
            except Exception:
                pass
        return head + "\n"
