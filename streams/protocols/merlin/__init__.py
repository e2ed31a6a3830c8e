"""Quantum Detectors Merlin (Medipix3) over TCP: MPX messages, ``HDR`` + ``MQ1`` frames.

The detector serves its data port (6342) to one client, so one receiver of the job
connects (``--merlin-endpoint HOST:6342``) and receives every frame (routing
``any``; the other receivers stay idle, open and close each acquisition as the
receiving one shares it, and the job's workers do the analysis). TCP
from the detector has no CURVE: restrict it by network. Here:
:mod:`~streams.protocols.merlin.mpx` (the messages), :mod:`~streams.protocols.merlin.receiver`
(the connection); LiberTEM-live's ``libertem_live.detectors.merlin.sim`` replays MIB
files for the tests.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, List, Optional

from streams.protocols import ProtocolOption, StreamProtocol, write_rendezvous_json
from streams.scanshape import parse_scan_shape

__all__ = ["Merlin"]


def _endpoint(text: Any, name: str = "endpoint") -> str:
    host, sep, port = str(text).replace("tcp://", "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{name} {text!r}: expected HOST:PORT (a Merlin's data port: 6342)")
    return f"{host}:{port}"


class Merlin(StreamProtocol):
    """The row ``merlin`` of :data:`streams.protocols.ROWS`."""

    name = "merlin"
    routing = "any"
    options = (
        ProtocolOption("merlin_endpoint", None, _endpoint, "STAGER_STREAM_MERLIN_ENDPOINT",
                       "Merlin: the detector's data port to connect to (HOST:6342)", "HOST:PORT"),
        ProtocolOption("merlin_scan_shape", None, parse_scan_shape,
                       "STAGER_STREAM_MERLIN_SCAN_SHAPE",
                       "Merlin: the scan's shape NY,NX (one may be -1; default from the "
                       "acquisition header: ScanY,ScanX or frames per trigger)", "NY,NX"),
    )

    def check(self, o: Any) -> None:
        if not (o.protocol_options.get("merlin_endpoint")
                or os.environ.get("STAGER_STREAM_MERLIN_ENDPOINT")):
            raise ValueError("the Merlin protocol connects to the detector: give "
                             "--merlin-endpoint HOST:6342")
        if o.authorized_keys:
            raise ValueError("--authorized-keys: a Merlin's TCP port has no CURVE")

    def socket(self, loop: Any, o: Any, index: int, count: int, partition_frames: Any,
               security: Any) -> str:
        from streams.protocols.merlin.receiver import MerlinReceiver

        mine = o.protocol_options
        host, _, port = mine["merlin_endpoint"].rpartition(":")
        sock = MerlinReceiver(loop.deliver, host, int(port) if index == 0 else None,
                              scan_shape=mine["merlin_scan_shape"],
                              partition_frames=partition_frames, memory_bytes=o.memory_bytes,
                              idle_timeout=o.idle_timeout, on_close=loop.on_close,
                              on_share=loop.share)
        loop.socket = sock
        return f"merlin:{mine['merlin_endpoint']}" if index == 0 else "merlin:idle"

    def rendezvous(self, o: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        write_rendezvous_json(o, {"protocol": "merlin", "detector": o.protocol_options[
            "merlin_endpoint"], "live": live, "receivers": endpoints})

    def detector_metadata(self, socket: Any, scan: str) -> Optional[Callable[[Any], None]]:
        """The acquisition header, as the scan's ``/detector`` (description: the HDR)."""
        got = socket.detector(scan) if socket is not None else None
        if got is None:
            return None
        from streams.protocols.stream2.nxdetector import write_detector
        from streams.protocols.stream2.streamv2 import Start

        hdr = got["hdr"]
        text = "; ".join(f"{k}: {v}" for k, v in hdr.items())
        fields = {"detector_description": f"Quantum Detectors Merlin ({text})"[:4000]}
        start = Start(0, scan, int(hdr.get("Frames in Acquisition (Number)", 0) or 0), 0, 0,
                      None, (), fields)
        return functools.partial(write_detector, start=start, channel=None)
