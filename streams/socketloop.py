"""What every receiving socket shares, whatever its protocol: the step/serve loop.

A protocol's socket (:class:`streams.protocols.native.receiver.Receiver`,
:class:`streams.protocols.stream2.receiver.StreamV2Receiver`) subclasses
:class:`SocketLoop`: it makes ``self._sock`` (``_pull_socket``), sets ``self.assembler``
and implements ``_read``. The loop is split into :meth:`SocketLoop.step` calls so that the MPI job
(:mod:`streams.job.ranks`) can interleave it with its own communication without
threads; :meth:`SocketLoop.serve` is the plain loop.

Security: given a :class:`~streams.security.StreamSecurity`, a server socket is
CURVE with a ZAP handler; a socket monitor counts failed handshakes, and every
refused connection attempt is counted, by reason, in the reports of the scans open
at this receiver (:meth:`SocketLoop.refusals`). zmq is imported when a socket is
built, never by ``import streams``.
"""
from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from streams.accounting import MAX_EXAMPLES, ScanReport
from streams.assemble import Assembler
from streams.security import HandshakeMonitor, refusal_address, zap_handler

__all__ = ["SocketLoop", "DEFAULT_HWM", "resolve_endpoint"]

#: Messages ZeroMQ queues per peer on each side before a producer blocks.
DEFAULT_HWM = 100


def resolve_endpoint(bound: str, advertise: Optional[str] = None) -> str:
    """The endpoint producers should connect to, given the one ZeroMQ reports as bound.

    A socket bound to every interface reports ``tcp://0.0.0.0:PORT``; producers need
    a name: ``advertise`` if given, else this host's name.
    """
    host_port = bound.split("://", 1)[1]
    host, _, port = host_port.rpartition(":")
    if host in ("0.0.0.0", "*", "[::]", "::") or advertise:
        host = advertise or socket.gethostname()
    return f"tcp://{host}:{port}"


class SocketLoop:
    """What every receiving socket shares: the step/serve loop, reports, closing.

    Subclasses make ``self._sock`` (:meth:`_pull_socket`), set ``self.assembler`` and
    implement :meth:`_read`, which handles the messages waiting on the socket.
    """

    assembler: Assembler
    _sock: Any
    #: refusals kept (with their detail) while no scan is open to count them
    KEEP_REFUSED = 10000

    def __init__(self, on_close: Optional[Callable[[ScanReport], Any]]) -> None:
        import zmq

        self._zmq = zmq
        self.reports: List[ScanReport] = []
        self._user_on_close = on_close
        self.messages = 0
        self._monitor: Any = None
        self._zap: Any = None
        self._zap_domain = ""
        self._pending_refused: List[Tuple[str, str]] = []
        self.refused: Counter = Counter()     # every refused connection attempt, by reason
        self.refused_from: Counter = Counter()   # ... by (reason, peer address or "")

    def _pull_socket(self, context: Any, rcvhwm: int, security: Any, domain: str,
                     server: bool = True) -> None:
        """Make ``self._sock``: a PULL socket of ``context`` (default: the process's)
        with ``rcvhwm``, ``security`` applied (before bind/connect), handshakes watched."""
        zmq = self._zmq
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        if security is not None:
            if server:
                security.serve(self._sock, domain)
            else:
                security.allow_list(self._sock, domain)
            if security.curve or security.allow_from:
                self._zap, self._zap_domain = zap_handler(self._sock.context), domain
        self._monitor = HandshakeMonitor(self._sock)

    def refusals(self, closing: Optional[ScanReport] = None) -> int:
        """Count the connection attempts refused since the last call into the reports.

        Each goes to every scan open here; with none open, it waits for the next scan
        that is open at a call, or closes (``closing``). Returns how many were new.
        """
        new: List[Tuple[str, str]] = []
        if self._monitor is not None:
            new += self._monitor.drain()
        if self._zap is not None:
            new += self._zap.drain(self._zap_domain)
        for reason, detail in new:
            self.refused[reason] += 1
            self.refused_from[(reason, refusal_address(detail) or "")] += 1
        reps = [st.report for st in self.assembler.scans.values()]
        if closing is not None:
            reps.append(closing)
        if not reps:   # bounded: a flood of refused peers while nothing is open
            self._pending_refused = (self._pending_refused + new)[-self.KEEP_REFUSED:]
            return len(new)
        items, self._pending_refused = self._pending_refused + new, []
        for rep in reps:
            for reason, detail in items:
                rep.refused[reason] += 1
                head = f"refused {reason}:"
                if len(rep.examples) < MAX_EXAMPLES and \
                        not any(e.startswith(head) for e in rep.examples):
                    rep.examples.append(f"{head} {detail}")
        return len(new)

    @property
    def refused_outside_scans(self) -> List[Tuple[str, str]]:
        """Refusals no open scan took yet ((reason, detail)): at the end of a job, those
        of when no scan was open."""
        return list(self._pending_refused)

    def _closed(self, rep: ScanReport) -> None:
        self.refusals(closing=rep)
        self.reports.append(rep)
        if self._user_on_close is not None:
            self._user_on_close(rep)

    def _read(self, max_messages: int) -> int:
        raise NotImplementedError

    def _expire(self) -> None:
        self.assembler.expire()

    def _ready(self) -> None:
        """Called by :meth:`serve` before its loop (bind or connect if not done)."""

    def forget(self, scan: str) -> None:
        """Drop what is kept of ``scan`` once it is written (default: nothing is kept)."""

    def held(self) -> Dict[str, int]:
        """Scan -> messages held because its start is unknown (default: nothing is held)."""
        return {}

    def never_started(self) -> Dict[str, Dict[str, int]]:
        """The job ends: reject what is held for scans that never started; return scan ->
        counts (default: nothing is held)."""
        return {}

    def step(self, timeout: float = 0.1, max_messages: int = 1000) -> int:
        """Wait up to ``timeout`` s for messages, handle at most ``max_messages``, close
        scans idle for longer than the idle timeout. Returns the messages handled."""
        n = 0
        if self._sock.poll(int(timeout * 1000), self._zmq.POLLIN):
            n = self._read(max_messages)
        self.messages += n
        self.refusals()
        self._expire()
        return n

    def serve(self, scans: int = 1, timeout: Optional[float] = None,
              stop: Optional[threading.Event] = None, tick: float = 0.1) -> List[ScanReport]:
        """Receive until ``scans`` scans have closed (by their ends or idle timeout).

        Parameters
        ----------
        scans : int
            How many scans to serve, one after the other or at once.
        timeout : float, optional
            Overall limit in seconds; when reached, open scans close as ``stopped``.
        stop : threading.Event, optional
            Set from another thread to stop the same way.
        tick : float
            Longest wait of one poll (how late a timeout or ``stop`` is noticed).

        Returns
        -------
        list of ScanReport
            The reports of the scans closed during this call, in closing order.
        """
        self._ready()
        start = len(self.reports)
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self.reports) - start < scans:
            if stop is not None and stop.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            self.step(tick)
        if len(self.reports) - start < scans:
            self.assembler.close_all("stopped")
        return self.reports[start:]

    def close(self) -> None:
        """Close the socket; unread messages are dropped."""
        if self._monitor is not None:
            self._monitor.close()
            self._monitor = None
        self._sock.close(linger=0)

    def __enter__(self) -> SocketLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()




class TcpLoop(SocketLoop):
    """A :class:`SocketLoop` on one TCP connection to a detector's data port (Merlin, ASI
    TPX3): connected at the first step the port answers, dropped (and its read state reset,
    :meth:`_reset`) on a framing error or at :meth:`close`. Subclasses set ``host``,
    ``port``, ``_tcp = None`` and ``connections``, and define :meth:`_reset` and ``_read``."""

    host: str
    port: Optional[int]
    _tcp: Any
    connections: int
    messages: int
    assembler: Any

    def _reset(self) -> None:
        """Forget what was read of the connection (its buffer, a message cut short)."""

    def _ready(self) -> None:
        self._connect()

    def _connect(self) -> bool:
        if self._tcp is not None or self.port is None:
            return self._tcp is not None
        try:
            s = socket.create_connection((self.host, self.port), timeout=1.0)
        except OSError:
            return False        # not there yet: retried at the next step
        s.setblocking(False)
        self._tcp = s
        self._reset()
        self.connections += 1
        return True

    def _drop(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
            self._tcp = None
        self._reset()

    def close(self) -> None:
        self._drop()

    def step(self, timeout: float = 0.1, max_messages: int = 1000) -> int:
        import select

        n = 0
        if not self._connect():
            time.sleep(min(timeout, 0.1))
        else:
            readable, _, _ = select.select([self._tcp], [], [], timeout)
            if readable:
                n = self._read(max_messages)
        self.messages += n
        self.assembler.expire()
        return n
