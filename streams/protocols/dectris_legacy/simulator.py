"""A DECTRIS-like legacy-stream source and dump files, for tests and rehearsals.

:class:`LegacySimulator` binds a PUSH socket as a detector does and sends series
(header, images, end) of frames from any frame source of :mod:`streams.simulate`.
:func:`write_dump` writes the same messages as a *dump*: every part as an int64
little-endian length and its bytes, in order -- the file LiberTEM-live's simulator
(``libertem_dectris.DectrisSim``, ``libertem_live.detectors.dectris.sim``) replays.
``python -m streams.simulate --protocol dectris-legacy --bind ADDRESS | --dump FILE``.
"""
from __future__ import annotations

import argparse
import struct
import time
from typing import Any, BinaryIO, Callable, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from streams.protocols.dectris_legacy.legacy import (detector_config, encode_end,
                                                     encode_header, encode_image)
from streams.protocols.stream2.simulator import PushSimulator
from streams.protocols.frames import hdf5_source, synthetic_frame

__all__ = ["LegacySimulator", "series_messages", "write_dump", "main"]


def series_messages(series: int, frames: Callable[[int], np.ndarray], number_of_images: int,
                    shape: Tuple[int, int], encoding: str = "bslz4",
                    header_detail: str = "basic", trigger_mode: str = "exte",
                    withhold: FrozenSet[int] = frozenset(), send_end: bool = True,
                    config: Optional[dict] = None, **header: Any) -> Iterator[List[bytes]]:
    """The messages (each a list of parts) of one series: header, images, end.
    ``header`` (``pixel_mask``, ``flatfield``, ``countrate_table``, ``appendix``) goes
    to :func:`~streams.protocols.dectris_legacy.legacy.encode_header`."""
    first = frames(0)
    cfg = config or detector_config(number_of_images, shape, 8 * first.dtype.itemsize,
                                    trigger_mode)
    yield encode_header(series, cfg if header_detail != "none" else None, header_detail,
                        **header)
    for i in range(number_of_images):
        if i not in withhold:
            yield encode_image(series, i, first if i == 0 else frames(i), encoding)
    if send_end:
        yield encode_end(series)


class LegacySimulator(PushSimulator):
    """A DECTRIS-like legacy-stream source: binds a PUSH socket and sends series
    (arguments as :class:`~streams.protocols.stream2.simulator.PushSimulator`'s)."""

    SNDHWM = 1000

    def send(self, parts: Sequence[bytes]) -> None:
        """Send one message (also used to inject broken ones)."""
        self._sock.send_multipart(list(parts))
        self.sent += 1

    def send_series(self, series: int, frames: Callable[[int], np.ndarray],
                    number_of_images: int, shape: Tuple[int, int],
                    rate: Optional[float] = None, split_header: bool = False,
                    **kw: Any) -> None:
        """Send header, images, end (:func:`series_messages`); ``split_header``: the
        dheader and the configuration as two messages, as LiberTEM-live's simulator
        sends them."""
        t0 = time.perf_counter()
        for k, msg in enumerate(series_messages(series, frames, number_of_images, shape,
                                                **kw)):
            if k == 0 and split_header and len(msg) > 1:
                for p in msg:
                    self.send([p])
                continue
            if rate and k > 0:
                delay = t0 + (k - 1) / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            self.send(msg)


def write_dump(out: BinaryIO, messages: Iterator[List[bytes]]) -> int:
    """Write messages as a dump (each part: int64 LE length, bytes); returns parts written."""
    n = 0
    for msg in messages:
        for p in msg:
            out.write(struct.pack("<q", len(p)))
            out.write(p)
            n += 1
    return n


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m streams.simulate --protocol dectris-legacy``: a synthetic series over
    the legacy stream (``--bind``) or into a dump file (``--dump``)."""
    ap = argparse.ArgumentParser(prog="python -m streams.simulate --protocol dectris-legacy",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bind", help="bind this PUSH address (a DCU: tcp://*:9999)")
    ap.add_argument("--dump", help="write a dump file instead (LiberTEM-live replays it)")
    ap.add_argument("--series", type=int, default=1)
    ap.add_argument("--scan-shape", type=int, nargs=2, default=(16, 16), metavar=("NY", "NX"))
    ap.add_argument("--shape", type=int, nargs=2, default=(128, 128), metavar=("ROWS", "COLS"))
    ap.add_argument("--dtype", default="<u2", choices=("|u1", "<u2", "<u4"))
    ap.add_argument("--encoding", default="bslz4", choices=("raw", "lz4", "bslz4"))
    ap.add_argument("--header-detail", default="basic", choices=("all", "basic", "none"))
    ap.add_argument("--trigger-mode", default="exte", choices=("exte", "exts", "inte", "ints"))
    ap.add_argument("--rate", type=float, help="frames per second (default: as fast as taken)")
    ap.add_argument("--hdf5", metavar="FILE:DATASET", help="replay frames from this dataset")
    ap.add_argument("--wait", type=float, default=0.5,
                    help="seconds to let receivers connect before sending (--bind)")
    a = ap.parse_args(argv)
    ny, nx = a.scan_shape
    if a.hdf5:
        path, _, dset = a.hdf5.rpartition(":")
        gen = hdf5_source(path, dset)
    else:
        def gen(i: int) -> np.ndarray:
            return synthetic_frame(i, tuple(a.shape), (ny, nx), a.dtype)
    rows, cols = gen(0).shape
    shape = (int(rows), int(cols))
    kw = dict(encoding=a.encoding, header_detail=a.header_detail, trigger_mode=a.trigger_mode)
    if a.dump:
        with open(a.dump, "wb") as f:
            n = write_dump(f, series_messages(a.series, gen, ny * nx, shape, **kw))
        print(f"wrote {n} parts of series {a.series} to {a.dump}", flush=True)
        return 0
    if not a.bind:
        ap.error("give --bind ADDRESS or --dump FILE")
    with LegacySimulator(a.bind) as sim:
        print(f"DECTRIS legacy stream on {sim.endpoint}", flush=True)
        time.sleep(a.wait)
        sim.send_series(a.series, gen, ny * nx, shape, rate=a.rate, **kw)
        print(f"sent {sim.sent} messages", flush=True)
    return 0
