"""One native-protocol receiver: a ZeroMQ PULL socket feeding an :class:`Assembler`.

It binds, reports its endpoint, then in :meth:`Receiver.step` calls (so an MPI
layer can interleave its own communication without threads; :meth:`Receiver.serve`
is the plain loop) polls, hands messages to the assembler and closes idle scans.
Memory: the assembler's bound, ``rcvhwm`` messages per producer, and the kernel's
buffers (``rcvbuf``). With a CURVE :class:`~streams.security.StreamSecurity` the
socket admits only authorised keys; refused attempts are counted in the open
scans' reports (:meth:`SocketLoop.refusals`). zmq is imported when one is built.
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

    ``deliver(partition)`` gets every finished partition (its memory reused after the
    call; a slow one makes producers block, nothing is dropped). ``index``/``count``:
    this receiver r of R (routing ``f mod R``); ``bind``: ``tcp://HOST:PORT`` (port
    ``*`` or ``0``: a free one), ``advertise`` the host to publish; ``rcvhwm``/``rcvbuf``:
    receive high-water mark per producer and kernel buffer (0: the OS's);
    ``partition_frames``, ``memory_bytes``, ``max_scans``, ``idle_timeout``,
    ``job_bytes`` go to :class:`~streams.assemble.Assembler`; ``security``: CURVE keys
    and ZAP policy (None: plain); ``token``: a ``begin`` without it is rejected
    ``wrong_token``.
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
