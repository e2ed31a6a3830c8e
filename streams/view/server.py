"""``stager stream view RV.json``: a web page of a running job, pushed as partial results arrive.

What the page shows and its token security (as Jupyter's) are in
docs/guide/streaming.md. Built on Tornado (already in the environment through Dask
and Jupyter); ZeroMQ is read in one thread and each message, encoded once, handed
to the event loop; a page gets only the latest message of each scan, so a slow
browser holds nothing back. A click asks for a position's frame
(``{"type": "frame", "scan", "index"}``), fetched through the job
(:meth:`LiveJob.frame`, one at a time per page) and answered to that page.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import os
import secrets
import signal
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Optional

import numpy as np

from streams.errors import StreamError
from streams.view.client import LiveJob

__all__ = ["serve", "encode_partial", "encode_frame", "MAX_PIXELS"]

#: Pixels of one image sent to a page as they are; larger ones are binned.
MAX_PIXELS = 1 << 20
_PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static", "view.html")


def _binned(a: np.ndarray) -> tuple[np.ndarray, int]:
    """``a`` (2-D) binned by the smallest integer factor that fits MAX_PIXELS."""
    f = 1
    while (a.shape[0] // f) * (a.shape[1] // f) > MAX_PIXELS:
        f += 1
    if f == 1:
        return a, 1
    h, w = a.shape[0] // f, a.shape[1] // f
    return a[:h * f, :w * f].reshape(h, f, w, f).mean(axis=(1, 3)), f


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def encode_partial(p: Any) -> str:
    """The JSON a page gets for a :class:`Partial`: ``{"type": "scan", "scan", "t",
    "final", "progress", "valid", "images": [{"name", "shape", "binned", "data"}]}``,
    ``data`` base64 of C-order little-endian float64 (images) or uint8 (``valid``)."""
    images = []
    for name, a in p.images.items():
        a = np.asarray(a)
        if a.ndim != 2:
            continue
        b, f = _binned(a.astype("<f8"))
        images.append({"name": name, "shape": list(b.shape), "binned": f, "data": _b64(b)})
    valid = np.asarray(p.valid, np.uint8)
    return json.dumps({"type": "scan", "scan": p.scan, "t": p.t, "final": p.final,
                       "progress": p.progress, "images": images,
                       "valid": {"shape": list(valid.shape), "data": _b64(valid)}},
                      default=str)


class _State:
    """What every page is told: the latest text per scan and the job's status."""

    def __init__(self) -> None:
        self.latest: OrderedDict[str, str] = OrderedDict()
        self.clients: set = set()
        # frame requests: one thread, the only user of the job's request socket
        self.fetcher = ThreadPoolExecutor(1, thread_name_prefix="mpistage-view-frames")

    def put(self, key: str, text: str) -> None:
        self.latest[key] = text
        for c in list(self.clients):
            c.push(key, text)


def encode_frame(scan: str, index: int, got: Any) -> str:
    """The JSON text a page gets for a frame (a :class:`Frame`) or a refusal (an exception
    with ``refused``, or any other: ``error``)."""
    head: Dict[str, Any] = {"type": "frame", "scan": scan, "index": index}
    if isinstance(got, BaseException):
        return json.dumps(dict(head, refused=getattr(got, "refused", "error"), why=str(got)))
    b, f = _binned(np.asarray(got.data, "<f8"))
    return json.dumps(dict(head, shape=list(b.shape), binned=f, where=got.where,
                           complete=got.complete, dtype=str(got.data.dtype), data=_b64(b)))


def _app(state: _State, token: str, fetch: Optional[Callable[[str, int], Any]] = None
         ) -> Any:
    import tornado.web
    import tornado.websocket

    class _Guarded(tornado.web.RequestHandler):
        def prepare(self) -> None:
            given = self.get_query_argument("token", "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                raise tornado.web.HTTPError(403)

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            self.finish()       # nothing about the job, not even an error page

    class Page(_Guarded):
        def get(self) -> None:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.set_header("Cache-Control", "no-store")
            self.set_header("Referrer-Policy", "no-referrer")   # the token stays here
            with open(_PAGE, "rb") as f:
                self.finish(f.read())

    class Socket(tornado.websocket.WebSocketHandler):
        prepare, write_error = _Guarded.prepare, _Guarded.write_error

        def open(self, *args: Any, **kwargs: Any) -> None:
            self.pending: OrderedDict[str, str] = OrderedDict()
            self.busy = False
            state.clients.add(self)
            for k, text in state.latest.items():
                self.push(k, text)

        def push(self, key: str, text: str) -> None:
            """Queue ``text`` under ``key``, replacing what this page has not got yet."""
            import tornado.ioloop

            self.pending[key] = text
            self.pending.move_to_end(key)
            if not self.busy:
                self.busy = True
                tornado.ioloop.IOLoop.current().spawn_callback(self._pump)

        async def _pump(self) -> None:
            try:
                while self.pending:
                    _, text = self.pending.popitem(last=False)
                    await self.write_message(text)
            except tornado.websocket.WebSocketClosedError:
                pass
            finally:
                self.busy = False

        async def on_message(self, message: Any) -> None:
            """A frame request (the only message a page sends); one at a time per page."""
            import tornado.ioloop

            try:
                req = json.loads(message)
                scan, index = req["scan"], req["index"]
                if req.get("type") != "frame" or not isinstance(scan, str) or \
                        isinstance(index, bool) or not isinstance(index, int) or index < 0:
                    raise ValueError(message[:100])
            except (ValueError, KeyError, TypeError):
                return          # not a request this page makes: ignored
            if fetch is None or getattr(self, "fetching", False):
                text = json.dumps({"type": "frame", "scan": scan, "index": index,
                                   "refused": "busy", "why": "a frame is on its way"})
            else:
                self.fetching = True
                try:
                    got = await tornado.ioloop.IOLoop.current().run_in_executor(
                        state.fetcher, fetch, scan, index)
                finally:
                    self.fetching = False
                text = encode_frame(scan, index, got)
            with contextlib.suppress(tornado.websocket.WebSocketClosedError):
                await self.write_message(text)

        def on_close(self) -> None:
            state.clients.discard(self)

    return tornado.web.Application([(r"/", Page), (r"/ws", Socket)],
                                   websocket_max_message_size=1 << 16)


def _status(job: Any) -> Dict[str, Any]:
    ended = job.ended
    return {"type": "job", "endpoint": job.endpoint, "rendezvous": job.rendezvous,
            "out": job.out, "connected": job.connected, "ended": ended,
            "job_rejected": job.rejections() if ended else
            (job.job_progress.get("job_rejected") or {}), "t": time.time()}


def _read(job: Any, put: Callable[[str, str], None], stop: threading.Event) -> None:
    """The reader thread: every message of the job, encoded once, to ``put``."""
    last: Optional[str] = None
    while not stop.is_set():
        p = job.next(0.25)
        if p is not None:
            put("scan:" + p.scan, encode_partial(p))
        st = _status(job)
        key = json.dumps({k: v for k, v in st.items() if k != "t"}, sort_keys=True,
                         default=str)
        if key != last:
            last = key
            put("job", json.dumps(st, default=str))


def serve(rendezvous: str, port: int = 0, bind: str = "127.0.0.1",
          certificate: Optional[str] = None, out: Optional[str] = None,
          token: Optional[str] = None, on_ready: Optional[Callable[[str], None]] = None,
          trust_owner: Any = None, wait: Optional[float] = None) -> None:
    """Serve the view of the job of ``rendezvous`` until SIGINT or SIGTERM.

    ``on_ready(url)`` is called once it listens; ``trust_owner`` and ``wait`` are
    :class:`~streams.view.client.LiveJob`'s. StreamError when the rendezvous file or
    the certificate cannot be used.
    """

    job = LiveJob(rendezvous, out, certificate, trust_owner=trust_owner, wait=wait)
    token = token or secrets.token_urlsafe(24)

    def fetch(scan: str, index: int) -> Any:
        """A frame through the job, or the exception that says why not."""
        if job.frames_endpoint is None:
            return StreamError("the job has sent nothing yet: no frame to ask for")
        try:
            return job.frame(scan, index)
        except (StreamError, TimeoutError) as e:
            return e

    async def main() -> None:
        import tornado.httpserver
        import tornado.ioloop
        import tornado.netutil

        state = _State()
        loop = tornado.ioloop.IOLoop.current()
        socks = tornado.netutil.bind_sockets(port, bind)
        server = tornado.httpserver.HTTPServer(_app(state, token, fetch))
        server.add_sockets(socks)
        stop = threading.Event()
        reader = threading.Thread(
            target=_read, args=(job, lambda k, t: loop.add_callback(state.put, k, t), stop),
            name="mpistage-view-reader", daemon=True)
        reader.start()
        host = f"[{bind}]" if ":" in bind else bind
        if on_ready is not None:
            on_ready(f"http://{host}:{socks[0].getsockname()[1]}/?token={token}")
        done = asyncio.Event()
        aio = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            aio.add_signal_handler(s, done.set)
        await done.wait()
        stop.set()
        server.stop()
        reader.join(2)
        state.fetcher.shutdown(wait=False)

    try:
        asyncio.run(main())
    finally:
        job.close()
