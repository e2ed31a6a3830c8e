"""A Merlin data-port client: a TCP connection to the detector, MPX messages into an Assembler.

The Merlin serves its data port (6342) to one client at a time, sending every
acquisition whole to it: one receiver of the job connects and receives (the others
stay idle; routing ``any``). Each ``HDR`` opens an acquisition (scan
``acquisition-<K>``, K counting the headers this receiver saw, with the job's time
in the name so that two jobs never collide); its frames count comes from ``Frames in
Acquisition``, its frame size and type from the first ``MQ1`` frame; the scan ends
with its last frame (Merlin sends no end), or by the idle timeout when frames are
missing. A message that breaks the framing cannot be skipped in a byte stream: it is
rejected (counted) and the connection is dropped and made again.

Frames in batches: every frame of an acquisition is a message of the same size whose
header repeats the first's but for its sequence number and time stamps. Once a frame was
taken one by one (every field parsed and checked, :func:`~streams.protocols.merlin.mpx.
parse_frame_header`), the whole messages waiting in the read buffer are compared with it
as one array (:class:`_Run`: the MPX prefix, hence the size, and every header field the
parse reads must be the same bytes; the sequence numbers decimal digits, consecutive);
those that are go to :meth:`~streams.assemble.Assembler.data_range`, their big-endian
pixels swapped straight from the read buffer into the partition, one copy per partition's
share. The first message that is not is taken one by one as before (checked, rejected and
counted by reason). Raw (``R64``) frames are always taken one by one. Issue 42's profile:
the per-frame Python (header parse, ``Assembler.data``, glue) was about 30 of 102 us of CPU
a frame, now about 15 of 85-91; see ``bench/README.md``. LiberTEM-live's
``libertem_qd_mpx`` (1.5x fewer CPU seconds a frame in the same run) is not used behind
the row: its connection owns the socket and decodes only its own shared-memory frame
stacks, so these checks, bounds and rejection counts could not be kept.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from streams.assemble import Assembler
from streams.errors import ProtocolError
from analyses.errors import GeometryError
from streams.protocol import Begin, Data, End, Reason, ScanGeometry, rejection
from streams.protocols.merlin.mpx import (PREFIX, decode_pixels, images_of, parse_frame_header,
                                          parse_hdr, parse_prefix)
from streams.scanshape import resolve_scan_shape
from streams.socketloop import TcpLoop

__all__ = ["MerlinReceiver"]

#: most frames an acquisition may announce (the accounting takes bytes per frame)
MAX_IMAGES = 1 << 28
_CHUNK = 4 << 20
#: MQ1 pixel type -> the decoder's encoding of its big-endian pixels (R64: unpacked here)
_SWAPPED = {"U01": "raw", "U08": "raw", "U16": "raw>u2", "U32": "raw>u4"}
#: most messages compared at once (bounds the work a message that does not match costs)
_BATCH = 256
#: MQ1 pixel type -> its pixels' type on the wire (a batch's pixels, swapped as copied)
_WIRE = {"U01": "|u1", "U08": "|u1", "U16": ">u2", "U32": ">u4"}


class MerlinReceiver(TcpLoop):
    """Receive a Merlin's data port into partitions.

    Parameters
    ----------
    deliver : callable(Partition)
    host, port : str, int
        The detector's data port; ``port`` None: this receiver stays idle.
    scan_shape : sequence of int, optional
        One side may be ``-1``; default: ``ScanY x ScanX`` of the header, else
        ``(frames / per trigger, per trigger)`` as LiberTEM reads it.
    partition_frames, memory_bytes, idle_timeout, on_close
        As for the other receivers.
    on_share : callable(kind, msg), optional
        Called with ``("start", geometry)`` and ``("end", scan)`` of each acquisition
        (the job shares them: the idle receivers open and close it too, as Stream V2's
        clients do, instead of waiting for the idle timeout).
    """

    def __init__(self, deliver: Callable, host: str, port: Optional[int], *,
                 scan_shape: Optional[Sequence[int]] = None,
                 partition_frames: Any = 1, memory_bytes: int = 256 << 20,
                 idle_timeout: float = 30.0,
                 on_close: Optional[Callable[[Any], Any]] = None,
                 on_share: Optional[Callable[[str, Any], Any]] = None) -> None:
        super().__init__(on_close)
        self.assembler = Assembler(deliver, routing="any", partition_frames=partition_frames,
                                   memory_bytes=memory_bytes, idle_timeout=idle_timeout,
                                   on_close=self._closed)
        self.host, self.port, self.shape_wanted = host, port, scan_shape
        self._tcp: Optional[socket.socket] = None
        # The bytes received: messages are read from _buf[_lo:_hi]; the socket writes
        # straight into it (recv_into), the partial message left at the end of a read is
        # moved to the front only when the buffer is full.
        self._buf = bytearray(_CHUNK)
        self._lo = self._hi = 0
        self._count = 0
        self._tag = time.strftime("%Y%m%d-%H%M%S")
        self._acq: Optional[Dict[str, Any]] = None     # the open acquisition
        self.headers: Dict[str, Dict[str, str]] = {}   # scan -> its HDR
        self.connections = 0
        self.on_share = on_share

    # ---- the connection ----
    def _reset(self) -> None:
        self._lo = self._hi = 0

    def _room(self) -> None:
        """Make room at the end of the buffer: move the partial message to the front, or
        (a message longer than the buffer, its size already bounded) double it."""
        buf, lo, hi = self._buf, self._lo, self._hi
        if lo:
            buf[:hi - lo] = buf[lo:hi]
            self._lo, self._hi = 0, hi - lo
        else:    # at most what the largest message allowed needs (checked at its prefix)
            cap = PREFIX + 2 * self.assembler.memory_bytes
            buf.extend(bytes(max(min(len(buf), cap - len(buf)), 1 << 16)))

    def _read(self, max_messages: int) -> int:
        assert self._tcp is not None
        if self._hi == len(self._buf):
            self._room()
        try:
            with memoryview(self._buf) as mv:
                got = self._tcp.recv_into(mv[self._hi:])
        except BlockingIOError:
            return 0
        except OSError:
            got = 0
        if not got:              # the detector closed the connection
            if self._hi > self._lo:   # in the middle of a message: what came of it is refused
                self.assembler.reject(Reason.PAYLOAD_SIZE, _cut_short(
                    bytes(self._buf[self._lo:self._lo + PREFIX]), self._hi - self._lo))
            self._drop()
            return 0
        self._hi += got
        n = 0
        with memoryview(self._buf) as mv:
            while self._hi - self._lo >= PREFIX:
                lo = self._lo
                try:
                    size = parse_prefix(bytes(mv[lo:lo + PREFIX]))
                    if size > 2 * self.assembler.memory_bytes:
                        raise ProtocolError(Reason.TOO_LARGE, f"MPX message of {size} bytes, "
                                            "more than this receiver's memory bound allows")
                except ProtocolError as e:
                    self.assembler.reject(e.reason, e.detail + " (connection dropped)")
                    mv.release()
                    self._drop()
                    return n
                if self._hi - lo < PREFIX + size:
                    break
                if self._acq is not None and self._acq["run"] is not None:
                    taken = self._batch(lo)
                    if taken:
                        self._lo = lo + taken * self._acq["run"].size
                        n += taken
                        continue
                payload = mv[lo + PREFIX:lo + PREFIX + size]
                try:
                    self.handle(payload)
                finally:
                    payload.release()
                self._lo = lo + PREFIX + size
                n += 1
        if self._lo == self._hi:
            self._lo = self._hi = 0
        return n

    def _batch(self, lo: int) -> int:
        """The frames at ``_buf[lo:]`` that repeat the acquisition's :class:`_Run`, taken
        as one batch; returns how many (0: the next message is taken one by one)."""
        acq = self._acq
        run = acq["run"] if acq is not None else None
        k = min((self._hi - lo) // run.size, _BATCH) if run is not None else 0
        if not k:
            return 0
        assert acq is not None and run is not None
        a = np.frombuffer(self._buf, np.uint8, k * run.size, lo).reshape(k, run.size)
        head, s0, s1 = run.head, run.s0, run.s1
        ok = (a[:, :s0] == head[:s0]).all(1)
        ok &= (a[:, s1:run.fixed] == head[s1:run.fixed]).all(1)
        ok &= (a[:, run.last:run.pixels] == head[run.last:run.pixels]).all(1)
        digits = a[:, s0:s1] - 48               # uint8: any other byte wraps above 9
        ok &= (digits <= 9).all(1)
        seq = digits @ run.tens
        ok &= seq == seq[0] + np.arange(k)
        m = k if ok.all() else int(ok.argmin())
        if not m:
            return 0
        first, scan = int(seq[0]) - acq["base"], acq["scan"]
        pixels = a[:m, run.pixels:].view(run.wire)     # big-endian, one frame a row

        def decode(i: int, rows: np.ndarray) -> None:   # swapped as copied
            np.copyto(rows.reshape(len(rows), -1), pixels[i:i + len(rows)])

        taken = self.assembler.data_range(scan, first, m, decode)
        if taken and first + taken == acq["frames"] and scan in self.assembler.scans:
            self.assembler.end(End(scan, 0, None))      # its last frame
            if self.on_share is not None:
                self.on_share("end", scan)
        return taken

    # ---- messages ----
    def handle(self, payload: Any) -> None:
        """One MPX payload (``HDR`` or ``MQ1``); rejections are counted, never raised."""
        try:
            head = bytes(payload[:4])
            if head == b"HDR,":
                self._header(parse_hdr(payload))
            elif head == b"MQ1,":
                self._frame(payload)
            else:
                raise ProtocolError(Reason.MALFORMED, f"MPX payload {head!r} is not HDR or MQ1")
        except ProtocolError as e:
            scan = self._acq["scan"] if self._acq else None
            self.assembler.reject(e.reason, e.detail,
                                  scan if scan in self.assembler.scans else None)

    def _header(self, hdr: Dict[str, str]) -> None:
        frames = images_of(hdr)
        if frames == 0:
            raise ProtocolError(Reason.MALFORMED, "HDR: 0 frames in acquisition (continuous "
                                "mode) is not supported: acquire a fixed number of frames")
        if frames > MAX_IMAGES:
            raise ProtocolError(Reason.OUT_OF_RANGE, f"HDR: {frames} frames in acquisition, "
                                f"more than {MAX_IMAGES}")
        if self._acq is not None and self._acq["scan"] in self.assembler.scans:
            self.assembler.end(End(self._acq["scan"], 0, None))   # a new one began
        self._count += 1
        scan = f"acquisition-{self._tag}-{self._count}"
        self._acq = {"scan": scan, "frames": frames, "hdr": hdr, "base": None, "run": None}
        self.headers[scan] = hdr

    def _shape(self, hdr: Dict[str, str], frames: int) -> Tuple[int, int]:
        want = self.shape_wanted
        if want is None and "ScanX" in hdr and "ScanY" in hdr:
            want = (int(hdr["ScanY"]), int(hdr["ScanX"]))
        if want is None:
            per = int(hdr.get("Frames per Trigger (Number)", frames) or frames)
            want = (-1, per) if per > 0 and frames % per == 0 else (1, frames)
        shape = resolve_scan_shape(want, frames)
        return (int(np.prod(shape[:-1])), int(shape[-1]))

    def _frame(self, payload: Any) -> None:
        acq = self._acq
        if acq is None:
            raise ProtocolError(Reason.UNKNOWN_SCAN, "MQ1 frame before any HDR")
        h = parse_frame_header(payload)
        scan = acq["scan"]
        if acq["base"] is None:    # the first frame: the scan's frame size and type
            acq["base"] = 1 if h.sequence <= acq["frames"] else h.sequence
            try:
                shape = self._shape(acq["hdr"], acq["frames"])
            except ValueError as e:
                raise ProtocolError(Reason.SCAN_SHAPE, f"acquisition {scan}: {e}") from None
            try:
                g = ScanGeometry(scan, 1, acq["frames"], 1, h.shape, h.dtype, shape)
            except GeometryError as e:
                raise rejection(e) from None
            self.assembler.begin(Begin(0, g))
            if self.on_share is not None:
                self.on_share("start", g)
        frame = h.sequence - acq["base"]
        data = payload[h.header_bytes:]
        if len(data) != h.data_bytes:
            raise ProtocolError(Reason.PAYLOAD_SIZE, f"MQ1 frame {h.sequence}: {len(data)} "
                                f"bytes of pixels, its header says {h.data_bytes}")
        encoding = _SWAPPED.get(h.kind)
        if encoding is None:       # raw (R64) bit-packed pixels: unpacked here
            data, encoding = decode_pixels(h, data).reshape(-1).view(np.uint8), "raw"
        st = self.assembler.scans.get(scan)
        if st is not None and (st.g.shape != h.shape or st.g.dtype != h.dtype):
            raise ProtocolError(Reason.CONFLICT, f"MQ1 frame {h.sequence}: {h.shape} {h.dtype}, "
                                f"the acquisition began with {st.g.shape} {st.g.dtype}")
        where = f"{scan} frame {h.sequence}"
        # the big-endian pixels go straight from the socket's buffer into the partition,
        # swapped as they are copied (streams.codecs.decode_into)
        self.assembler.data(Data(scan, frame, 0, 0, h.shape[0], encoding), data, where=where)
        # the frames that follow are compared with this one (_batch); raw ones unpacked here
        acq["run"] = _Run.of(bytes(payload[:h.header_bytes]), len(payload), h) \
            if h.kind != "R64" else None
        if frame == acq["frames"] - 1 and scan in self.assembler.scans:
            self.assembler.end(End(scan, 0, None))      # Merlin sends no end: its last frame
            if self.on_share is not None:
                self.on_share("end", scan)

    def apply_shared(self, kind: str, msg: Any) -> None:
        """An acquisition's start (its geometry) or end from the receiving receiver."""
        if kind == "start":
            self.assembler.begin(Begin(0, msg))
        elif msg in self.assembler.scans:
            self.assembler.end(End(msg, 0, None))

    def detector(self, scan: str) -> Optional[Dict[str, Any]]:
        """The acquisition's HDR (for the scan's ``/detector``)."""
        hdr = self.headers.get(scan)
        return None if hdr is None else {"hdr": hdr}

    def forget(self, scan: str) -> None:
        self.headers.pop(scan, None)


class _Run:
    """An MQ1 frame's message as the next frames of its acquisition must repeat it to be
    taken as a batch (:meth:`MerlinReceiver._batch`): ``head`` its prefix and header bytes;
    equal in ``[0, s0)`` (the MPX prefix, so the size, and ``MQ1,``), ``[s1, fixed)`` (header
    size, chips, width, height, pixel type, layout) and ``[last, pixels)`` (the counter
    depth, the last field, and the padding); ``[s0, s1)`` the sequence number's digits.
    What lies between (time stamps, thresholds, DACs) is read by no check. So a message
    that matches parses to the same frame header but for its sequence number."""

    __slots__ = ("head", "size", "s0", "s1", "fixed", "last", "pixels", "tens", "wire")
    head: np.ndarray
    tens: np.ndarray
    wire: np.dtype
    size: int
    s0: int
    s1: int
    fixed: int
    last: int
    pixels: int

    @classmethod
    def of(cls, header: bytes, payload: int, h: Any) -> Optional[_Run]:
        """The run of a frame taken one by one (None: its header has no such form)."""
        pieces = header.split(b",")
        seq = pieces[1] if len(pieces) > 9 else b""
        if not (seq.isdigit() and len(seq) <= 12):     # int64, ASCII digits only
            return None
        ends = np.cumsum([len(p) + 1 for p in pieces])        # offset after each comma
        fixed = int(ends[7])
        live = [i for i, p in enumerate(pieces) if b"\0" not in p]
        if b"\0" in header[:fixed] or not live or live[-1] < 8:
            return None
        r = cls()
        r.head = np.frombuffer(b"MPX,%010d," % (payload + 1) + header, np.uint8)
        r.size, r.pixels = PREFIX + payload, PREFIX + h.header_bytes
        r.s0, r.s1 = PREFIX + 4, PREFIX + 4 + len(seq)
        r.fixed, r.last = PREFIX + fixed, PREFIX + int(ends[live[-1] - 1]) - 1
        r.tens = 10 ** np.arange(len(seq) - 1, -1, -1, dtype=np.int64)
        r.wire = np.dtype(_WIRE[h.kind])
        return r


def _cut_short(prefix: bytes, got: int) -> str:
    """What to say of the ``got`` bytes of a message left when the connection closed."""
    try:
        size = parse_prefix(prefix) if len(prefix) == PREFIX else None
    except ProtocolError:
        size = None
    said = f"{size + PREFIX} announced" if size is not None else "no whole MPX prefix"
    return f"MPX message cut short by the connection's end: {got} bytes, {said}"
