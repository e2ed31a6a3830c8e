"""A Python handle on a running receiving job: partial results as they arrive.

Used as ``with attach("rv.json", out="out") as job: for p in job.partials("s1")``
(docs/guide/streaming.md, "Following a job from Python and in a browser"). The
handle subscribes to the job's live socket (``docs/stream-protocol.md`` section 9)
with the viewers' certificate: it can watch, never write. The job has ended when
that socket goes away, or when the ``mpirun`` or Slurm job it started ends
(:mod:`streams.view.launch`). The socket drops old messages for a slow reader,
never the job's pace; each scan's ``final`` message is sent once more when written.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, Dict, Iterator, Optional, Sequence

import numpy as np

from streams.errors import StreamError
from streams.job.frames import MAX_FRAME_BYTES
from streams.job.live import LiveView
from streams.protocols.native.rendezvous import read_rendezvous_json, wait_for_rendezvous
from streams.security import client_keys
from streams.view.plot import LivePlot
from streams.view.results import Frame, FrameRefused, JobEnded, Partial

__all__ = ["attach", "LiveJob"]


class LiveJob:
    """A viewer's handle on one receiving job (see the module docstring).

    ``out`` is the job's ``--out`` (for :meth:`report`, :meth:`rejections`);
    ``certificate`` a viewer's ``.key_secret`` (default: the rendezvous file's);
    ``process`` the job's ``mpirun`` or Slurm job, whose end ends it for this handle;
    ``trust_owner`` users whose rendezvous files are trusted too (a colleague's job,
    docs/guide/streaming.md); ``wait`` seconds to wait for the file, or a new job's.
    """

    def __init__(self, rendezvous: str, out: Optional[str] = None,
                 certificate: Optional[str] = None, process: Any = None,
                 trust_owner: Any = None, wait: Optional[float] = None) -> None:
        self.rendezvous = os.path.abspath(rendezvous)
        # read as every reader of one reads it: trusted, no link followed, its job running
        src = read_rendezvous_json(self.rendezvous, trust_owner) if wait is None else \
            wait_for_rendezvous(self.rendezvous, timeout=wait, trust_owner=trust_owner,
                                wait_ended=True, reader=read_rendezvous_json)
        if not src.get("live"):
            raise StreamError(f"{self.rendezvous}: the job publishes no live endpoint")
        self.out = None if out is None else os.path.abspath(out)
        self.process = process
        self.endpoint: str = src["live"]
        # the job's server key and a viewer's certificate (default: the one the file names)
        certificate = certificate or src.get("viewer_certificate")
        if certificate and src.get("curve_serverkey"):
            _check_own(certificate, self.rendezvous)
        self._keys: Any = (src.get("curve_serverkey"), certificate)
        self._view = LiveView(self.endpoint, *self._keys, monitor=True)
        self._monitor = self._view.events
        self.connected = False          # the job's live socket accepted us
        self.disconnected = False       # ... and went away since
        self.latest: Dict[str, Partial] = {}
        self.finals: Dict[str, Partial] = {}
        self.job_progress: Dict[str, Any] = {}   # the job's rejections (no scan)
        self.frames_endpoint: Optional[str] = None   # the job's frame requests (its messages)
        self._dealer: Any = None
        self._asked = 0

    # ---- the job's state ----
    def _events(self) -> None:
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        while self._monitor.poll(0):
            ev = recv_monitor_message(self._monitor)["event"]
            if ev == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.connected, self.disconnected = True, False
            elif ev == zmq.EVENT_DISCONNECTED and self.connected:
                self.disconnected = True

    @property
    def ended(self) -> bool:
        """The job ended: its ``mpirun`` exited, its live socket went away, or (with
        ``out``) it wrote ``OUT/rejections.json`` after this rendezvous file."""
        self._events()
        if self.process is not None and self.process.poll() is not None:
            return True
        if self.out is not None:    # the job writes rejections.json last, when it ends
            with contextlib.suppress(OSError):
                return os.stat(os.path.join(self.out, "rejections.json")).st_mtime >= \
                    os.stat(self.rendezvous).st_mtime or self.disconnected
        return self.disconnected

    def wait_connected(self, timeout: float = 30.0) -> None:
        """Return once the job's live socket accepted this viewer (subscribers miss
        what is published before); TimeoutError after ``timeout`` s."""
        end = time.monotonic() + timeout
        while not self.connected:
            if self.ended or time.monotonic() > end:
                raise TimeoutError(f"not connected to {self.endpoint} within {timeout} s "
                                   "(the job not running, or it refused this viewer's key)")
            self._monitor.poll(100)
            self._events()

    # ---- partial results ----
    def next(self, timeout: float = 1.0) -> Optional[Partial]:
        """The next scan message within ``timeout`` seconds, or None (the job's own
        messages update :attr:`job_progress` and are not returned)."""
        end = time.monotonic() + timeout
        while True:
            msg = self._view.receive(max(0.0, min(0.2, end - time.monotonic())))
            self._events()
            if msg is not None:
                self.connected = True
                self.frames_endpoint = msg.header.get("frames") or self.frames_endpoint
                if msg.job:
                    self.job_progress = dict(msg.progress)
                else:
                    p = Partial(msg.scan, float(msg.header.get("t", 0.0)), msg.final,
                                dict(msg.progress), dict(msg.images), msg.valid, time.time(),
                                msg.header.get("udf"))
                    self.latest[p.scan] = p
                    if p.final:
                        self.finals[p.scan] = p
                    return p
            if time.monotonic() >= end:
                return None

    def partials(self, scan: Optional[str] = None, timeout: Optional[float] = None
                 ) -> Iterator[Partial]:
        """Partial results as they arrive (of ``scan``, or of every scan).

        Yielded when something is new (more frames complete or more positions in the
        images), and always the final one. With ``scan``, ends after its final result
        (JobEnded if the job ends first); without, when the job ends. TimeoutError after
        ``timeout`` s.
        """
        end = None if timeout is None else time.monotonic() + timeout
        if scan is not None and scan in self.finals:
            yield self.finals[scan]
            return
        seen: Dict[str, Any] = {}      # scan -> (complete, valid positions) last yielded
        while True:
            p = self.next(0.5)
            if p is not None and (scan is None or p.scan == scan):
                new = (p.complete, int(p.valid.sum()))
                old = seen.get(p.scan)
                if p.final or old is None or (new > old and new[0] >= old[0]):
                    seen[p.scan] = new
                    yield p
                if scan is not None and p.final:
                    return
            elif p is None and self.ended:
                if scan is None:
                    return
                raise JobEnded(f"the job ended before scan {scan!r}'s final result reached "
                               f"this viewer (its report: {self._where(scan + '.json')})")
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"no final result of {scan or 'every scan'} within "
                                   f"{timeout} s")

    def udf_iter(self, scan: str, timeout: Optional[float] = None) -> Iterator[Any]:
        """A UDF's partial results of ``scan`` as LiberTEM's ``run_udf_iter`` gives them
        (:meth:`Partial.udf_results`), the last one the final result; a message the job
        sent before any of the scan's frames was processed (no buffers yet) is skipped."""
        for p in self.partials(scan, timeout):
            if p.udf is None and not p.images and not p.final:
                continue        # published before any partition was processed: no buffers
            yield p.udf_results()

    def plot(self, scan: str, images: Optional[Sequence[str]] = None, timeout: Optional[float]
             = None, log: bool = False, cmap: str = "viridis") -> Any:
        """Follow ``scan`` to its final result in one matplotlib figure updated in place
        (in Jupyter: one output, as LiberTEM's ``plots=True``); returns the
        :class:`~streams.view.plot.LivePlot` (its ``partial`` the final result).

        ``images``: the names to show (default: every 2-D image). Raises as
        :meth:`partials` does."""
        plot = LivePlot(images, cmap=cmap, log=log)
        for p in self.partials(scan, timeout):
            plot.update(p)
        return plot

    def result(self, scan: str, timeout: Optional[float] = None) -> Partial:
        """Wait for ``scan``'s final result (the merge across nodes the job writes)."""
        last: Optional[Partial] = None
        for p in self.partials(scan, timeout):
            last = p
        assert last is not None and last.final
        return last

    # ---- one position's frame ----
    def frame(self, scan: str, position: Any, timeout: float = 10.0) -> Frame:
        """The frame of ``scan`` at ``position`` (flat index or tuple), fetched through
        the job from the receiver that still holds it. Raises FrameRefused (``not_held``,
        ``too_large``, ``rate``, ``busy``, ...) or TimeoutError."""
        import msgpack
        import zmq

        index = self._index(scan, position)
        end = time.monotonic() + timeout
        while self.frames_endpoint is None:
            if time.monotonic() > end:
                raise TimeoutError("the job sent no message yet: its frame requests' "
                                   "endpoint is unknown")
            self.next(0.2)
        if self._dealer is None:
            d: Any = zmq.Context.instance().socket(zmq.DEALER)
            d.setsockopt(zmq.LINGER, 0)
            # an answer larger than the job's cap is dropped by libzmq, never allocated
            d.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES + (1 << 16))
            if self._keys[0] is not None:
                client_keys(d, self._keys[0], self._keys[1])
            d.connect(self.frames_endpoint)
            self._dealer = d
        self._asked += 1
        rid = self._asked
        self._dealer.send(msgpack.packb({"scan": scan, "frame": index, "id": rid}))
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self._dealer.poll(int(left * 1000)):
                raise TimeoutError(f"no answer to the request of scan {scan!r} frame {index} "
                                   f"from {self.frames_endpoint} within {timeout} s")
            parts = self._dealer.recv_multipart()
            head = msgpack.unpackb(parts[0])
            if head.get("id") != rid:
                continue          # the late answer of an earlier request
            if not head.get("ok"):
                raise FrameRefused(f"scan {scan!r} frame {index}: {head.get('refused')}: "
                                   f"{head.get('why')}", str(head.get("refused")))
            shape = tuple(int(n) for n in head["shape"])
            dt = np.dtype(head["dtype"])
            if len(parts) != 2 or len(parts[1]) != dt.itemsize * int(np.prod(shape)):
                raise StreamError(f"scan {scan!r} frame {index}: an answer of "
                                  f"{len(parts[-1])} bytes for {shape} {dt}")
            data = np.frombuffer(parts[1], dt).reshape(shape)
            return Frame(scan, index, data, bool(head.get("complete")), str(head["where"]))

    def _index(self, scan: str, position: Any) -> int:
        if isinstance(position, (int, np.integer)):
            return int(position)
        p = self.latest.get(scan)
        if p is None:
            raise StreamError(f"scan {scan!r}: its shape is unknown (no message of it yet): "
                              "give the position as a flat index")
        return int(np.ravel_multi_index(tuple(position), p.valid.shape))

    # ---- what the job wrote ----
    def _where(self, name: str) -> str:
        return os.path.join(self.out, name) if self.out else f"OUT/{name} (give out=)"

    def _read_json(self, name: str, timeout: float = 0.0) -> Dict[str, Any]:
        if self.out is None:
            raise StreamError(f"{name}: this handle does not know the job's --out directory "
                              "(attach(..., out=DIR))")
        path = os.path.join(self.out, name)
        end = time.monotonic() + timeout
        # the job publishes a scan's final result, then drains its files to OUT
        while not os.path.exists(path) and time.monotonic() < end and not (
                self.process is not None and self.process.poll() is not None):
            time.sleep(0.05)
        try:
            with open(path) as f:
                return dict(json.load(f))
        except (OSError, ValueError) as e:
            raise StreamError(f"cannot read {path}: {e}") from None

    def report(self, scan: str, timeout: float = 60.0) -> Dict[str, Any]:
        """``OUT/<scan>.json``, the scan's report; waits up to ``timeout`` seconds for it
        (the job drains it to OUT just after it published the final result)."""
        return self._read_json(f"{scan}.json", timeout)

    def rejections(self) -> Dict[str, Any]:
        """The job's rejections: ``OUT/rejections.json`` once the job ended, else the
        latest figures the job published; either way ``rejected`` (the total),
        ``by_reason`` and ``examples``."""
        if self.out is not None and os.path.exists(os.path.join(self.out, "rejections.json")):
            return self._read_json("rejections.json")
        latest = [p.progress.get("job_rejected") for p in self.latest.values()]
        j = dict(self.job_progress.get("job_rejected") or next(
            (j for j in reversed(latest) if j), {}) or {})
        # the published figures under the file's names
        return {"rejected": int(j.pop("total", 0)), "by_reason": j.pop("by_reason", {}),
                "examples": j.pop("examples", []), **j}

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Wait for a job started by :func:`launch` or :func:`launch_sbatch` to end;
        its exit status."""
        return None if self.process is None else int(self.process.wait(timeout))

    def close(self) -> None:
        if self._dealer is not None:
            self._dealer.close(linger=0)
        self._view.close()

    def __enter__(self) -> LiveJob:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def attach(rendezvous: str, out: Optional[str] = None, certificate: Optional[str] = None,
           trust_owner: Any = None, wait: Optional[float] = None) -> LiveJob:
    """A viewer's handle on the running job of ``rendezvous`` (see :class:`LiveJob`;
    ``trust_owner``: a colleague's job, ``wait``: seconds to wait for its file)."""
    return LiveJob(rendezvous, out, certificate, trust_owner=trust_owner, wait=wait)


def _check_own(certificate: str, rendezvous: str) -> None:
    """A viewer's certificate another user owns (a colleague's job's, as its rendezvous
    file names it) cannot be used: say what to do instead of "permission denied"."""
    try:
        owner = os.stat(certificate).st_uid
    except OSError:
        return      # missing: load_client_certificate says so
    if owner != os.geteuid():
        import pwd

        try:
            name = pwd.getpwuid(owner).pw_name
        except KeyError:
            name = str(owner)
        raise StreamError(
            f"the viewers' certificate {certificate} is {name}'s: to watch {name}'s job, "
            f"ask them for its text and keep it in a file of your own that only you can "
            f"read ((umask 077 && cat > ~/viewer.key_secret)), then give --certificate "
            f"~/viewer.key_secret (certificate=) and --trust-owner {name} (trust_owner=) "
            f"(docs/guide/streaming.md, \"A colleague's view\")")
