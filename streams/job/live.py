"""Live partial results: a ZeroMQ PUB socket, an HDF5 snapshot and a PNG, while a scan runs.

Rank 0 of the receiving job holds the merged-so-far live result of every open
scan and, every ``interval`` seconds (and when a scan closes), publishes:

- one message on the PUB socket of the rendezvous ``live`` endpoint
  (``docs/stream-protocol.md``, section 9): ``[b"live", header, array, ...,
  valid]``, the header a msgpack map ``{"scan", "t", "final", "progress": {...},
  "images": [{"name", "shape", "dtype"}, ...]}``, then each image's bytes (C
  order, little-endian) and the ``valid`` mask (uint8, scan_shape: 1 where the
  frame's result is in);
- ``<dir>/<scan>.live.h5`` (each image, ``/valid``, progress as attributes) and
  ``<dir>/<scan>.live.png`` (the images side by side; positions not yet valid in
  purple), each replaced atomically, mode 0600, in a directory of the user's own
  (made 0700 when missing; a symlink there, or a directory of another user, is refused
  as for staged copies: :func:`core.localfs.ensure_dir`).

With the job's :class:`~streams.security.StreamSecurity` the PUB socket is
a CURVE server with the receivers' keys: a viewer connects as a CURVE client with
the client certificate of the rendezvous file (:class:`LiveView`), anyone else is
refused by ZAP.

:class:`LiveView` is the other end (``stager stream watch``). The PNG encoder is
written here (zlib and the PNG chunks) rather than imported from matplotlib, too slow
to import and draw a figure with inside the receiving loop of rank 0.
"""
from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from core import localfs
from streams.errors import StreamError
from streams.security import (DOMAIN_LIVE, HandshakeMonitor, client_keys, refusal_address,
                              zap_handler)
from streams.socketloop import resolve_endpoint

__all__ = ["LivePublisher", "LiveView", "LiveMessage", "encode_png", "render_png",
           "write_snapshot"]

TOPIC = b"live"
#: RGB of scan positions whose result is not in yet.
INVALID_RGB = (70, 20, 90)


def encode_png(rgb: np.ndarray) -> bytes:
    """PNG bytes of an (h, w, 3) uint8 image (8-bit RGB, no interlace)."""
    rgb = np.ascontiguousarray(rgb, np.uint8)
    h, w, _ = rgb.shape
    raw = np.zeros((h, 1 + 3 * w), np.uint8)       # filter byte 0 (None) per row
    raw[:, 1:] = rgb.reshape(h, 3 * w)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b""))


def _gray(img: np.ndarray, valid: np.ndarray) -> np.ndarray:
    v = img[valid] if valid.any() else np.zeros(1)
    lo, hi = np.percentile(v, 1), np.percentile(v, 99)
    scaled = np.clip((img - lo) / (hi - lo if hi > lo else 1.0), 0, 1)
    g = (np.nan_to_num(scaled) * 255).astype(np.uint8)     # NaN: a position not in yet
    rgb = np.stack([g, g, g], axis=-1)
    rgb[~valid] = INVALID_RGB
    return rgb


def render_png(images: Dict[str, np.ndarray], valid: np.ndarray, min_size: int = 256) -> bytes:
    """The images side by side (each scaled by an integer factor to >= ``min_size``)."""
    tiles = []
    for img in images.values():
        a = np.asarray(img, np.float64)
        if a.ndim != 2:
            continue
        f = max(1, -(-min_size // max(a.shape)))
        # the valid mask is scan-shaped; other images (a sum frame) are valid throughout
        v = valid.astype(bool) if valid.shape == a.shape else np.ones(a.shape, bool)
        t = _gray(a, v)
        tiles.append(np.repeat(np.repeat(t, f, axis=0), f, axis=1))
    if not tiles:
        return encode_png(np.zeros((1, 1, 3), np.uint8))
    h = max(t.shape[0] for t in tiles)
    # side by side on white, 6 columns apart
    row = [np.pad(t, ((0, h - t.shape[0]), (0, 6), (0, 0)), constant_values=255) for t in tiles]
    return encode_png(np.concatenate(row, axis=1)[:, :-6])


def write_snapshot(path: str, images: Dict[str, np.ndarray], valid: np.ndarray,
                   attrs: Dict[str, Any]) -> None:
    """Replace the HDF5 snapshot at ``path`` atomically."""
    import h5py

    with h5py.File(f"live-{os.getpid()}", "w", driver="core", backing_store=False) as f:
        for n, img in images.items():
            f.create_dataset(n, data=img)
        f.create_dataset("valid", data=valid.astype(bool))
        for k, v in attrs.items():
            if v is not None:
                f.attrs[k] = v
        f.flush()
        image = f.id.get_file_image()
    localfs.write_bytes_atomic(path, image, mode=0o600)


class LivePublisher:
    """Rank 0's publisher: the PUB socket and the snapshot files.

    Parameters
    ----------
    bind : str
        Address to bind (``tcp://HOST:*``).
    directory : str, optional
        Where ``<scan>.live.h5`` / ``.png`` go (None: no files).
    advertise : str, optional
        Host name to publish when binding every interface.
    security : StreamSecurity, optional
        The job's keys (CURVE server, ZAP domain ``mpistage-live``); None: plain.
    """

    def __init__(self, bind: str, directory: Optional[str] = None,
                 advertise: Optional[str] = None, security: Any = None) -> None:
        import zmq

        if directory:
            directory = localfs.ensure_dir(directory, directory, strict=False)
        self._ctx: Any = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.SNDHWM, 10)     # a slow viewer loses old images, never blocks
        self._sock.setsockopt(zmq.LINGER, 0)
        self._zap: Any = None
        self._monitor: Any = None
        self.refused: Counter = Counter()     # viewers refused (ZAP or handshake), by reason
        self.refused_from: Counter = Counter()    # by (reason, address or "")
        if security is not None:
            security.serve(self._sock, DOMAIN_LIVE)
            if security.curve:
                self._zap = zap_handler(self._ctx)
                self._monitor = HandshakeMonitor(self._sock)   # plain viewers fail there
        self._sock.bind(bind[:-2] + ":*" if bind.endswith(":0") else bind)
        self.endpoint = resolve_endpoint(self._sock.getsockopt(zmq.LAST_ENDPOINT).decode(),
                                         advertise)
        # viewers' frame requests (streams.job.frames): same keys, same ZAP domain; a
        # request is a few bytes, anything longer drops the peer before it is read
        self._req = self._ctx.socket(zmq.ROUTER)
        self._req.setsockopt(zmq.LINGER, 0)
        self._req.setsockopt(zmq.MAXMSGSIZE, 1024)
        self._req.setsockopt(zmq.RCVHWM, 64)
        self._req.setsockopt(zmq.SNDHWM, 16)
        if security is not None:
            security.serve(self._req, DOMAIN_LIVE)
        host = bind.rsplit(":", 1)[0]
        self._req.bind(host + ":*")
        self.requests_endpoint = resolve_endpoint(
            self._req.getsockopt(zmq.LAST_ENDPOINT).decode(), advertise)
        self.directory = directory
        self.first_published: Dict[str, float] = {}

    def publish(self, scan: str, images: Dict[str, np.ndarray], valid: np.ndarray,
                progress: Dict[str, Any], final: bool = False,
                udf: Optional[Dict[str, Any]] = None) -> None:
        """Send one live message and replace the snapshot files (``udf``: the header's
        description of a UDF's buffers, :meth:`analyses.udf.UDFAnalysis.live_images`)."""
        import msgpack

        imgs = {n: np.ascontiguousarray(a, a.dtype.newbyteorder("<"))
                for n, a in images.items()}
        if self._zap is not None:
            self.refusals()
            progress = dict(progress, live_refused=sum(self.refused.values()))
        header = {"scan": scan, "t": time.time(), "final": final, "progress": progress,
                  "frames": self.requests_endpoint, "udf": udf,
                  "valid_shape": list(np.shape(valid)),
                  "images": [{"name": n, "shape": list(a.shape), "dtype": a.dtype.str}
                             for n, a in imgs.items()]}
        parts: List[Any] = [TOPIC, msgpack.packb(header)]
        parts += [a.tobytes() for a in imgs.values()]
        parts.append(np.ascontiguousarray(valid, np.uint8).tobytes())
        self._sock.send_multipart(parts, copy=False)
        self.first_published.setdefault(scan, time.monotonic())
        if self.directory:
            base = os.path.join(self.directory, f"{scan}.live")
            attrs = {k: v for k, v in progress.items() if isinstance(v, (int, float, str))}
            attrs["final"] = final
            write_snapshot(base + ".h5", {n.replace(":", "_"): a for n, a in imgs.items()},
                           valid, attrs)
            localfs.write_bytes_atomic(base + ".png", render_png(imgs, valid), mode=0o600)

    def publish_job(self, progress: Dict[str, Any]) -> None:
        """A message about the job, not a scan (``scan`` empty, ``job`` true, no images):
        its rejections and held messages, also while no scan is open. No files."""
        import msgpack

        header = {"scan": "", "job": True, "t": time.time(), "final": False,
                  "progress": progress, "images": []}
        self._sock.send_multipart([TOPIC, msgpack.packb(header), b""], copy=False)

    def requests(self, most: int = 32) -> List[Tuple[bytes, bytes]]:
        """Viewers' frame requests waiting (at most ``most``): ``(peer, request bytes)``."""
        out: List[Tuple[bytes, bytes]] = []
        while len(out) < most and self._req.poll(0):
            parts = self._req.recv_multipart()
            if len(parts) == 2:           # [peer, request]: anything else is dropped
                out.append((parts[0], parts[1]))
        return out

    def answer(self, peer: bytes, header: Dict[str, Any], data: Any = b"") -> None:
        """A frame request's answer: ``[header (msgpack), frame bytes]`` to ``peer``
        (dropped, never waited for, when the peer is gone or slow)."""
        import msgpack
        import zmq

        with contextlib.suppress(zmq.Again):
            self._req.send_multipart([peer, msgpack.packb(header), data],
                                     flags=zmq.NOBLOCK, copy=False)

    def refusals(self) -> Dict[str, int]:
        """Count the viewers refused since the last call (ZAP: a key not authorised; the
        handshake: a plain subscriber); returns every refusal so far, by reason."""
        new: List[Tuple[str, str]] = []
        if self._zap is not None:
            new += self._zap.drain(DOMAIN_LIVE)
        if self._monitor is not None:
            new += self._monitor.drain()
        for reason, detail in new:
            self.refused[reason] += 1
            self.refused_from[(reason, refusal_address(detail) or "")] += 1
        return dict(self.refused)

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.close()
        self._req.close(linger=0)
        self._sock.close(linger=0)


class LiveMessage:
    """One decoded live message: ``scan``, ``progress``, ``images``, ``valid``, ``final``."""

    def __init__(self, header: Dict[str, Any], images: Dict[str, np.ndarray],
                 valid: np.ndarray) -> None:
        self.header = header
        self.scan: str = header["scan"]
        self.final: bool = bool(header.get("final"))
        self.progress: Dict[str, Any] = header.get("progress", {})
        self.images = images
        self.valid = valid
        self.job: bool = bool(header.get("job"))

    @classmethod
    def decode(cls, parts: List[bytes]) -> LiveMessage:
        import msgpack

        if len(parts) < 3 or parts[0] != TOPIC:
            raise ValueError(f"not a live message ({len(parts)} parts)")
        header = msgpack.unpackb(parts[1])
        images = {}
        for spec, buf in zip(header["images"], parts[2:-1]):
            images[spec["name"]] = np.frombuffer(buf, spec["dtype"]).reshape(spec["shape"])
        shape: Tuple[int, ...] = tuple(header["valid_shape"]) if "valid_shape" in header else \
            next(iter(images.values())).shape if images else (-1,)
        valid = np.frombuffer(parts[-1], np.uint8).astype(bool).reshape(shape)
        return cls(header, images, valid)

    def png(self) -> bytes:
        return render_png(self.images, self.valid)


class LiveView:
    """A subscriber to a job's live endpoint (``stager stream watch``).

    ``server_key`` (Z85) and ``certificate`` (a client certificate with its secret
    key): connect as a CURVE client, as the job's live socket requires unless it
    runs ``--insecure``. ``monitor``: :attr:`events` is a PAIR socket of this
    subscriber's connection events (:meth:`zmq.Socket.get_monitor_socket`, made
    before connecting so none is missed): how a viewer learns that the job's live
    socket accepted it, and that it went away (the job ended).
    """

    def __init__(self, endpoint: str, server_key: Optional[str] = None,
                 certificate: Optional[str] = None, monitor: bool = False) -> None:
        import zmq

        self._zmq = zmq
        self._ctx: Any = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, TOPIC)
        self._sock.setsockopt(zmq.LINGER, 0)
        if server_key is not None:
            try:
                if certificate is None:
                    raise StreamError(f"the live socket {endpoint} uses CURVE: give a client "
                                      "certificate (--certificate FILE)")
                client_keys(self._sock, server_key, certificate)
            except StreamError:
                self._sock.close()
                raise
        self.events: Any = self._sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED) if monitor else None
        self._sock.connect(endpoint)
        self.endpoint = endpoint

    def receive(self, timeout: float) -> Optional[LiveMessage]:
        """The next message within ``timeout`` seconds, or None."""
        if not self._sock.poll(int(timeout * 1000)):
            return None
        return LiveMessage.decode(self._sock.recv_multipart())

    def close(self) -> None:
        if self.events is not None:
            self.events.close(linger=0)
        self._sock.close(linger=0)
