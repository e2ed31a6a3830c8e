"""An ASI TPX3-like data socket and stream files, for tests and rehearsals.

:class:`Tpx3Simulator` listens on TCP as the detector software does and sends what
it is given to the client that connects (one at a time); :meth:`Tpx3Simulator.cut`
ends the connection (a stream cut mid-message, when sent a part of one).
:func:`sparse_scan` makes a synthetic scan as CSR: electron hits in a bright-field
disk that shifts with the scan position, and a sparse background.
``python -m streams.simulate --protocol asi-tpx3 --bind HOST:PORT | --dump FILE``
serves it or writes it to a file, which LiberTEM-live's ``TpxCameraSim(paths=[FILE])``
replays (the same bytes: :mod:`~streams.protocols.asi_tpx3.wire`).
"""
from __future__ import annotations

import argparse
import queue
import socket
import threading
import time
from typing import Optional, Sequence, Tuple

import numpy as np

from streams.protocols.asi_tpx3.wire import encode_scan

__all__ = ["Tpx3Simulator", "sparse_scan", "main"]


def sparse_scan(nav_shape: Tuple[int, int], sig_shape: Tuple[int, int] = (512, 512),
                events: float = 200.0, seed: int = 0
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A synthetic scan as CSR ``(indptr, indices, values)`` (uint32; canonical: each
    frame's pixel indices increasing, values the hits per pixel), about ``events`` hits
    per frame, two thirds of them in a disk whose centre shifts with the position."""
    ny, nx = nav_shape
    rows, cols = sig_shape
    indptr, indices, values = [0], [], []
    for i in range(ny * nx):
        y, x = divmod(i, nx)
        rng = np.random.default_rng([seed, i])
        k = int(rng.poisson(events))
        cy = rows / 2 + rows / 16 * np.sin(2 * np.pi * y / max(ny, 1))
        cx = cols / 2 + cols / 16 * np.cos(2 * np.pi * x / max(nx, 1))
        r = min(rows, cols) / 8 * np.sqrt(rng.random(2 * k // 3))
        t = 2 * np.pi * rng.random(2 * k // 3)
        yy = np.concatenate([cy + r * np.sin(t), rng.random(k - 2 * k // 3) * rows])
        xx = np.concatenate([cx + r * np.cos(t), rng.random(k - 2 * k // 3) * cols])
        flat = (np.clip(yy.astype(np.int64), 0, rows - 1) * cols
                + np.clip(xx.astype(np.int64), 0, cols - 1))
        pix, hits = np.unique(flat, return_counts=True)
        indices.append(pix)
        values.append(hits)
        indptr.append(indptr[-1] + len(pix))
    return (np.asarray(indptr, np.uint32), np.concatenate([*indices, []]).astype(np.uint32),
            np.concatenate([*values, []]).astype(np.uint32))


class Tpx3Simulator:
    """A TCP server sending what it is given to one client at a time.

    Parameters
    ----------
    host, port : str, int
        Where to listen (port 0: any free one; see :attr:`port`).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._srv = socket.create_server((host, port))
        self._srv.settimeout(0.2)
        self.host, self.port = host, self._srv.getsockname()[1]
        self._q: queue.Queue[Optional[bytes]] = queue.Queue()
        self._stop = threading.Event()
        self.sent = 0
        self.connections = 0
        self._t = threading.Thread(target=self._run, name="tpx3-sim", daemon=True)
        self._t.start()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def send(self, data: bytes) -> None:
        """Queue bytes for the client (sent once one is connected)."""
        self._q.put(bytes(data))

    def cut(self) -> None:
        """End the current connection once what was queued before is sent."""
        self._q.put(None)

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until everything queued has been sent."""
        end = time.monotonic() + timeout
        while (self._q.unfinished_tasks and time.monotonic() < end) and self._t.is_alive():
            time.sleep(0.02)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                while not self._stop.is_set():
                    try:
                        item = self._q.get(timeout=0.1)
                    except queue.Empty:
                        continue
                    try:
                        if item is None:
                            break
                        conn.sendall(item)
                        self.sent += len(item)
                    except OSError:
                        break
                    finally:
                        self._q.task_done()

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        self._srv.close()

    def __enter__(self) -> Tpx3Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m streams.simulate --protocol asi-tpx3``: synthetic sparse scans over a
    TPX3-like data socket (``--bind``) or into a stream file (``--dump``)."""
    ap = argparse.ArgumentParser(prog="python -m streams.simulate --protocol asi-tpx3",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bind", metavar="HOST:PORT", help="listen here (the receiver connects)")
    ap.add_argument("--dump", help="write the stream to this file instead")
    ap.add_argument("--scans", type=int, default=1, help="acquisitions sent, one after another")
    ap.add_argument("--scan-shape", type=int, nargs=2, default=(16, 16), metavar=("NY", "NX"))
    ap.add_argument("--shape", type=int, nargs=2, default=(512, 512), metavar=("ROWS", "COLS"))
    ap.add_argument("--events", type=float, default=200.0, help="mean hits per frame")
    ap.add_argument("--chunk-frames", type=int, help="frames per array chunk (default all)")
    ap.add_argument("--wait", type=float, default=30.0,
                    help="--bind: seconds to wait for the receiver to connect")
    a = ap.parse_args(argv)
    nav, sig = tuple(a.scan_shape), tuple(a.shape)
    blobs = [encode_scan(nav, sig, *sparse_scan(nav, sig, a.events, seed=k),
                         chunk_frames=a.chunk_frames, sequence=k + 1) for k in range(a.scans)]
    if a.dump:
        with open(a.dump, "wb") as f:
            for b in blobs:
                f.write(b)
        print(f"wrote {a.scans} acquisitions of {nav[0]}x{nav[1]} frames to {a.dump}",
              flush=True)
        return 0
    if not a.bind:
        ap.error("give --bind HOST:PORT or --dump FILE")
    host, _, port = a.bind.rpartition(":")
    with Tpx3Simulator(host or "127.0.0.1", int(port)) as sim:
        print(f"ASI TPX3 data socket on {sim.endpoint}", flush=True)
        for b in blobs:
            sim.send(b)
        end = time.monotonic() + a.wait
        while sim.connections == 0 and time.monotonic() < end:
            time.sleep(0.05)
        sim.drain()
        time.sleep(0.5)       # let the receiver read the last bytes before the close
        print(f"sent {sim.sent} bytes", flush=True)
    return 0
