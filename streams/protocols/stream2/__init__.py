"""DECTRIS Stream V2 (SIMPLON 1.8+, Jungfraujoch): CBOR start/image/end messages.

The detector deals its PUSH messages round-robin over the clients that connect
(``--stream2 ENDPOINT``): any receiver may get any image (routing ``any``) and
the job shares each series' start and end between them. No CURVE: ``--allow-from``
and ``--bind`` restrict the detector. Modules: ``streamv2`` (messages),
``receiver``, ``simulator``, ``bounds``, ``nxdetector``.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from core.options import parse_bool, parse_int, parse_number
from streams.protocols import ProtocolOption, StreamProtocol, connect_from, write_rendezvous_json

__all__ = ["StreamV2"]


class StreamV2(StreamProtocol):
    """The row ``stream2`` of :data:`streams.protocols.ROWS`."""

    name = "stream2"
    routing = "any"
    options = (
        ProtocolOption("v2_grace", 1.0, parse_number(0, strict=True), "STAGER_STREAM_V2_GRACE",
                       "Stream V2: seconds without images before an end another client "
                       "received closes a series here (default 1)", "S"),
        ProtocolOption("v2_decode_threads", 0, parse_int(0), "STAGER_STREAM_V2_DECODE_THREADS",
                       "Stream V2: decode payloads on N threads per receiver, off the "
                       "receiving thread (default 0; --receivers-per-node scaled better "
                       "where measured)", "N"),
        ProtocolOption("v2_pixel_mask", False, parse_bool, "STAGER_STREAM_V2_PIXEL_MASK",
                       "Stream V2: zero the pixels the start's pixel_mask marks before the "
                       "analysis (needs SIMPLON header_detail all)"),
        ProtocolOption("v2_hold_memory", None, parse_number(0, strict=True),
                       "STAGER_STREAM_V2_HOLD_MEMORY",
                       "Stream V2: MiB per receiver for images that arrive before their "
                       "series' start reaches it, and for an image's user-data arrays "
                       "(default: a quarter of --memory); when full, the receiver stops "
                       "reading until the start arrives", "MiB"),
    )

    def check(self, o: Any) -> None:
        if not o.stream2:
            raise ValueError("Stream V2 connects to the detector: give --stream2 ENDPOINT")
        if o.authorized_keys:
            raise ValueError("--authorized-keys: a Stream V2 detector cannot use CURVE; "
                             "restrict it with --allow-from ADDR and --bind HOST")

    def socket(self, loop: Any, o: Any, index: int, count: int, partition_frames: Any,
               security: Any) -> str:
        from streams.protocols.stream2.receiver import StreamV2Receiver

        mine = o.protocol_options
        v2 = StreamV2Receiver(loop.deliver, o.stream2, partition_frames=partition_frames,
                              memory_bytes=o.memory_bytes, idle_timeout=o.idle_timeout,
                              rcvhwm=o.rcvhwm, on_close=loop.on_close,
                              max_scans=o.max_open_scans,
                              apply_pixel_mask=mine["v2_pixel_mask"],
                              decode_threads=mine["v2_decode_threads"],
                              held_bytes=None if mine["v2_hold_memory"] is None
                              else int(mine["v2_hold_memory"] * 2**20),
                              shared_starts=count > 1,
                              shared_grace=mine["v2_grace"],
                              on_start=lambda s: loop.share("start", s),
                              on_end=lambda e: loop.share("end", e),
                              security=security, source=connect_from(o.bind_host))
        v2.assembler.job_bytes = loop.analysis.scan_bytes    # a start's whole cost
        v2.connect()
        loop.socket = v2
        return f"stream2:{o.stream2}"

    def detector_metadata(self, socket: Any, scan: str) -> Optional[Callable[[Any], None]]:
        """The series' start as the scan's NXdetector group."""
        from streams.protocols.stream2.nxdetector import socket_detector

        return socket_detector(socket, scan)

    def rendezvous(self, o: Any, endpoints: List[str], live: Optional[str],
                   security: Any) -> None:
        from streams.protocols.native.rendezvous import job_identity

        # Nothing for a native producer to connect to: a protocol it refuses.
        write_rendezvous_json(o, {
            "protocol": "dectris-stream2", "detector": o.stream2, "live": live,
            "curve_serverkey": getattr(security, "server_public", None),
            "client_certificate": getattr(security, "client_certificate", None),
            "viewer_certificate": getattr(security, "viewer_certificate", None),
            **job_identity()})
