"""A Stream V2 client: a PULL socket connected to a detector, feeding an Assembler.

The detector deals each message to one connected client, so a client sees a
series' start and end but only some of its images (``docs/stream-protocol.md``
section 8 says what a client does and rejects). It assembles the images that reach
it (routing ``any``), shares the starts and ends it receives and applies the
others' (:meth:`StreamV2Receiver.apply_shared`), and holds what arrives before its
start within ``held_bytes`` (a full hold stops reading while starts are shared);
merging the clients' reports gives the series' truth.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter, OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from streams.accounting import ScanReport
from streams.assemble import DEFAULT_MEMORY_BYTES, Assembler, Partition
from streams.codecs import bslz4_decode, decoded_size, lz4_decode
from streams.errors import ProtocolError, StreamError
from streams.protocol import Begin, Data, Reason, ScanGeometry
from streams.protocol import End as NativeEnd
from streams.security import DOMAIN_STREAM2
from streams.socketloop import DEFAULT_HWM, SocketLoop
from streams.protocols.stream2.bounds import MAX_ARRAY_BYTES
from streams.protocols.stream2.streamv2 import (ChannelImage, End, Image, Start, decode_message,
                                                scan_name)

__all__ = ["StreamV2Receiver"]


class StreamV2Receiver(SocketLoop):
    """Receive a DECTRIS Stream V2 stream from ``endpoint`` (``tcp://HOST:PORT``, DECTRIS:
    31001; from the local interface ``source``) into partitions.

    ``channel``: the one kept (default the first); ``scan_shape``: default the start's
    ``user_data["scan_shape"]``, else ``(1, number_of_images)``; ``held_bytes``: memory
    for messages held before their start (default ``memory_bytes // 4``), a full hold
    stopping reads with ``shared_starts``; ``max_array_bytes``: one message's decoded
    arrays (default ``memory_bytes``, at most :data:`.bounds.MAX_ARRAY_BYTES`);
    ``decode_threads``: threads decoding a batch's payloads (0: this thread);
    ``apply_pixel_mask``: zero the pixels the start's mask marks; ``shared_grace``:
    seconds without images before a shared end closes a series; ``on_start``/``on_end``:
    called with each start or end received here; ``security``: its ``allow_from``, the
    detector addresses ZAP accepts. The rest as for
    :class:`~streams.protocols.native.receiver.Receiver`.
    """

    def __init__(self, deliver: Callable[[Partition], Any], endpoint: str, *,
                 channel: Optional[str] = None, scan_shape: Optional[Tuple[int, int]] = None,
                 partition_frames: Union[int, Callable[[ScanGeometry], int]] = 1,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 max_scans: int = 4, idle_timeout: float = 30.0, rcvhwm: int = DEFAULT_HWM,
                 held_bytes: Optional[int] = None, shared_starts: bool = False,
                 max_array_bytes: Optional[int] = None, apply_pixel_mask: bool = False,
                 decode_threads: int = 0, shared_grace: float = 1.0,
                 on_start: Optional[Callable[[Start], Any]] = None,
                 on_end: Optional[Callable[[End], Any]] = None,
                 on_close: Optional[Callable[[ScanReport], Any]] = None,
                 context: Any = None, security: Any = None,
                 source: Optional[str] = None) -> None:
        super().__init__(on_close)
        self._source = source
        self._deliver = deliver
        self.assembler = Assembler(self._masked, routing="any",
                                   partition_frames=partition_frames,
                                   memory_bytes=memory_bytes, max_scans=max_scans,
                                   idle_timeout=idle_timeout, on_close=self._closed)
        self.endpoint = endpoint
        self.channel, self.scan_shape = channel, scan_shape
        self.apply_pixel_mask = apply_pixel_mask
        self.shared_grace = shared_grace
        self.on_start, self.on_end = on_start, on_end
        self.held_bytes = memory_bytes // 4 if held_bytes is None else held_bytes
        self.shared_starts = shared_starts
        self.max_array_bytes = min(MAX_ARRAY_BYTES, memory_bytes) \
            if max_array_bytes is None else max_array_bytes
        self.held_now = 0      # bytes held: images, ends and deferred starts
        self._start_here = False
        self.starts: Dict[Key, Start] = {}
        self.starts_by_scan: Dict[str, Start] = {}
        self._scan: Dict[Key, str] = {}
        self._channel: Dict[Key, str] = {}
        self._mask: Dict[str, np.ndarray] = {}
        # start without image_dtype: (arrived, start), opened by its first image
        self._deferred: Dict[Key, Tuple[float, Start]] = {}
        self._pending: OrderedDict[int, Tuple[float, Image]] = OrderedDict()
        # key -> (arrived, grace, bytes)
        self._pending_ends: Dict[Key, Tuple[float, float, int]] = {}
        self._held = itertools.count()
        self._ending: Dict[str, Tuple[float, float]] = {}   # scan -> (grace, deadline)
        # a ZAP allow-list (the detector cannot do CURVE)
        self._pull_socket(context, rcvhwm, security, DOMAIN_STREAM2, server=False)
        self._connected = False
        self._pool: Any = None
        if decode_threads > 0:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(decode_threads, thread_name_prefix="v2-decode")

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

    def close(self) -> None:
        """Close the socket and stop the decode threads."""
        super().close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def waiting(self) -> bool:
        """True while the hold is full and a start another client shares may free it:
        the socket is not read (:meth:`step`), its messages stay queued."""
        return self.shared_starts and self.held_now >= self.held_bytes

    def step(self, timeout: float = 0.1, max_messages: int = 1000) -> int:
        if self.waiting():     # leave the socket alone: the detector deals to the others
            if timeout > 0:
                time.sleep(timeout)
            self.refusals()
            self._expire()
            return 0
        return super().step(timeout, max_messages)

    def _read(self, max_messages: int) -> int:
        zmq, sock = self._zmq, self._sock
        n = 0
        batch: List[Any] = []
        batch_bytes = 0
        self._start_here = False
        # a start received here ends the batch: the loop sends it on to the other
        # clients at once (a large one needs MPI progress), whose held images wait for it
        while n < max_messages and not self.waiting() and not self._start_here:
            try:
                parts = [sock.recv(zmq.NOBLOCK, copy=False)]
            except zmq.Again:
                break
            # Stream V2 messages are single-part (getsockopt: the attribute costs more)
            while sock.getsockopt(zmq.RCVMORE):
                parts.append(sock.recv(copy=False))
            n += 1
            if len(parts) != 1:
                self.assembler.reject(Reason.MALFORMED, f"Stream V2 message of {len(parts)} "
                                      "parts, expected 1")
                continue
            buf = parts[0].buffer
            if self._pool is None or self.held_now:
                if batch:          # in arrival order, and held bytes counted as they come
                    self._handle_batch(batch)
                    batch, batch_bytes = [], 0
                self.handle(buf)
                continue
            batch.append(self._decode(buf))
            batch_bytes += len(buf)
            if batch_bytes >= self.held_bytes:     # all of it might have to be held
                self._handle_batch(batch)
                batch, batch_bytes = [], 0
        if batch:
            self._handle_batch(batch)
        return n

    # ---- messages ----
    def handle(self, buf: Any) -> None:
        """Decode and apply one message (bytes); rejections are counted, never raised."""
        msg = self._decode(buf)
        if msg is not None:
            self._apply(msg)

    def _decode(self, buf: Any) -> Any:
        try:
            return decode_message(buf, self.max_array_bytes, self.held_bytes)
        except ProtocolError as e:
            self.assembler.reject(e.reason, e.detail)
        except Exception as e:    # a decoder's bug must not end the job: name it
            self.assembler.reject(Reason.MALFORMED, f"Stream V2 message does not decode "
                                  f"({type(e).__name__}: {e})")
        return None

    def _handle_batch(self, msgs: List[Any]) -> None:
        """Decode a batch's kept payloads on the threads, then apply the messages in
        arrival order (a payload that failed goes on encoded and is rejected as usual)."""
        assert self._pool is not None
        futures: Dict[int, Any] = {}
        for i, m in enumerate(msgs):
            if isinstance(m, Image):
                ch = m.data.get(self._channel.get(m.key, ""))
                if ch is not None and ch.encoding != "raw":
                    futures[i] = self._pool.submit(_predecode, ch)
        for i, m in enumerate(msgs):
            if m is None:
                continue
            f = futures.get(i)
            if f is not None:
                raw = f.result()
                if raw is not None:
                    c = self._channel[m.key]
                    ch = m.data[c]
                    m.data[c] = ChannelImage(ch.shape, ch.dtype, "raw", raw)
            self._apply(m)

    def _apply(self, msg: Any) -> None:
        if isinstance(msg, Image):
            self._image(msg)
        elif isinstance(msg, Start):
            self._start_here = True
            if self.on_start is not None:
                try:    # the MPI layer pickles it for the other clients
                    self.on_start(msg)
                except Exception as e:
                    self.assembler.reject(Reason.MALFORMED, f"start of series {msg.scan} "
                                          f"cannot be shared with the other receivers "
                                          f"({type(e).__name__}: {e})")
                    return
            self.apply_start(msg)
        else:
            if self.on_end is not None:
                self.on_end(msg)
            self.apply_end(msg)

    def apply_start(self, start: Start) -> None:
        """Open the series (a start received here or shared by another client)."""
        key, scan = start.key, start.scan
        if key in self.starts:
            self.assembler.reject(Reason.DUPLICATE, f"second start of series {scan}", scan)
            return
        if scan in self.starts_by_scan:     # unique ids that differ in replaced characters
            self.assembler.reject(Reason.CONFLICT, f"start of series {start.series_id} "
                                  f"{start.series_unique_id[:100]!r}: its scan name {scan} is "
                                  "that of another series of this job", scan)
            return
        self.starts[key] = start
        self.starts_by_scan[scan] = start
        self._scan[key] = scan
        chans = start.channels
        channel = self.channel or (chans[0] if chans else "threshold_1")
        if chans and channel not in chans:
            self.assembler.reject(Reason.CONFLICT, f"series {scan} has channels {list(chans)}, "
                                  f"not {channel!r}: choose one of them")
        self._channel[key] = channel
        if self.apply_pixel_mask:
            mask = start.arrays(channel).get("pixel_mask", {}).get(channel)
            if mask is not None and mask.shape == (start.image_size_y, start.image_size_x):
                self._mask[scan] = mask != 0
            # else: no mask to apply (SIMPLON header_detail basic/none); the scan's file
            # says so (/detector attribute pixel_mask_applied_by_receiver false)
        if start.image_dtype is None:
            cost = max(start.nbytes, 1)
            if self.held_now + cost > self.held_bytes:
                self._drop_start(start)
                self.assembler.reject(Reason.BUSY, f"start of series {scan} (no image_dtype: "
                                      f"held until its first image): no room among the "
                                      f"{self.held_bytes} bytes of held messages")
                return
            self._deferred[key] = (self.assembler.clock(), start)
            self.held_now += cost
        else:
            self._open(start, None)

    def _drop_start(self, start: Start) -> None:
        """Forget a start whose series does not open here (nothing of it is kept)."""
        self.starts.pop(start.key, None)
        self._scan.pop(start.key, None)
        self._channel.pop(start.key, None)
        if self.starts_by_scan.get(start.scan) is start:
            del self.starts_by_scan[start.scan]
            self._mask.pop(start.scan, None)

    def _open(self, start: Start, dtype: Optional[str]) -> None:
        try:
            g = start.geometry(self.scan_shape, dtype)
        except Exception as e:    # also e.g. a user_data scan_shape that is no pair of ints
            self._drop_start(start)
            if isinstance(e, ProtocolError):
                self.assembler.reject(e.reason, e.detail)
            else:
                self.assembler.reject(Reason.MALFORMED, f"start of series {start.scan}: no "
                                      f"scan geometry ({type(e).__name__}: {e})")
            return
        self.assembler.begin(Begin(0, g))
        if g.scan not in self.assembler.scans:     # busy or too large: rejected, named
            self._drop_start(start)
            return
        for k in [k for k, (_, im) in self._pending.items() if im.key == start.key]:
            self._image(self._unhold(k))
        held = self._pending_ends.pop(start.key, None)
        if held is not None:     # an end that came first: every image before it is in
            self.held_now -= held[2]
            self.apply_end(End(start.series_id, start.series_unique_id), grace=held[1])

    def apply_shared(self, kind: str, msg: Any) -> None:
        """A ``start`` or ``end`` another client received and shared."""
        if kind == "start":
            self.apply_start(msg)
        else:
            self.apply_end(msg, grace=self.shared_grace)

    def apply_end(self, end: End, grace: float = 0.0) -> None:
        """Close the series now (``grace`` 0: the end reached this client) or after
        ``grace`` s without its images (a shared end); held until its start is known."""
        key = end.key
        if key in self._deferred and grace == 0:
            self._undefer(key)      # the end reached this client: no image came here
            return
        if key not in self.starts or key in self._deferred:
            if key in self._pending_ends:
                self.assembler.reject(Reason.DUPLICATE, f"second end of series "
                                      f"{_name(end)}, held before its start")
                return
            cost = max(end.nbytes, 1)
            if self.held_now + cost > self.held_bytes:
                self.assembler.reject(Reason.BUSY, f"end of series {_name(end)} before its "
                                      f"start: no room among the {self.held_bytes} bytes of "
                                      "held messages")
                return
            self._pending_ends[key] = (self.assembler.clock(), grace, cost)
            self.held_now += cost
            return
        scan = self._scan[key]
        if grace > 0 and scan in self.assembler.scans:
            self._ending[scan] = (grace, self.assembler.clock() + grace)
            return
        self._ending.pop(scan, None)
        self.assembler.end(NativeEnd(scan, 0, None))

    def _image(self, im: Image) -> None:
        key = im.key
        if key in self._deferred and self._channel[key] in im.data:
            self._open(self._undefer(key), im.data[self._channel[key]].dtype)
        scan = self._scan.get(key)
        if scan is None or (scan not in self.assembler.scans and
                            scan not in self.assembler.closed):
            self._hold(im)
            return
        where = f"series {scan} image {im.image_id}"
        if scan in self.assembler.closed:
            self.assembler.reject(Reason.LATE, f"{where} arrived after the series closed here")
            return
        channel = self._channel.get(key, self.channel or "")
        ch = im.data.get(channel)
        if ch is None:
            self.assembler.reject(Reason.MALFORMED, f"{where} has no channel {channel!r} "
                                  f"(it has {sorted(im.data)})", scan)
            return
        st = self.assembler.scans[scan]
        if ch.shape != st.g.shape or ch.dtype != st.g.dtype:
            self.assembler.reject(Reason.CONFLICT, f"{where}: {ch.shape} {ch.dtype}, the "
                                  f"start said {st.g.shape} {st.g.dtype}", scan)
            return
        self.assembler.data(Data(scan, im.image_id, 0, 0, ch.shape[0], ch.encoding), ch.payload,
                            where=where)
        if scan in self._ending:
            grace = self._ending[scan][0]
            self._ending[scan] = (grace, self.assembler.clock() + grace)

    def forget(self, scan: str) -> None:
        """Drop a finalized series' start arrays and mask (its key stays: a late
        copy of its start is still a duplicate)."""
        start = self.starts_by_scan.pop(scan, None)
        self._mask.pop(scan, None)
        if start is not None:
            self.starts[start.key] = dataclasses.replace(start, fields={})

    def detector(self, scan: str) -> Optional[Dict[str, Any]]:
        """``scan``'s start, channel and mask use for its ``/detector`` group (or None)."""
        start = self.starts_by_scan.get(scan)
        if start is None:
            return None
        return {"start": start, "channel": self._channel.get(start.key),
                "pixel_mask_applied": self.masked(scan)}

    def masked(self, scan: str) -> bool:
        """True when this client zeroes the masked pixels of ``scan``'s frames."""
        return scan in self._mask

    def _masked(self, part: Partition) -> None:
        mask = self._mask.get(part.scan)
        if mask is not None:
            part.data[:, mask] = 0
        self._deliver(part)

    def _hold(self, im: Image) -> None:
        cost = max(im.nbytes, 1)
        if cost > self.held_bytes:
            self.assembler.reject(Reason.TOO_LARGE, f"series {_name(im)} image {im.image_id} "
                                  f"before its start: {cost} bytes, more than the "
                                  f"{self.held_bytes} bytes for held messages")
            return
        self._pending[next(self._held)] = (self.assembler.clock(), im)
        self.held_now += cost
        while self.held_now > self.held_bytes and self._pending and not self.shared_starts:
            old = self._unhold(next(iter(self._pending)))
            self.assembler.reject(Reason.UNKNOWN_SCAN, f"series {_name(old)} image "
                                  f"{old.image_id}: no start before {self.held_bytes} bytes "
                                  "of messages were held")

    def _unhold(self, k: int) -> Image:
        _, im = self._pending.pop(k)
        self.held_now -= max(im.nbytes, 1)
        return im

    def _undefer(self, key: Key) -> Start:
        _, start = self._deferred.pop(key)
        self.held_now -= max(start.nbytes, 1)
        return start

    def held(self) -> Dict[str, int]:
        """Series -> images (and ends received here) held because their start is unknown."""
        out = Counter(_name(im) for _, im in self._pending.values())
        out.update(_key_name(key) for key, (_, grace, _) in self._pending_ends.items()
                   if grace == 0 and key not in self.starts)
        return dict(out)

    def never_started(self) -> Dict[str, Dict[str, int]]:
        """Reject (the job ends) each image and end held for a start that never came;
        returns series -> counts."""
        return self._reject_held(lambda t: True, "its start never arrived", ending=True)

    def _reject_held(self, stale: Callable[[float], bool], why: str,
                     ending: bool = False) -> Dict[str, Dict[str, int]]:
        """Reject the held images and ends whose arrival time is ``stale``."""
        out: Dict[str, Dict[str, int]] = {}
        for k, (t, im) in list(self._pending.items()):
            if stale(t):
                self._unhold(k)
                out.setdefault(_name(im), {"images": 0, "ends": 0})["images"] += 1
                self.assembler.reject(Reason.UNKNOWN_SCAN,
                                      f"series {_name(im)} image {im.image_id}: {why}")
        for key, (t, grace, cost) in list(self._pending_ends.items()):
            if not stale(t):
                continue
            del self._pending_ends[key]
            self.held_now -= cost
            if key in self._deferred and not ending:
                self._drop_start(self._undefer(key))
                continue     # no image came here: not this client's
            if grace > 0:
                continue     # a shared copy: the client that received it reports it
            out.setdefault(_key_name(key), {"images": 0, "ends": 0})["ends"] += 1
            self.assembler.reject(Reason.UNKNOWN_SCAN, f"end of series {_key_name(key)}: {why}")
        return out

    def _expire(self) -> None:
        now, idle = self.assembler.clock(), self.assembler.idle_timeout
        self._reject_held(lambda t: now - t >= idle, f"no start within {idle:g} s")
        for key, (t, start) in list(self._deferred.items()):
            if now - t >= idle:
                self._drop_start(self._undefer(key))
                self.assembler.reject(Reason.MALFORMED, f"start of series {start.scan} has no "
                                      f"image_dtype, and no image of it came within {idle:g} s "
                                      "to tell it")
        for scan, (_, deadline) in list(self._ending.items()):
            if now >= deadline:
                del self._ending[scan]
                if scan in self.assembler.scans:
                    self.assembler.end(NativeEnd(scan, 0, None))
        self.assembler.expire()


Key = Tuple[str, int]


def _predecode(ch: ChannelImage) -> Optional[bytes]:
    """A decode thread: the payload decoded (checked against the shape), or None."""
    want = ch.shape[0] * ch.shape[1] * int(ch.dtype[-1])
    try:
        if decoded_size(ch.payload) != want:
            return None
        out = (lz4_decode(ch.payload) if ch.encoding == "lz4"
               else bslz4_decode(ch.payload, int(ch.dtype[-1])))
    except Exception:
        return None
    return out if len(out) == want else None


def _key_name(key: Key) -> str:
    return scan_name(key[1], key[0])


def _name(msg: Any) -> str:
    return _key_name(msg.key)
