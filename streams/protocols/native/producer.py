"""A native-protocol producer: one PUSH socket per receiver, routing, counting.

The reference producer of ``docs/stream-protocol.md`` (the simulator and the
benchmark use it). One socket per receiver, as ZeroMQ would deal one socket's
messages round-robin, while every sector of frame f must reach receiver
``f mod R``. Sends block at the high-water mark; nothing is dropped. With a
CURVE server key every socket is a CURVE client with the certificate's keys; the
first ``begin`` waits for every handshake and raises :class:`StreamError` when one
is refused or none completes within ``handshake_timeout``.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from streams.codecs import encode
from streams.errors import StreamError
from streams.protocol import ScanGeometry
from streams.protocols.native.headers import encode_begin, encode_data, encode_end, route
from streams.security import client_keys, load_client_certificate
from streams.socketloop import DEFAULT_HWM
from streams.protocols.native.rendezvous import Rendezvous

__all__ = ["Producer", "BLOCKED_NOTE"]

#: Seconds a send blocked at the high-water mark before the producer says so (again).
BLOCKED_NOTE = 30.0


class Producer:
    """Send scans to the receivers of a rendezvous (or endpoints in index order) as
    producer index ``producer``.

    ``sndhwm``/``sndbuf``: send high-water mark per receiver and kernel buffer (0: the
    OS's); ``send_timeout``: seconds a send may block before :class:`StreamError`
    (default: never drop); ``linger``: seconds :meth:`close` waits; ``server_key``,
    ``certificate``, ``token``: default the rendezvous' (no key: plain ZeroMQ);
    ``insecure``: accept a rendezvous without a CURVE key (else refused, so a planted
    file cannot turn a producer into a plain-text sender); ``handshake_timeout``:
    seconds the first ``begin`` waits for every CURVE handshake.
    """

    def __init__(self, receivers: Union[Rendezvous, Sequence[str]], producer: int = 0, *,
                 sndhwm: int = DEFAULT_HWM, sndbuf: int = 0,
                 send_timeout: Optional[float] = None, linger: float = 60.0,
                 context: Any = None, server_key: Optional[str] = None,
                 certificate: Optional[str] = None, token: Optional[str] = None,
                 insecure: bool = False, handshake_timeout: float = 20.0) -> None:
        import zmq

        rv = receivers if isinstance(receivers, Rendezvous) else None
        eps = list(rv.receivers) if rv is not None else list(receivers)  # type: ignore[arg-type]
        if not eps:
            raise ValueError("expecting at least one receiver endpoint")
        if rv is not None:
            server_key = server_key or rv.server_key
            certificate = certificate or rv.client_certificate
            token = token or rv.token
            if server_key is None and not insecure:
                raise StreamError("the rendezvous file names no CURVE server key: the job "
                                  "runs --insecure (or the file is not the job's); send in "
                                  "plain text only if you mean it (insecure=True, --insecure)")
        if server_key is not None:
            if certificate is None:
                raise StreamError("the receivers use CURVE and the rendezvous names no client "
                                  "certificate (the job has --authorized-keys): give "
                                  "certificate= (a .key_secret file whose key is authorised)")
            load_client_certificate(certificate)      # a clear error before any connect
        self.server_key, self.certificate, self.token = server_key, certificate, token
        self._zmq = zmq
        self.endpoints = eps
        self.producer = producer
        self.linger = linger
        self.send_timeout = send_timeout
        self._ctx = context or zmq.Context.instance()
        self.sockets: List[Any] = []
        # CURVE: each socket's handshake events, watched until every receiver accepted
        self._monitors: List[Any] = []
        self.handshake_timeout = handshake_timeout
        for ep in eps:
            s = self._ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.SNDHWM, sndhwm)
            if sndbuf:
                s.setsockopt(zmq.SNDBUF, sndbuf)
            if send_timeout is not None:
                s.setsockopt(zmq.SNDTIMEO, int(send_timeout * 1000))
            if server_key is not None:
                client_keys(s, server_key, certificate)  # type: ignore[arg-type]
                self._monitors.append(s.get_monitor_socket(
                    zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL))
            s.connect(ep)
            self.sockets.append(s)
        self.geometry: Dict[str, ScanGeometry] = {}
        self.sent: Dict[str, List[int]] = {}
        self.blocked_s = 0.0   # time spent in sends (mostly: blocked at the high-water mark)

    @property
    def receivers(self) -> int:
        return len(self.sockets)

    def send_parts(self, receiver: int, parts: List[Any]) -> None:
        """Send one message (its frames) to receiver ``receiver``, blocking at the HWM
        (without a ``send_timeout``, saying so on stderr every :data:`BLOCKED_NOTE` s)."""
        t = time.perf_counter()
        zmq, sock = self._zmq, self.sockets[receiver]
        try:
            if self.send_timeout is None:
                try:
                    sock.send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
                    return
                except zmq.Again:       # the queue is full: wait, and never in silence
                    while not sock.poll(int(BLOCKED_NOTE * 1000), zmq.POLLOUT):
                        sys.stderr.write(
                            f"producer {self.producer}: receiver {receiver} "
                            f"({self.endpoints[receiver]}) has taken nothing for "
                            f"{time.perf_counter() - t:.0f} s (its queue is full): waiting "
                            "-- is the job still reading? (send_timeout bounds the wait)\n")
            sock.send_multipart(parts, copy=False)
        except zmq.Again:
            raise StreamError(f"producer {self.producer}: receiver {receiver} "
                              f"({self.endpoints[receiver]}) accepted nothing for the send "
                              "timeout: is it running and reading, and does it accept this "
                              "producer's CURVE certificate (see its report's "
                              "connections_refused)?") from None
        finally:
            self.blocked_s += time.perf_counter() - t

    def _handshakes(self) -> None:
        """Wait until every receiver completed the CURVE handshake (once): raise the
        cause of a refusal at once, or after ``handshake_timeout`` s name the receivers
        that never answered."""
        from zmq.utils.monitor import recv_monitor_message

        zmq = self._zmq
        waiting = dict(enumerate(self._monitors))
        end = time.monotonic() + self.handshake_timeout
        while waiting:
            for r, mon in list(waiting.items()):
                if not mon.poll(0):
                    continue
                ev = recv_monitor_message(mon)
                if ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    del waiting[r]
                    continue
                why = (f"refused this producer's CURVE certificate {self.certificate} "
                       f"(ZAP status {ev['value']}): use the job's producers' certificate "
                       "(the rendezvous file's client_certificate) or one of its "
                       "--authorized-keys" if ev["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                       else f"failed the CURVE handshake (ZMTP error {ev['value']:#x}: the "
                       "server key is not the job's?)")
                self._close_monitors()
                raise StreamError(f"producer {self.producer}: receiver {r} "
                                  f"({self.endpoints[r]}) {why}")
            if waiting and time.monotonic() > end:
                self._close_monitors()
                raise StreamError(
                    f"producer {self.producer}: no CURVE handshake with receiver(s) "
                    f"{', '.join(f'{r} ({self.endpoints[r]})' for r in sorted(waiting))} "
                    f"in {self.handshake_timeout:g} s: is the job still running there?")
            if waiting:
                time.sleep(0.01)
        self._close_monitors()

    def _close_monitors(self) -> None:
        for s, mon in zip(self.sockets, self._monitors):
            with contextlib.suppress(self._zmq.ZMQError):
                s.disable_monitor()
            mon.close(linger=0)
        self._monitors = []

    def begin(self, geometry: ScanGeometry) -> None:
        """Announce a scan to every receiver (before any of its data)."""
        if self._monitors:
            self._handshakes()
        hdr = encode_begin(geometry, self.producer, self.token)
        self.geometry[geometry.scan] = geometry
        self.sent[geometry.scan] = [0] * self.receivers
        for r in range(self.receivers):
            self.send_parts(r, [hdr, b""])

    def send(self, scan: str, frame: int, sector: int, payload: Any,
             encoding: str = "raw") -> int:
        """Send one encoded sector; the receiver index it went to (a large ``payload`` is
        sent without a copy: do not modify it afterwards)."""
        g = self.geometry[scan]
        r = route(frame, self.receivers)
        self.send_parts(r, [encode_data(scan, frame, sector, g.sector_rows(sector), encoding),
                            payload])
        self.sent[scan][r] += 1
        return r

    def send_sector(self, scan: str, frame: int, sector: int, image: np.ndarray,
                    encoding: str = "raw") -> int:
        """Encode and send sector ``sector`` of the whole frame ``image`` (rows x cols)."""
        g = self.geometry[scan]
        r0, r1 = g.sector_rows(sector)
        rows = np.ascontiguousarray(image[r0:r1], dtype=np.dtype(g.dtype))
        # a copy: zero-copy sends would read `image` after this returns, when the
        # caller may already be filling it with the next frame
        payload = rows.tobytes() if encoding == "raw" else encode(encoding, rows)
        return self.send(scan, frame, sector, payload, encoding)

    def end(self, scan: str) -> None:
        """Tell every receiver this producer is done with ``scan`` (after its last data)."""
        for r in range(self.receivers):
            self.send_parts(r, [encode_end(scan, self.producer, self.sent[scan][r]), b""])

    def close(self) -> None:
        """Close the sockets, waiting up to ``linger`` s for queued messages to leave."""
        self._close_monitors()
        for s in self.sockets:
            s.close(linger=int(self.linger * 1000))
        self.sockets = []

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
