"""One native-protocol receiver: a ZeroMQ PULL socket feeding an :class:`Assembler`.

One receiver runs in one thread of one process. It binds, reports its endpoint
(for the rendezvous file), and then, step by step, polls its socket with a
timeout, hands each message to the assembler, and closes scans that stayed idle
too long. The loop is split into :meth:`Receiver.step` calls so that an MPI layer
can interleave it with its own communication (one receiver per node leader, the
Stream V2 start/end shared over MPI) without threads; :meth:`Receiver.serve` is
the plain loop.

Memory: besides the assembler's bound (see :mod:`streams.assemble`),
ZeroMQ queues at most ``rcvhwm`` messages per connected producer, plus what the
kernel's TCP buffers hold (``rcvbuf`` caps them; 0 leaves the OS default).

Security: given a :class:`~streams.security.StreamSecurity` in CURVE mode,
the socket is a CURVE server whose ZAP handler admits only authorised client
keys; without one it is plain (what ``--insecure`` asks for). Either way a
socket monitor counts failed handshakes, and every refused connection attempt
is counted, by reason, in the reports of the scans open at this receiver
(:meth:`SocketLoop.refusals`); refused peers' messages never reach the socket.
zmq is imported when a receiver is built, never by ``import streams``.
"""
from __future__ import annotations

import socket
from typing import Any, Callable, Optional, Union

from streams.accounting import ScanReport
from streams.assemble import DEFAULT_MEMORY_BYTES, Assembler, Partition
from streams.errors import StreamError
from streams.protocol import ScanGeometry
from streams.protocols.native.headers import feed
from streams.security import DOMAIN_DATA
from streams.socketloop import DEFAULT_HWM, SocketLoop, resolve_endpoint

__all__ = ["Receiver"]


class Receiver(SocketLoop):
    """A PULL socket that assembles native-protocol messages.

    Parameters
    ----------
    deliver : callable(Partition)
        Gets every finished partition (see :class:`~streams.assemble.Partition`);
        its memory is reused when the call returns. A slow ``deliver`` slows the
        loop, queues fill, and producers block: nothing is dropped.
    index, count : int
        This receiver's index r and the number R of receivers (routing ``f mod R``).
    bind : str
        Address to bind, ``tcp://HOST:PORT``; port ``*`` or ``0`` picks a free one.
    advertise : str, optional
        Host name to publish when binding every interface.
    rcvhwm, rcvbuf : int
        ZeroMQ receive high-water mark (messages per producer) and kernel buffer
        (bytes, 0 = OS default).
    partition_frames, memory_bytes, max_scans, idle_timeout
        Passed to :class:`~streams.assemble.Assembler`.
    on_close : callable(ScanReport), optional
        Called when a scan closes.
    context : zmq.Context, optional
    security : StreamSecurity, optional
        CURVE keys and the ZAP policy (:mod:`streams.security`); None: plain.
    job_bytes : callable(ScanGeometry) -> int, optional
        Passed to :class:`~streams.assemble.Assembler` (the cost checked at ``begin``).
    token : str, optional
        The job's token: a ``begin`` without it is rejected ``wrong_token``.
    """

    def __init__(self, deliver: Callable[[Partition], Any], *, index: int = 0, count: int = 1,
                 bind: str = "tcp://127.0.0.1:*", advertise: Optional[str] = None,
                 rcvhwm: int = DEFAULT_HWM, rcvbuf: int = 0,
                 partition_frames: Union[int, Callable[[ScanGeometry], int]] = 1,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES, max_scans: int = 4,
                 idle_timeout: float = 30.0,
                 on_close: Optional[Callable[[ScanReport], Any]] = None,
                 context: Any = None, security: Any = None,
                 job_bytes: Optional[Callable[[ScanGeometry], int]] = None,
                 token: Optional[str] = None) -> None:
        super().__init__(on_close)
        self.token = token
        self.assembler = Assembler(deliver, receiver=index, receivers=count,
                                   partition_frames=partition_frames,
                                   memory_bytes=memory_bytes, max_scans=max_scans,
                                   idle_timeout=idle_timeout, on_close=self._closed,
                                   job_bytes=job_bytes)
        self._pull_socket(context, rcvhwm, security, DOMAIN_DATA)
        if rcvbuf:
            self._sock.setsockopt(self._zmq.RCVBUF, rcvbuf)
        self._bind_addr = bind[:-2] + ":*" if bind.endswith(":0") else bind
        self.advertise = advertise
        self.endpoint: Optional[str] = None

    def bind(self) -> str:
        """Bind the socket; return the endpoint to publish in the rendezvous file."""
        zmq = self._zmq
        try:
            self._sock.bind(self._bind_addr)
        except zmq.ZMQError as e:
            raise StreamError(f"receiver {self.assembler.receiver} on {socket.gethostname()} "
                              f"cannot bind {self._bind_addr}: {e}") from e
        bound = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.endpoint = resolve_endpoint(bound, self.advertise)
        return self.endpoint

    def _ready(self) -> None:
        if self.endpoint is None:
            self.bind()

    def _read(self, max_messages: int) -> int:
        zmq, sock, assembler = self._zmq, self._sock, self.assembler
        n = 0
        while n < max_messages:
            try:
                parts = [sock.recv(zmq.NOBLOCK)]
            except zmq.Again:
                break
            while sock.rcvmore:
                parts.append(sock.recv(copy=False))
            feed(assembler, parts, self.token)
            n += 1
        return n
