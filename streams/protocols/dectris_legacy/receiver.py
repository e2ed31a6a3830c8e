"""A legacy-stream client: Stream V2's client, reading multipart legacy messages.

A DECTRIS detector binds one PUSH socket for the legacy stream too (port 9999) and
deals whole messages round-robin over its PULL clients, so everything
:class:`~streams.protocols.stream2.receiver.StreamV2Receiver` does (series started
and ended on every client through the job's sharing, images held until their start
is known, rejections counted and named) holds here unchanged; this class only reads
multipart messages and decodes them with :mod:`~streams.protocols.dectris_legacy.legacy`.

What differs:

- a dheader and its configuration may come as two messages (LiberTEM-live's
  simulator sends them so), which round-robin may deal to two clients: each piece
  is shared with the other clients as it comes, and every client pairs the pieces
  in the order the detector sends them (a dheader with the next configuration);
- the frame's size and type come from the first image's ``dimage_d`` (a ROI mode
  makes them smaller than the detector), never from the configuration alone;
- ``dconfig`` times (start, stop, real time of each frame) are kept per frame by
  the client that received the frame (:meth:`times`).
"""
from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import numpy as np

from streams.errors import ProtocolError
from streams.protocol import Data, Reason
from streams.protocols.dectris_legacy.legacy import (CHANNEL, MAX_FRAME_BYTES, MAX_PARTS,
                                                     Appendix, ConfigPart, HeaderPart,
                                                     decode_parts, first_part, image_fields,
                                                     start_from)
from streams.protocols.stream2.receiver import StreamV2Receiver
from streams.protocols.stream2.streamv2 import MAX_IMAGES, Image, Start
from streams.scanshape import resolve_scan_shape

__all__ = ["LegacyReceiver", "MAX_TIMES_BYTES"]

#: most memory a scan's per-frame ``dconfig`` times may take here (24 bytes a frame)
MAX_TIMES_BYTES = 64 << 20


class LegacyReceiver(StreamV2Receiver):
    """Receive DECTRIS's legacy stream into partitions.

    Parameters
    ----------
    on_piece : callable, optional
        Called with each :class:`HeaderPart` / :class:`ConfigPart` received here (the
        job shares them: ``loop.share("start", piece)``).
    scan_shape : sequence of int, optional
        The scan's shape, one side may be ``-1`` (resolved from the image count);
        default ``(1, images)``.
    images : int
        Images of a series whose header has no configuration (``header_detail
        none``); 0: such a series is refused, naming the option.
    check_hash : bool
        Check each blob's MD5 against its ``dimage-1.0`` hash.
    **kw
        As for :class:`~streams.protocols.stream2.receiver.StreamV2Receiver`.
    """

    def __init__(self, deliver: Callable, endpoint: str, *,
                 scan_shape: Optional[Sequence[int]] = None, images: int = 0,
                 check_hash: bool = False, on_piece: Optional[Callable[[Any], Any]] = None,
                 **kw: Any) -> None:
        super().__init__(deliver, endpoint, **kw)
        self.shape_wanted = tuple(scan_shape) if scan_shape else None
        self.images, self.check_hash, self.on_piece = images, check_hash, on_piece
        self._headers: Deque[HeaderPart] = deque()
        self._configs: Deque[ConfigPart] = deque()
        self._times: Dict[str, np.ndarray] = {}
        # a peer sending a larger part is disconnected before ZeroMQ allocates it
        self._sock.setsockopt(self._zmq.MAXMSGSIZE, MAX_FRAME_BYTES + 4096)

    def _read(self, max_messages: int) -> int:
        # Parts are received as bytes (copy=True): a zmq.Frame per part cost more than
        # copying a JSON part or a compressed blob (4 parts: 22 -> 7 us a message,
        # bench/README.md). Only an uncompressed blob (no "lz4" in its dimage_d) stays a
        # zero-copy frame: copying it would be a second pass over the frame.
        zmq, sock = self._zmq, self._sock
        recv, more, RCVMORE, NOBLOCK = sock.recv, sock.getsockopt, zmq.RCVMORE, zmq.NOBLOCK
        n = 0
        while n < max_messages:
            try:
                parts = [recv(NOBLOCK)]
            except zmq.Again:
                break
            extra = 0
            while more(RCVMORE):
                if len(parts) >= MAX_PARTS:
                    recv(copy=False)
                    extra += 1        # drained, not kept
                elif len(parts) == 2 and b"lz4" not in parts[1][:4096]:
                    parts.append(recv(copy=False).buffer)
                else:
                    parts.append(recv())
            n += 1
            if extra:
                self.assembler.reject(Reason.MALFORMED, f"a legacy message of "
                                      f"{len(parts) + extra} parts (at most {MAX_PARTS})")
                continue
            self.handle_parts(parts)
        return n

    def handle_parts(self, parts: Sequence[Any]) -> None:
        """Decode and apply one message (its parts); rejections are counted, never raised.

        An image of a series open here takes the fast path (:meth:`_open_image`): its
        parts are checked as every message's are, and its payload goes to the assembler
        without an :class:`Image` made of it; anything else (a header, an end, an image
        held before its series' start or opening a deferred one) the general path."""
        fields = None
        try:
            head = first_part(parts) if 0 < len(parts) <= MAX_PARTS else None
            scan = self._open_scan(head) if head is not None else None
            if scan is not None:
                fields = image_fields(parts, head, self.check_hash)   # type: ignore[arg-type]
            else:
                msg = decode_parts(parts, self.check_hash, head)
        except ProtocolError as e:
            self.assembler.reject(e.reason, e.detail)
            return
        except Exception as e:    # a decoder's bug must not end the job: name it
            self.assembler.reject(Reason.MALFORMED, f"legacy message does not decode "
                                  f"({type(e).__name__}: {e})")
            return
        if fields is not None:
            self._open_image(scan, *fields[1:])     # type: ignore[arg-type]
            return
        if isinstance(msg, (HeaderPart, ConfigPart)):
            if self.on_piece is not None:
                self.on_piece(msg)
            self.apply_piece(msg)
        elif isinstance(msg, Appendix):
            self.assembler.reject(Reason.MALFORMED, f"legacy stream: {msg.what} is not a "
                                  "dheader, image, configuration or series end")
        else:
            self._apply(msg)

    def _open_scan(self, head: Dict[str, Any]) -> Optional[str]:
        """The scan of an image message whose series is open here and takes no detour
        through :meth:`_image` (deferred, another channel); else None. No side effect."""
        if head.get("htype") != "dimage-1.0":
            return None
        key: Any = ("", head.get("series"))
        scan = self._scan.get(key)
        if scan is None or scan not in self.assembler.scans or key in self._deferred \
                or self._channel.get(key) != CHANNEL:
            return None
        return scan

    def _open_image(self, scan: str, frame: int, rows: int, cols: int, dtype: str,
                    encoding: str, payload: Any, times: Dict[str, Any]) -> None:
        """An image of a series open here, straight to the assembler: what
        :meth:`_image` does with it, without the :class:`Image`."""
        st = self.assembler.scans[scan]
        where = f"series {scan} image {frame}"
        if (rows, cols) != st.g.shape or dtype != st.g.dtype:
            self.assembler.reject(Reason.CONFLICT, f"{where}: {(rows, cols)} {dtype}, the "
                                  f"start said {st.g.shape} {st.g.dtype}", scan)
            return
        self.assembler.data(Data(scan, frame, 0, 0, rows, encoding), payload, where=where)
        if scan in self._ending:
            grace = self._ending[scan][0]
            self._ending[scan] = (grace, self.assembler.clock() + grace)
        self._keep_times(scan, frame, times)

    def apply_shared(self, kind: str, msg: Any) -> None:
        if isinstance(msg, (HeaderPart, ConfigPart)):
            self.apply_piece(msg)
        else:
            super().apply_shared(kind, msg)

    def apply_piece(self, piece: Any) -> None:
        """A dheader or configuration received alone (here or by another client):
        paired in order, a dheader with the next configuration."""
        if isinstance(piece, HeaderPart):
            if piece.header_detail == "none":
                self._start(piece, None)
                return
            self._headers.append(piece)
        else:
            self._configs.append(piece)
        while self._headers and self._configs:
            self._start(self._headers.popleft(), self._configs.popleft().config)
        while len(self._configs) > 4:     # configurations nobody announced
            self._configs.popleft()
            self.assembler.reject(Reason.MALFORMED, "a detector configuration without "
                                  "its dheader-1.0")

    def _start(self, head: HeaderPart, config: Optional[Dict[str, Any]]) -> None:
        try:
            start = start_from(head.series_id, head.header_detail, config, images=self.images)
        except ProtocolError as e:
            self.assembler.reject(e.reason, e.detail)
            return
        self.apply_start(start)

    def apply_start(self, start: Start) -> None:
        super().apply_start(start)
        if start.key in self._deferred:
            # the frame's type comes with its first image: one held already opens the
            # series (and :meth:`_open` applies every image held before a held end)
            for _, im in list(self._pending.values()):
                ch = im.data.get(self._channel[start.key]) if im.key == start.key else None
                if ch is not None:
                    self._open_deferred(start.key, ch)
                    break

    def _open_deferred(self, key: Any, ch: Any) -> None:
        """Open a deferred series with its first image's size and type (a ROI makes
        the frame smaller than the detector); a pixel mask of another size is dropped."""
        _, start = self._deferred.pop(key)
        rows, cols = ch.shape
        if (start.image_size_y, start.image_size_x) != (rows, cols):
            start = dataclasses.replace(start, image_size_x=cols, image_size_y=rows)
            self._mask.pop(start.scan, None)
        self._open(start, ch.dtype)

    def _open(self, start: Start, dtype: Optional[str]) -> None:
        if start.number_of_images > MAX_IMAGES:
            super()._open(start, dtype)          # refused there, out_of_range
            return
        try:
            shape = resolve_scan_shape(self.shape_wanted, start.number_of_images)
        except ValueError as e:
            self.assembler.reject(Reason.SCAN_SHAPE, f"series {start.series_id}: {e}")
            return
        if len(shape) != 2:
            shape = (int(np.prod(shape[:-1])), shape[-1])
        self.scan_shape = (int(shape[0]), int(shape[1]))
        super()._open(start, dtype)

    def _image(self, im: Image) -> None:
        key = im.key
        ch = im.data.get(self._channel.get(key, ""))
        if key in self._deferred and ch is not None:
            self._open_deferred(key, ch)
        super()._image(im)
        scan = self._scan.get(key)
        if scan is not None and im.fields:
            self._keep_times(scan, im.image_id, im.fields)

    def _keep_times(self, scan: str, frame: int, f: Dict[str, Any]) -> None:
        st = self.assembler.scans.get(scan)
        if st is not None and frame < st.g.frames:
            t = self._times.get(scan)
            if t is None and st.g.frames * 24 <= MAX_TIMES_BYTES:
                t = self._times[scan] = np.full((st.g.frames, 3), np.nan)
            if t is not None:
                t[frame] = (f["start_time"], f["stop_time"], f["real_time"])

    def times(self, scan: str) -> Optional[np.ndarray]:
        """``(frames, 3)``: start_time, stop_time, real_time of each image received
        here (NaN for the others); None when none came (or the scan has more frames
        than :data:`MAX_TIMES_BYTES` of times allow)."""
        return self._times.get(scan)

    def forget(self, scan: str) -> None:
        super().forget(scan)
        self._times.pop(scan, None)

    def held_pieces(self) -> List[Any]:
        """Pieces of headers not paired yet."""
        return list(self._headers) + list(self._configs)
