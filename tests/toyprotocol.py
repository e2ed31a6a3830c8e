"""A toy stream protocol, ``lines``: one module plus one row, to prove a protocol is a
plug-in.

A producer PUSHes one message per frame to the receiver's bound PULL socket: a JSON
header (``{"kind": "frame", "scan": S, "frame": F}``) and the frame's raw bytes,
after a ``begin`` (the geometry) and before an ``end`` (how many frames it sent).
Any receiver may get any frame (routing ``any``). There is no CURVE (the job must
run ``--insecure``): :meth:`Lines.check` says so. Registered with
:func:`streams.protocols.register`; nothing else of ``streams`` is touched.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, List, Optional

import numpy as np

from core import localfs
from streams.assemble import Assembler
from streams.protocol import Begin, Data, End, Reason, ScanGeometry
from streams.protocols import StreamProtocol, register
from streams.socketloop import SocketLoop, resolve_endpoint


class LinesSocket(SocketLoop):
    """The receiving socket: a PULL socket feeding the shared assembler."""

    def __init__(self, deliver: Callable, on_close: Callable, bind: str,
                 partition_frames: Any, memory_bytes: int, idle_timeout: float) -> None:
        super().__init__(on_close)
        zmq = self._zmq
        self.assembler = Assembler(deliver, routing="any", partition_frames=partition_frames,
                                   memory_bytes=memory_bytes, idle_timeout=idle_timeout,
                                   on_close=self._closed)
        self._sock = zmq.Context.instance().socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._bind = bind

    def bind(self) -> str:
        self._sock.bind(self._bind)
        return resolve_endpoint(self._sock.getsockopt(self._zmq.LAST_ENDPOINT).decode())

    def _read(self, max_messages: int) -> int:
        n = 0
        while n < max_messages:
            try:
                parts = self._sock.recv_multipart(self._zmq.NOBLOCK)
            except self._zmq.Again:
                break
            n += 1
            try:
                h = json.loads(parts[0])
                kind = h["kind"]
            except (ValueError, KeyError, TypeError) as e:
                self.assembler.reject(Reason.MALFORMED, f"lines header: {e}")
                continue
            if kind == "begin":
                g = ScanGeometry(h["scan"], 1, h["frames"], 1, tuple(h["shape"]), h["dtype"],
                                 tuple(h["scan_shape"]))
                self.assembler.begin(Begin(0, g))
            elif kind == "frame":
                rows = self.assembler.scans[h["scan"]].g.shape[0] \
                    if h["scan"] in self.assembler.scans else 0
                self.assembler.data(Data(h["scan"], h["frame"], 0, 0, rows, "raw"), parts[1])
            elif kind == "end":
                self.assembler.end(End(h["scan"], 0, h["sent"]))
        return n


class Lines(StreamProtocol):
    """The row ``lines`` of :data:`streams.protocols.ROWS`."""

    name = "lines"
    routing = "any"

    def check(self, o: Any) -> None:
        if not o.insecure:
            raise ValueError("the lines protocol has no CURVE: give --insecure")

    def socket(self, loop: Any, o: Any, index: int, count: int, partition_frames: Any,
               security: Any) -> str:
        sock = LinesSocket(loop.deliver, loop.on_close, f"tcp://{o.bind_host}:*",
                           partition_frames, o.memory_bytes, o.idle_timeout)
        loop.socket = sock
        return sock.bind()

    def rendezvous(self, o: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        text = json.dumps({"protocol": "lines", "receivers": endpoints, "live": live})
        localfs.write_bytes_atomic(os.path.abspath(o.rendezvous), text.encode(),
                                   mode=o.rendezvous_mode)


def send_scan(endpoint: str, scan: str, frames: np.ndarray, scan_shape: tuple) -> int:
    """The producer: ``frames`` (N, rows, cols) to ``endpoint``; returns frames sent."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.connect(endpoint)
    try:
        head = {"kind": "begin", "scan": scan, "frames": len(frames),
                "shape": list(frames.shape[1:]), "dtype": frames.dtype.str,
                "scan_shape": list(scan_shape)}
        sock.send(json.dumps(head).encode())
        for i, f in enumerate(frames):
            sock.send_multipart([json.dumps({"kind": "frame", "scan": scan,
                                             "frame": i}).encode(), f.tobytes()])
        sock.send(json.dumps({"kind": "end", "scan": scan, "sent": len(frames)}).encode())
    finally:
        sock.close(linger=10000)
    return len(frames)


register("lines", Lines())  # the one row
