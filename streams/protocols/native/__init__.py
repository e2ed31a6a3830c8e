"""The native protocol ``mpistage-stream/1`` (``docs/stream-protocol.md``).

Producers PUSH msgpack headers + payloads to every receiver's bound PULL socket,
sector s of frame f from producer ``(f * S + s) mod P`` to receiver ``f mod R``,
found through the rendezvous file; CURVE by default. Modules: ``headers``,
``receiver``, ``producer``, ``rendezvous``; the simulator is :mod:`streams.simulate`.
"""
from __future__ import annotations

from typing import Any, List, Optional

from streams.protocols import StreamProtocol

__all__ = ["Native"]


class Native(StreamProtocol):
    """The row ``native`` of :data:`streams.protocols.ROWS`."""

    name = "native"
    routing = "modulo"

    def check(self, o: Any) -> None:
        if o.allow_from is not None:
            raise ValueError("--allow-from is for Stream V2 (--stream2); native producers "
                             "authenticate with CURVE keys")

    def socket(self, loop: Any, o: Any, index: int, count: int, partition_frames: Any,
               security: Any) -> str:
        from streams.protocols.native.receiver import Receiver

        sock = Receiver(loop.deliver, index=index, count=count, bind=f"tcp://{o.bind_host}:*",
                        advertise=o.advertise, rcvhwm=o.rcvhwm,
                        partition_frames=partition_frames, memory_bytes=o.memory_bytes,
                        idle_timeout=o.idle_timeout, on_close=loop.on_close, security=security,
                        max_scans=o.max_open_scans, job_bytes=loop.analysis.scan_bytes,
                        token=getattr(security, "token", None))
        loop.socket = sock
        return sock.bind()

    def rendezvous(self, o: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        from streams.protocols.native.rendezvous import write_rendezvous

        write_rendezvous(o.rendezvous, endpoints, live,
                         security.server_public if security is not None else None,
                         security.client_certificate if security is not None else None,
                         mode=o.rendezvous_mode,
                         viewer_certificate=security.viewer_certificate
                         if security is not None else None,
                         token=getattr(security, "token", None))
