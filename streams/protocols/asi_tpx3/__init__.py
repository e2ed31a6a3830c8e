"""Amsterdam Scientific Instruments' CheeTah TPX3 over TCP: sparse (CSR) frames per scan position.

The detector software serves its data socket to one client, so one receiver of the
job connects (``--tpx3-endpoint HOST:8283``) and receives every frame (routing
``any``; the other receivers open and close each scan as it is shared). TCP from
the detector has no CURVE: restrict it by network. Here:
:mod:`~streams.protocols.asi_tpx3.wire` (the messages, their bounds, the encoder),
:mod:`~streams.protocols.asi_tpx3.receiver` (the connection),
:mod:`~streams.protocols.asi_tpx3.simulator` (``python -m streams.simulate --protocol
asi-tpx3``); LiberTEM-live's ``libertem_live.detectors.asi_tpx3.sim.TpxCameraSim``
is the peer of the tests. The wire format: ``docs/stream-protocol.md`` section 13.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, List, Optional

from streams.protocols import ProtocolOption, StreamProtocol, write_rendezvous_json
from streams.scanshape import parse_scan_shape

__all__ = ["AsiTpx3"]


def _tpx3_endpoint(text: Any, name: str = "--tpx3-endpoint") -> str:
    host, sep, port = str(text).replace("tcp://", "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{name} {text!r}: expected HOST:PORT (the detector "
                         "software's data socket, 8283 by default)")
    return f"{host}:{port}"


class AsiTpx3(StreamProtocol):
    """The row ``asi-tpx3`` of :data:`streams.protocols.ROWS`."""

    name = "asi-tpx3"
    routing = "any"
    options = (
        ProtocolOption("tpx3_endpoint", None, _tpx3_endpoint, "STAGER_STREAM_TPX3_ENDPOINT",
                       "ASI TPX3: the detector's data socket to connect to (HOST:8283)",
                       "HOST:PORT"),
        ProtocolOption("tpx3_scan_shape", None, parse_scan_shape,
                       "STAGER_STREAM_TPX3_SCAN_SHAPE",
                       "ASI TPX3: the scan's shape NY,NX (one may be -1), checked against "
                       "the acquisition's nav shape (default: that nav shape)", "NY,NX"),
    )

    def check(self, o: Any) -> None:
        if not (o.protocol_options.get("tpx3_endpoint")
                or os.environ.get("STAGER_STREAM_TPX3_ENDPOINT")):
            raise ValueError("the ASI TPX3 protocol connects to the detector: give "
                             "--tpx3-endpoint HOST:8283")
        if o.authorized_keys:
            raise ValueError("--authorized-keys: a TPX3 data socket has no CURVE")

    def socket(self, loop: Any, o: Any, index: int, count: int, partition_frames: Any,
               security: Any) -> str:
        from streams.protocols.asi_tpx3.receiver import Tpx3Receiver

        mine = o.protocol_options
        host, _, port = mine["tpx3_endpoint"].rpartition(":")
        sock = Tpx3Receiver(loop.deliver, host, int(port) if index == 0 else None,
                            scan_shape=mine["tpx3_scan_shape"],
                            partition_frames=partition_frames, memory_bytes=o.memory_bytes,
                            idle_timeout=o.idle_timeout, on_close=loop.on_close,
                            on_share=loop.share)
        loop.socket = sock
        return f"asi-tpx3:{mine['tpx3_endpoint']}" if index == 0 else "asi-tpx3:idle"

    def rendezvous(self, o: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        write_rendezvous_json(o, {"protocol": "asi-tpx3", "detector": o.protocol_options[
            "tpx3_endpoint"], "live": live, "receivers": endpoints})

    def detector_metadata(self, socket: Any, scan: str) -> Optional[Callable[[Any], None]]:
        """The acquisition start, as the scan's ``/detector`` (description: its fields)."""
        got = socket.detector(scan) if socket is not None else None
        if got is None:
            return None
        from streams.protocols.stream2.streamv2 import Start

        a = got["acquisition"]
        text = (f"ASI CheeTah TPX3 (stream version {a.version}, CSR, nav "
                f"{a.nav_shape[0]}x{a.nav_shape[1]}, sig {a.sig_shape[0]}x{a.sig_shape[1]}, "
                f"indptr {a.indptr_dtype}, indices {a.indices_dtype}, acquisition "
                f"{a.sequence})")
        start = Start(0, scan, a.nav_shape[0] * a.nav_shape[1], 0, 0, None, (),
                      {"detector_description": text})
        from streams.protocols.stream2.nxdetector import write_detector

        return functools.partial(write_detector, start=start, channel=None)
