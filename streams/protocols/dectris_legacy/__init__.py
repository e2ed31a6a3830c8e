"""DECTRIS's legacy stream (SIMPLON ``format legacy``, port 9999): multipart JSON + blobs.

The stream LiberTEM-live reads. The detector binds a PUSH socket and deals its
messages round-robin over the connected clients, as with Stream V2: every
receiver *connects* (``--dectris-endpoint tcp://DCU:9999``), may get any image
(routing ``any``), and the job shares each series' header and end between
receivers. The detector cannot do CURVE: ``--allow-from`` and ``--bind`` restrict
it. Here: :mod:`~streams.protocols.dectris_legacy.legacy` (the messages),
:mod:`~streams.protocols.dectris_legacy.receiver` (the socket),
:mod:`~streams.protocols.dectris_legacy.simulator` (a detector and dump files for
tests: ``python -m streams.simulate --protocol dectris-legacy``).
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

from core.options import parse_bool, parse_int, parse_number
from streams.protocols import ProtocolOption, StreamProtocol, connect_from, write_rendezvous_json
from streams.scanshape import parse_scan_shape

__all__ = ["DectrisLegacy"]


def _endpoint(text: Any, name: str = "endpoint") -> str:
    if not isinstance(text, str) or not text.startswith("tcp://") or ":" not in text[6:]:
        raise ValueError(f"{name} {text!r}: expected tcp://HOST:PORT (a DECTRIS DCU: port "
                         "9999)")
    return text


class DectrisLegacy(StreamProtocol):
    """The row ``dectris-legacy`` of :data:`streams.protocols.ROWS`."""

    name = "dectris-legacy"
    routing = "any"
    options = (
        ProtocolOption("dectris_endpoint", None, _endpoint, "STAGER_STREAM_DECTRIS_ENDPOINT",
                       "DECTRIS legacy stream: the detector's data endpoint to connect to "
                       "(tcp://HOST:9999)", "ENDPOINT"),
        ProtocolOption("dectris_scan_shape", None, parse_scan_shape,
                       "STAGER_STREAM_DECTRIS_SCAN_SHAPE",
                       "DECTRIS legacy stream: the scan's shape NY,NX (one may be -1, "
                       "resolved from the image count; default 1,IMAGES)", "NY,NX"),
        ProtocolOption("dectris_images", 0, parse_int(0), "STAGER_STREAM_DECTRIS_IMAGES",
                       "DECTRIS legacy stream: images per series when the detector sends "
                       "header_detail none (no configuration in the stream)", "N"),
        ProtocolOption("dectris_grace", 1.0, parse_number(0, strict=True),
                       "STAGER_STREAM_DECTRIS_GRACE",
                       "DECTRIS legacy stream: seconds without images before an end another "
                       "client received closes a series here (default 1)", "S"),
        ProtocolOption("dectris_pixel_mask", False, parse_bool,
                       "STAGER_STREAM_DECTRIS_PIXEL_MASK",
                       "DECTRIS legacy stream: zero the pixels the header's pixel mask marks "
                       "before the analysis (needs SIMPLON header_detail all)"),
        ProtocolOption("dectris_check_hash", False, parse_bool,
                       "STAGER_STREAM_DECTRIS_CHECK_HASH",
                       "DECTRIS legacy stream: check every image's MD5 (costs CPU)"),
    )

    def check(self, o: Any) -> None:
        if not (o.protocol_options.get("dectris_endpoint")
                or os.environ.get("STAGER_STREAM_DECTRIS_ENDPOINT")):
            raise ValueError("the DECTRIS legacy stream connects to the detector: give "
                             "--dectris-endpoint tcp://HOST:9999")
        if o.authorized_keys:
            raise ValueError("--authorized-keys: a DECTRIS detector cannot use CURVE; "
                             "restrict it with --allow-from ADDR and --bind HOST")

    def socket(self, loop: Any, o: Any, index: int, count: int, partition_frames: Any,
               security: Any) -> str:
        from streams.protocols.dectris_legacy.receiver import LegacyReceiver

        mine = o.protocol_options
        endpoint = mine["dectris_endpoint"]
        sock = LegacyReceiver(loop.deliver, endpoint, partition_frames=partition_frames,
                              memory_bytes=o.memory_bytes, idle_timeout=o.idle_timeout,
                              rcvhwm=o.rcvhwm, on_close=loop.on_close,
                              scan_shape=mine["dectris_scan_shape"],
                              images=mine["dectris_images"],
                              check_hash=mine["dectris_check_hash"],
                              apply_pixel_mask=mine["dectris_pixel_mask"],
                              shared_grace=mine["dectris_grace"],
                              on_start=lambda s: loop.share("start", s),
                              on_end=lambda e: loop.share("end", e),
                              on_piece=lambda p: loop.share("start", p),
                              security=security, source=connect_from(o.bind_host))
        sock.connect()
        loop.socket = sock
        return f"dectris-legacy:{endpoint}"

    def detector_metadata(self, socket: Any, scan: str) -> Optional[Callable[[Any], None]]:
        """The series' start as the scan's NXdetector group."""
        from streams.protocols.stream2.nxdetector import socket_detector

        return socket_detector(socket, scan)

    def rendezvous(self, o: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        write_rendezvous_json(o, {
            "protocol": "dectris-legacy", "detector": o.protocol_options["dectris_endpoint"],
            "live": live, "curve_serverkey": getattr(security, "server_public", None),
            "client_certificate": getattr(security, "client_certificate", None)})
