"""A Merlin-like data port, and MIB files, for tests and rehearsals.

``--bind HOST:PORT`` listens as a Merlin's data port (6342) does, takes one client (the
job's connecting receiver) and sends it ``--acquisitions`` acquisitions: an ``HDR``
(with ``ScanY``/``ScanX``, so the job knows the scan's shape) and its ``MQ1`` frames, as
MPX messages (:mod:`~streams.protocols.merlin.mpx`); then it closes the connection and
exits. ``--mib PREFIX`` writes ``PREFIX.mib`` and ``PREFIX.hdr`` instead, the files
LiberTEM-live's own simulator replays (``python -m libertem_live.detectors.merlin.sim
PREFIX.hdr``) and LiberTEM reads. Frames come from any source of :mod:`streams.simulate`
(synthetic 4D-STEM, or ``--hdf5 FILE:DATASET``).

``python -m streams.simulate --protocol merlin --bind 127.0.0.1:6342 | --mib PREFIX``.
"""
from __future__ import annotations

import argparse
import socket
import time
from typing import Callable, Iterator, Optional, Sequence, Tuple

import numpy as np

from streams.protocols.merlin.mpx import encode_frame, encode_hdr, encode_message
from streams.protocols.frames import hdf5_source, synthetic_frame

__all__ = ["acquisition", "write_mib", "serve", "main"]

#: the pixel type of each counter depth (non-raw): what the frames are clipped to
_MAX = {1: 1, 6: 63, 12: 4095, 24: (1 << 24) - 1}


def acquisition(frames: Callable[[int], np.ndarray], scan_shape: Tuple[int, int],
                depth: int = 12, raw: bool = False) -> Iterator[bytes]:
    """One acquisition's MPX payloads: its ``HDR``, then every frame's ``MQ1``."""
    ny, nx = scan_shape
    yield encode_hdr(ny * nx, nx, depth, ScanY=ny, ScanX=nx)
    for i in range(ny * nx):
        yield encode_frame(i + 1, np.clip(frames(i), 0, _MAX[depth]), depth, raw)


def write_mib(prefix: str, frames: Callable[[int], np.ndarray], scan_shape: Tuple[int, int],
              depth: int = 12, raw: bool = False) -> Tuple[str, str]:
    """``PREFIX.mib`` (the frames) and ``PREFIX.hdr`` (the header): the pair LiberTEM and
    LiberTEM-live's simulator read. Returns their paths."""
    parts = acquisition(frames, scan_shape, depth, raw)
    hdr, mib = prefix + ".hdr", prefix + ".mib"
    with open(hdr, "wb") as f:
        f.write(next(parts))
    with open(mib, "wb") as f:
        for frame in parts:
            f.write(frame)
    return hdr, mib


def serve(bind: str, frames: Callable[[int], np.ndarray], scan_shape: Tuple[int, int],
          depth: int = 12, raw: bool = False, acquisitions: int = 1,
          rate: Optional[float] = None, wait: float = 600.0,
          on_listen: Optional[Callable[[Tuple[str, int]], None]] = None) -> int:
    """Listen on ``bind`` (``HOST:PORT``; port 0: any), send ``acquisitions`` to the first
    client (``rate``: frames per second), close; returns the messages sent. Raises
    ``TimeoutError`` when no client comes in ``wait`` seconds."""
    host, _, port = bind.replace("tcp://", "").rpartition(":")
    with socket.create_server((host, int(port))) as srv:
        if on_listen is not None:
            on_listen(srv.getsockname()[:2])
        srv.settimeout(wait)
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            raise TimeoutError(f"no receiver connected to {bind} in {wait:g} s") from None
        sent = 0
        with conn:
            for _ in range(acquisitions):
                t0 = time.perf_counter()
                for k, payload in enumerate(acquisition(frames, scan_shape, depth, raw)):
                    if rate and k > 0:
                        delay = t0 + (k - 1) / rate - time.perf_counter()
                        if delay > 0:
                            time.sleep(delay)
                    conn.sendall(encode_message(payload))
                    sent += 1
    return sent


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m streams.simulate --protocol merlin``."""
    ap = argparse.ArgumentParser(prog="python -m streams.simulate --protocol merlin",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bind", metavar="HOST:PORT", help="serve this data port (a Merlin's: "
                    "6342) to one receiver")
    ap.add_argument("--mib", metavar="PREFIX", help="write PREFIX.mib and PREFIX.hdr instead "
                    "(LiberTEM-live's simulator replays them)")
    ap.add_argument("--acquisitions", type=int, default=1, metavar="N",
                    help="acquisitions to send in a row (--bind)")
    ap.add_argument("--scan-shape", type=int, nargs=2, default=(16, 16), metavar=("NY", "NX"))
    ap.add_argument("--shape", type=int, nargs=2, default=(256, 256), metavar=("ROWS", "COLS"))
    ap.add_argument("--depth", type=int, default=12, choices=(1, 6, 12, 24),
                    help="counter depth (default 12: U16 frames)")
    ap.add_argument("--raw", action="store_true", help="raw (R64) frames (depths 1, 6, 12)")
    ap.add_argument("--rate", type=float, help="frames per second (default: as fast as taken)")
    ap.add_argument("--hdf5", metavar="FILE:DATASET", help="replay frames from this dataset")
    ap.add_argument("--wait", type=float, default=600.0, metavar="S",
                    help="seconds to wait for the receiver to connect (--bind)")
    a = ap.parse_args(argv)
    ny, nx = a.scan_shape
    if a.hdf5:
        path, _, dset = a.hdf5.rpartition(":")
        gen = hdf5_source(path, dset)
    else:
        def gen(i: int) -> np.ndarray:
            return synthetic_frame(i, tuple(a.shape), (ny, nx), "<u4")
    if a.mib:
        hdr, mib = write_mib(a.mib, gen, (ny, nx), a.depth, a.raw)
        print(f"wrote {mib} ({ny * nx} frames) and {hdr}", flush=True)
        return 0
    if not a.bind:
        ap.error("give --bind HOST:PORT or --mib PREFIX")

    def listening(addr: Tuple[str, int]) -> None:
        print(f"Merlin data port on {addr[0]}:{addr[1]}", flush=True)

    try:
        sent = serve(a.bind, gen, (ny, nx), a.depth, a.raw, a.acquisitions, a.rate, a.wait,
                     on_listen=listening)
    except (OSError, TimeoutError) as e:
        print(f"python -m streams.simulate --protocol merlin: {e}", flush=True)
        return 1
    print(f"sent {sent} messages ({a.acquisitions} acquisition(s) of {ny * nx} frames)",
          flush=True)
    return 0
