"""An ASI TPX3 data-socket client: a TCP connection to the detector, CSR chunks into an Assembler.

The detector software serves its data socket (8283 in LiberTEM-live) to one client:
one receiver of the job connects and receives every frame (routing ``any``; the
others open and close each scan as it is shared, like Merlin's). Each scan start
opens scan ``tpx3-<time>-<K>`` (K counting the scans this receiver saw) with the
nav and sig shapes of the acquisition start before it; array chunks fill its
frames in order; its scan end (or the next acquisition start, or the idle timeout)
closes it. Every size a header announces is checked before its payload is taken
(:func:`~streams.protocols.asi_tpx3.wire.chunk_layout`): a chunk too large or with
frames past the scan's end is skipped unread (its bytes discarded as they arrive,
framing kept, rejection counted); a chunk whose index pointers or pixel indices are
wrong is rejected after it arrived (its frames stay missing); a header that breaks
the framing drops the connection, which is then made again.

Partitions stay sparse (:mod:`~streams.protocols.asi_tpx3.partitions`: CSR, ``uint32``
values): an analysis that takes CSR frames gets them as they are, any other dense
frames (:func:`analyses.sparse.frames_for`, ``docs/stream-protocol.md`` section 13). A
checked chunk goes to the assembler in one call (:meth:`SparseAssembler.chunk`).
"""
from __future__ import annotations

import socket
import time
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

from analyses.errors import GeometryError
from streams.errors import ProtocolError
from streams.protocol import Begin, End, Reason, ScanGeometry, rejection
from streams.protocols.asi_tpx3 import wire
from streams.protocols.asi_tpx3.partitions import SparseAssembler
from streams.scanshape import resolve_scan_shape
from streams.socketloop import TcpLoop

__all__ = ["Tpx3Receiver", "FRAME_DTYPE"]

#: the type of the frames' values (counts of one scan position; a u64 value past it is
#: refused), and of their dense form
FRAME_DTYPE = np.dtype("<u4")
_RECV = 4 << 20


class Tpx3Receiver(TcpLoop):
    """Receive an ASI TPX3 data socket into partitions.

    Parameters
    ----------
    deliver : callable(Partition)
    host, port : str, int
        The detector's data socket; ``port`` None: this receiver stays idle.
    scan_shape : sequence of int, optional
        Checked against the acquisition start's nav shape (one side may be ``-1``; a
        shape of another frame count refuses the scan, ``conflict``).
    partition_frames, memory_bytes, idle_timeout, on_close, on_share
        As for :class:`~streams.protocols.merlin.receiver.MerlinReceiver`.
    max_chunk_bytes : int, optional
        Largest chunk payload taken (default a quarter of ``memory_bytes``, at least 1 MiB).
    """

    def __init__(self, deliver: Callable, host: str, port: Optional[int], *,
                 scan_shape: Optional[Sequence[int]] = None,
                 partition_frames: Any = 1, memory_bytes: int = 256 << 20,
                 idle_timeout: float = 30.0,
                 on_close: Optional[Callable[[Any], Any]] = None,
                 on_share: Optional[Callable[[str, Any], Any]] = None,
                 max_chunk_bytes: Optional[int] = None) -> None:
        super().__init__(on_close)
        self.assembler = SparseAssembler(deliver, routing="any", partition_frames=partition_frames,
                                   memory_bytes=memory_bytes, idle_timeout=idle_timeout,
                                   on_close=self._closed)
        self.host, self.port, self.shape_wanted = host, port, scan_shape
        self.max_chunk_bytes = max_chunk_bytes or max(1 << 20, memory_bytes // 4)
        self.on_share = on_share
        self._tcp: Optional[socket.socket] = None
        self._buf = bytearray()
        self._chunk: Optional[wire.ArrayChunk] = None   # header read, payload awaited
        self._skip = 0                                   # payload bytes to discard
        self._tag = time.strftime("%Y%m%d-%H%M%S")
        self._count = 0
        self._acq: Optional[wire.AcquisitionStart] = None
        self._scan: Optional[str] = None
        self._frame = 0           # the next frame of the open scan
        self.headers: Dict[str, wire.AcquisitionStart] = {}
        self.connections = 0
        self.events = 0           # accepted events (pixels with counts)

    # ---- the connection ----
    def _reset(self) -> None:
        self._buf, self._chunk, self._skip = bytearray(), None, 0

    def _read(self, max_messages: int) -> int:
        assert self._tcp is not None
        try:
            got = self._tcp.recv(_RECV)
        except BlockingIOError:
            return 0
        except OSError:
            got = b""
        if not got:              # the detector closed the connection
            if self._buf or self._chunk is not None or self._skip:
                self._reject(Reason.PAYLOAD_SIZE, self._cut_short())
            self._drop()
            return 0
        if self._skip:
            take = min(self._skip, len(got))
            self._skip -= take
            got = got[take:]
        self._buf += got
        return self._parse()

    def _parse(self) -> int:
        """Handle every whole message in the buffer; keep the rest."""
        buf, at, n = self._buf, 0, 0
        view = memoryview(buf)
        try:
            while self._tcp is not None:
                if self._chunk is not None:
                    size = self._chunk.payload_bytes
                    if len(buf) - at < size:
                        break
                    chunk, self._chunk = self._chunk, None
                    self._payload(chunk, view[at:at + size])
                    at += size
                    n += 1
                    continue
                if len(buf) - at < wire.HEADER:
                    break
                head = bytes(view[at:at + wire.HEADER])
                at += wire.HEADER
                try:
                    self._header(wire.parse_header(head))
                except ProtocolError as e:
                    self._reject(e.reason, e.detail + " (connection dropped)")
                    view.release()
                    self._drop()
                    return n
                n += 1
                if self._skip:       # a chunk refused unread: its payload is discarded
                    take = min(self._skip, len(buf) - at)
                    self._skip -= take
                    at += take
        finally:
            if self._tcp is not None:
                view.release()
                del buf[:at]
        return n

    def _reject(self, reason: str, detail: str) -> None:
        scan = self._scan if self._scan in self.assembler.scans else None
        self.assembler.reject(reason, detail, scan)

    def _cut_short(self) -> str:
        if self._chunk is not None:
            return (f"TPX3 chunk cut short by the connection's end: {len(self._buf)} of its "
                    f"{self._chunk.payload_bytes} payload bytes")
        if self._skip:
            return f"TPX3 refused chunk cut short: {self._skip} bytes never came"
        return f"TPX3 header cut short by the connection's end: {len(self._buf)} of 32 bytes"

    # ---- messages ----
    def _header(self, m: wire.Message) -> None:
        if isinstance(m, wire.ArrayChunk):
            self._array_chunk(m)
        elif isinstance(m, wire.AcquisitionStart):
            self._end_scan()       # a new acquisition: the open scan (if any) is over
            self._acq = m
        elif isinstance(m, wire.ScanStart):
            self._scan_start(m)
        elif isinstance(m, wire.ScanEnd):
            if self._scan is None:
                self._reject(Reason.UNKNOWN_SCAN, f"TPX3 scan end {m.sequence} with no "
                             "scan open")
            self._end_scan()
        else:
            self._end_scan()
            self._acq = None

    def _scan_start(self, m: wire.ScanStart) -> None:
        self._end_scan()
        acq = self._acq
        if acq is None:
            self._reject(Reason.UNKNOWN_SCAN, f"TPX3 scan start {m.sequence} before any "
                         "acquisition start")
            return
        self._count += 1
        scan = f"tpx3-{self._tag}-{self._count}"
        frames = acq.nav_shape[0] * acq.nav_shape[1]
        self._scan, self._frame = scan, 0
        try:
            shape = resolve_scan_shape(self.shape_wanted or acq.nav_shape, frames)
            shape = (int(np.prod(shape[:-1])), int(shape[-1]))
        except ValueError as e:
            self._scan = None
            self._reject(Reason.CONFLICT, f"TPX3 scan {scan}: the acquisition's nav shape is "
                         f"{acq.nav_shape[0]}x{acq.nav_shape[1]}; --tpx3-scan-shape: {e}")
            return
        try:
            g = ScanGeometry(scan, 1, frames, 1, acq.sig_shape, FRAME_DTYPE.str, shape)
        except GeometryError as e:
            self._scan = None
            err = rejection(e)
            self._reject(err.reason, err.detail)
            return
        self.assembler.begin(Begin(0, g))
        if scan in self.assembler.scans:      # not refused (busy, too large): kept
            self.headers[scan] = acq
            if self.on_share is not None:
                self.on_share("start", g)

    def _end_scan(self) -> None:
        scan, self._scan = self._scan, None
        if scan is not None and scan in self.assembler.scans:
            self.assembler.end(End(scan, 0, None))
            if self.on_share is not None:
                self.on_share("end", scan)

    def _array_chunk(self, c: wire.ArrayChunk) -> None:
        """A chunk's header: checked before its payload is taken or skipped."""
        if self._scan is None or self._acq is None or self._scan not in self.assembler.scans:
            self._skip = c.payload_bytes       # framing kept; what it held is refused
            self._reject(Reason.UNKNOWN_SCAN, f"TPX3 chunk of {c.frames} frames outside an "
                         "open scan (no scan start, or its scan was refused)")
            return
        g = self.assembler.scans[self._scan].g
        try:
            wire.chunk_layout(c, self._acq, g.frames - self._frame, self.max_chunk_bytes)
        except ProtocolError as e:
            if e.reason == Reason.MALFORMED:
                raise                           # offsets that lie: the framing is suspect
            self._skip = c.payload_bytes
            if e.reason == Reason.TOO_LARGE:    # its frames are lost, the next ones in place
                self._frame += c.frames
            self.assembler.reject(e.reason, f"{self._scan} frame {self._frame}: {e.detail}",
                                  self._scan, received=True)
            return
        self._chunk = c

    def _payload(self, c: wire.ArrayChunk, payload: memoryview) -> None:
        scan, acq, f0 = self._scan, self._acq, self._frame
        assert scan is not None and acq is not None
        self._frame += c.frames
        if scan not in self.assembler.scans:
            self._reject(Reason.LATE, f"TPX3 chunk for {scan}, closed meanwhile")
            return
        rows, cols = acq.sig_shape
        try:
            indptr, indices, values = wire.check_csr(c, acq, payload)
            if c.value_dtype.itemsize > FRAME_DTYPE.itemsize and c.events and \
                    int(values.max()) > np.iinfo(FRAME_DTYPE).max:
                raise ProtocolError(Reason.OUT_OF_RANGE, f"TPX3 chunk value "
                                    f"{int(values.max())} past the frames' uint32")
            most = int(np.diff(indptr).max())
            if most > rows * cols:    # bounds a sparse partition by twice its dense size
                raise ProtocolError(Reason.OUT_OF_RANGE, f"TPX3 frame of {most} events, "
                                    f"more than its {rows * cols} pixels")
        except ProtocolError as e:
            self.assembler.reject(e.reason, f"{scan} frames {f0}..{f0 + c.frames - 1}: "
                                  f"{e.detail}", scan, received=True)
            return
        self.events += c.events
        # one type for every chunk: what the scan's geometry says (the store copies)
        indices = indices.astype(np.uint32, copy=False)
        values = values.astype(FRAME_DTYPE, copy=False)
        # the whole chunk in one call (per frame, Python was 100 us a frame: bench/README.md)
        self.assembler.chunk(scan, f0, indptr, indices, values, where=scan)

    def apply_shared(self, kind: str, msg: Any) -> None:
        """A scan's start (its geometry) or end from the receiving receiver."""
        if kind == "start":
            self.assembler.begin(Begin(0, msg))
        elif msg in self.assembler.scans:
            self.assembler.end(End(msg, 0, None))

    def detector(self, scan: str) -> Optional[Dict[str, Any]]:
        """The acquisition start of ``scan`` (for the scan's ``/detector``)."""
        acq = self.headers.get(scan)
        return None if acq is None else {"acquisition": acq}

    def forget(self, scan: str) -> None:
        self.headers.pop(scan, None)
