"""A DECTRIS-like Stream V2 source for tests and rehearsals: binds a PUSH socket, as a
detector does, and sends series (start, images, end) of frames from any frame source
of :mod:`streams.simulate` (``python -m streams.simulate --stream2-bind ADDRESS``).
"""
from __future__ import annotations

import time
from typing import Any, Callable, FrozenSet, Optional, Sequence, Tuple, TypeVar

import numpy as np

from streams.protocols.stream2.streamv2 import encode_end, encode_image, encode_start

__all__ = ["PushSimulator", "StreamV2Simulator"]

_Sim = TypeVar("_Sim", bound="PushSimulator")


class PushSimulator:
    """A DECTRIS-like detector's data side binding a PUSH socket (the base of
    :class:`StreamV2Simulator` and the legacy stream's simulator).

    ``bind``: ``tcp://127.0.0.1:*`` picks a free port (DECTRIS: 31001 for Stream V2,
    9999 legacy); ``sndhwm`` default :attr:`SNDHWM`; ``send_timeout`` seconds a send
    may block before ``zmq.Again`` (default: for ever, as a detector).
    """

    SNDHWM = 100

    def __init__(self, bind: str = "tcp://127.0.0.1:*", sndhwm: Optional[int] = None,
                 send_timeout: Optional[float] = None, context: Any = None) -> None:
        import zmq

        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.SNDHWM, self.SNDHWM if sndhwm is None else sndhwm)
        if send_timeout is not None:
            self._sock.setsockopt(zmq.SNDTIMEO, int(send_timeout * 1000))
        self._sock.bind(bind)
        self.endpoint = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.sent = 0

    def close(self, linger: float = 30.0) -> None:
        self._sock.close(linger=int(linger * 1000))

    def __enter__(self: _Sim) -> _Sim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamV2Simulator(PushSimulator):
    """A DECTRIS-like Stream V2 source: binds a PUSH socket and sends series."""

    def send(self, message: bytes) -> None:
        """Send one raw message (also used to inject broken ones)."""
        self._sock.send(message, copy=False)
        self.sent += 1

    def send_parts(self, parts: Sequence[bytes]) -> None:
        """Send a multi-part ZeroMQ message (which Stream V2 never is: to test rejection)."""
        self._sock.send_multipart(list(parts))
        self.sent += 1

    def send_series(self, series_id: int, frames: Callable[[int], np.ndarray],
                    number_of_images: int, shape: Tuple[int, int],
                    image_dtype: str = "uint16", compression: Optional[str] = "bslz4",
                    channels: Sequence[str] = ("threshold_1",),
                    scan_shape: Optional[Tuple[int, int]] = None, rate: Optional[float] = None,
                    withhold: FrozenSet[int] = frozenset(), send_end: bool = True,
                    series_unique_id: Optional[str] = None, header_detail: str = "basic",
                    **start: Any) -> None:
        """Send start, the images, end; channel c of image i is ``frames(i) + c``.
        ``header_detail`` and ``start`` go to :func:`.streamv2.encode_start`."""
        uid = f"SIM{series_id:023d}" if series_unique_id is None else series_unique_id
        user = {"scan_shape": list(scan_shape)} if scan_shape else None
        self.send(encode_start(series_id, uid, number_of_images, shape, image_dtype,
                               tuple(channels), user_data=user, header_detail=header_detail,
                               **start))
        t0 = time.perf_counter()
        for i in range(number_of_images):
            if i in withhold:
                continue
            if rate:
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            img = frames(i)
            data = {c: (img + k).astype(img.dtype) for k, c in enumerate(channels)}
            self.send(encode_image(series_id, uid, i, data, compression))
        if send_end:
            self.send(encode_end(series_id, uid))
