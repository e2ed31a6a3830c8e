"""A Stream V2 client: a PULL socket connected to a detector, feeding an Assembler.

A DECTRIS detector (or Jungfraujoch) *binds* a PUSH socket and deals its messages
round-robin over every connected PULL client, each message to exactly one of
them. So one client sees the ``start`` and ``end`` of a series and only some of
its images. This client therefore:

- assembles whatever images reach it (routing ``any``: no image is "wrong" here),
  one frame per image, one sector per frame, the chosen ``channel`` only;
- calls ``on_start`` / ``on_end`` with the decoded messages it receives, and
  accepts :meth:`StreamV2Receiver.apply_start` / :meth:`apply_end` from outside:
  that is how the MPI layer (phase 2) shares them, so every client opens and
  closes the series. A shared end closes a series only after ``grace`` seconds
  without an image of it: the end reached another client, and this client's
  last images may still be in flight (measured: without the grace, images
  queued behind a shared end were rejected ``late``);
- keeps images that arrive before their series' start is known (at most
  ``pending_max``, each at most ``idle_timeout`` seconds; beyond either they are
  rejected ``unknown_scan``).

A client's own report expects every image of the series; merging the clients'
reports (:meth:`ScanReport.merge`) gives the truth for the series.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from stager.stream.accounting import ScanReport
from stager.stream.assemble import DEFAULT_MEMORY_BYTES, Assembler, Partition
from stager.stream.errors import ProtocolError, StreamError
from stager.stream.protocol import Begin, Data, Reason, ScanGeometry
from stager.stream.protocol import End as NativeEnd
from stager.stream.receiver import DEFAULT_HWM, SocketLoop
from stager.stream.streamv2 import End, Image, Start, decode_message, scan_name

__all__ = ["StreamV2Receiver"]


class StreamV2Receiver(SocketLoop):
    """Receive a DECTRIS Stream V2 stream into partitions.

    Parameters
    ----------
    deliver : callable(Partition)
        As for :class:`~stager.stream.receiver.Receiver`.
    endpoint : str
        The detector's ``tcp://HOST:PORT`` (DECTRIS: port 31001).
    channel : str, optional
        Which channel of each image to keep (default: the first of ``channels``).
    scan_shape : (int, int), optional
        Scan grid of the series (default: ``user_data["scan_shape"]`` of the start
        message if present, else ``(1, number_of_images)``).
    pending_max : int
        Images held while their start is unknown.
    on_start, on_end : callable, optional
        Called with each :class:`Start` / :class:`End` this client receives.
    partition_frames, memory_bytes, max_scans, idle_timeout, rcvhwm, on_close, context
        As for :class:`~stager.stream.receiver.Receiver`.
    security : StreamSecurity, optional
        Its ``allow_from``: ZAP accepts only these detector addresses (refusals
        counted as for the native receiver); the detector cannot do CURVE.
    source : str, optional
        Local interface address to connect from (``tcp://SOURCE:0;HOST:PORT``).
    """

    def __init__(self, deliver: Callable[[Partition], Any], endpoint: str, *,
                 channel: Optional[str] = None, scan_shape: Optional[Tuple[int, int]] = None,
                 partition_frames: Union[int, Callable[[ScanGeometry], int]] = 1,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 max_scans: int = 4, idle_timeout: float = 30.0, rcvhwm: int = DEFAULT_HWM,
                 pending_max: int = 256,
                 on_start: Optional[Callable[[Start], Any]] = None,
                 on_end: Optional[Callable[[End], Any]] = None,
                 on_close: Optional[Callable[[ScanReport], Any]] = None,
                 context: Any = None, security: Any = None,
                 source: Optional[str] = None) -> None:
        super().__init__(on_close)
        zmq = self._zmq
        self._source = source
        self.assembler = Assembler(deliver, routing="any", partition_frames=partition_frames,
                                   memory_bytes=memory_bytes, max_scans=max_scans,
                                   idle_timeout=idle_timeout, on_close=self._closed)
        self.endpoint = endpoint
        self.channel, self.scan_shape = channel, scan_shape
        self.on_start, self.on_end = on_start, on_end
        self.pending_max = pending_max
        self.starts: Dict[int, Start] = {}
        self._channel: Dict[int, str] = {}
        self._deferred: Dict[int, Start] = {}   # start without image_dtype: open at 1st image
        self._pending: OrderedDict[int, Tuple[float, Image]] = OrderedDict()
        self._held = itertools.count()
        self._ending: Dict[str, Tuple[float, float]] = {}   # scan -> (grace, deadline)
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        from stager.stream.security import DOMAIN_STREAM2

        self._secure(security, DOMAIN_STREAM2, server=False)   # issue 25: ZAP allow-list
        self._connected = False

    def connect(self) -> None:
        """Connect to the detector (ZeroMQ retries until it is there)."""
        try:
            ep = self.endpoint
            if self._source:           # connect from the interface the user named
                ep = ep.replace("tcp://", f"tcp://{self._source}:0;", 1)
            self._sock.connect(ep)
        except self._zmq.ZMQError as e:
            raise StreamError(f"cannot connect to the Stream V2 endpoint {self.endpoint}: "
                              f"{e}") from e
        self._connected = True

    def _ready(self) -> None:
        if not self._connected:
            self.connect()

    def _read(self, max_messages: int) -> int:
        zmq, sock = self._zmq, self._sock
        n = 0
        while n < max_messages:
            try:
                parts = [sock.recv(zmq.NOBLOCK, copy=False)]
            except zmq.Again:
                break
            while sock.rcvmore:      # Stream V2 messages are single-part
                parts.append(sock.recv(copy=False))
            n += 1
            if len(parts) != 1:
                self.assembler.reject(Reason.MALFORMED, f"Stream V2 message of {len(parts)} "
                                      "parts, expected 1")
                continue
            self.handle(parts[0].buffer)
        return n

    # ---- messages ----
    def handle(self, buf: Any) -> None:
        """Decode and apply one message (bytes); rejections are counted, never raised."""
        try:
            msg = decode_message(buf)
        except ProtocolError as e:
            self.assembler.reject(e.reason, e.detail)
            return
        if isinstance(msg, Image):
            self._image(msg)
        elif isinstance(msg, Start):
            if self.on_start is not None:
                self.on_start(msg)
            self.apply_start(msg)
        else:
            if self.on_end is not None:
                self.on_end(msg)
            self.apply_end(msg)

    def apply_start(self, start: Start) -> None:
        """Open the series (a start received here or shared by another client)."""
        sid = start.series_id
        if sid in self.starts:
            self.assembler.reject(Reason.DUPLICATE, f"second start of series {sid}",
                                  scan_name(sid))
            return
        self.starts[sid] = start
        chans = start.channels
        channel = self.channel or (chans[0] if chans else "threshold_1")
        if chans and channel not in chans:
            self.assembler.reject(Reason.CONFLICT, f"series {sid} has channels {list(chans)}, "
                                  f"not {channel!r}: choose one of them")
        self._channel[sid] = channel
        if start.image_dtype is None:
            self._deferred[sid] = start
        else:
            self._open(start, None)

    def _open(self, start: Start, dtype: Optional[str]) -> None:
        try:
            g = start.geometry(self.scan_shape, dtype)
        except ProtocolError as e:
            self.assembler.reject(e.reason, e.detail)
            return
        self.assembler.begin(Begin(0, g))
        for key in [k for k, (_, im) in self._pending.items() if im.series_id == start.series_id]:
            _, im = self._pending.pop(key)
            self._image(im)

    def apply_end(self, end: End, grace: float = 0.0) -> None:
        """Close the series: now (``grace`` 0: the end reached this client, after every
        image the detector sent it), or once no image of it came for ``grace`` seconds
        (an end shared by another client: this client's last images may still be on
        their way)."""
        self._deferred.pop(end.series_id, None)
        scan = scan_name(end.series_id)
        if grace > 0 and scan in self.assembler.scans:
            self._ending[scan] = (grace, self.assembler.clock() + grace)
            return
        self._ending.pop(scan, None)
        self.assembler.end(NativeEnd(scan, 0, None))

    def _image(self, im: Image) -> None:
        sid, scan = im.series_id, scan_name(im.series_id)
        if sid in self._deferred and self._channel[sid] in im.data:
            self._open(self._deferred.pop(sid), im.data[self._channel[sid]].dtype)
        if scan in self.assembler.closed:
            self.assembler.reject(Reason.LATE, f"series {sid} image {im.image_id} arrived "
                                  "after the series closed here")
            return
        if scan not in self.assembler.scans:
            self._hold(im)
            return
        channel = self._channel.get(sid, self.channel or "")
        ch = im.data.get(channel)
        where = f"series {sid} image {im.image_id}"
        if ch is None:
            self.assembler.reject(Reason.MALFORMED, f"{where} has no channel {channel!r} "
                                  f"(it has {sorted(im.data)})", scan)
            return
        st = self.assembler.scans.get(scan)
        if st is not None and (ch.shape != st.g.shape or ch.dtype != st.g.dtype):
            self.assembler.reject(Reason.CONFLICT, f"{where}: {ch.shape} {ch.dtype}, the "
                                  f"start said {st.g.shape} {st.g.dtype}", scan)
            return
        self.assembler.data(Data(scan, im.image_id, 0, 0, ch.shape[0], ch.encoding), ch.payload)
        if scan in self._ending:
            grace = self._ending[scan][0]
            self._ending[scan] = (grace, self.assembler.clock() + grace)

    def _hold(self, im: Image) -> None:
        key = next(self._held)
        self._pending[key] = (self.assembler.clock(), im)
        while len(self._pending) > self.pending_max:
            _, (_, old) = self._pending.popitem(last=False)
            self.assembler.reject(Reason.UNKNOWN_SCAN, f"series {old.series_id} image "
                                  f"{old.image_id}: no start within {self.pending_max} "
                                  "held images")

    def _expire(self) -> None:
        now = self.assembler.clock()
        stale: List[int] = [k for k, (t, _) in self._pending.items()
                            if now - t >= self.assembler.idle_timeout]
        for k in stale:
            _, im = self._pending.pop(k)
            self.assembler.reject(Reason.UNKNOWN_SCAN, f"series {im.series_id} image "
                                  f"{im.image_id}: no start within "
                                  f"{self.assembler.idle_timeout:g} s")
        for scan, (_, deadline) in list(self._ending.items()):
            if now >= deadline:
                del self._ending[scan]
                if scan in self.assembler.scans:
                    self.assembler.end(NativeEnd(scan, 0, None))
        self.assembler.expire()
