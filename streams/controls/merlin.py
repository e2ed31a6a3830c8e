"""Quantum Detectors Merlin control port (6341): ``SET`` / ``GET`` / ``CMD`` over MPX framing.

``--control merlin://HOST[:6341]``; the requests, statuses and the active/passive
sequence are ``docs/stream-protocol.md`` section 12's ("Control"), as LiberTEM-live's
``MerlinControl`` sends them.
"""
from __future__ import annotations

import contextlib
import socket
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from streams.controls import Control, ControlError

__all__ = ["MerlinControl", "MerlinClient"]

_STATUS = {1: "system busy", 2: "unrecognised command", 3: "parameter out of range"}
MAX_ANSWER = 1 << 16


class MerlinClient:
    """One TCP connection to the control port; each call waits for its answer."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.where = f"{host}:{port}"
        try:
            self._s = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ControlError(f"Merlin control port {self.where} unreachable: {e}") from None

    def _recv(self, n: int, what: str) -> bytes:
        out = b""
        while len(out) < n:
            try:
                got = self._s.recv(n - len(out))
            except OSError as e:
                raise ControlError(f"{what}: no answer from {self.where} ({e})") from None
            if not got:
                raise ControlError(f"{what}: {self.where} closed the connection")
            out += got
        return out

    def call(self, method: str, name: str, value: Any = None) -> Optional[str]:
        """One request; the value of a ``GET``, else None (ControlError naming the request
        and the status)."""
        body = f"{method},{name},{0 if value is None else value}".encode("ascii")
        what = f"{method} {name}" + ("" if value is None else f" {value}")
        try:
            self._s.sendall(b"MPX,%010d," % (len(body) + 1) + body)
        except OSError as e:
            raise ControlError(f"{what}: cannot send to {self.where} ({e})") from None
        prefix = self._recv(15, what)
        try:
            if not prefix.startswith(b"MPX,"):
                raise ValueError(prefix)
            n = int(prefix[4:14])
        except ValueError:
            raise ControlError(f"{what}: answer {prefix!r} is not MPX framing") from None
        if not 0 < n <= MAX_ANSWER:
            raise ControlError(f"{what}: answer of {n} bytes")
        # the sim counts the payload alone, the detector the payload + 1: read what is there
        rest = self._recv(n - 1, what) if n > 1 else b""
        try:
            self._s.settimeout(0.05)
            rest += self._s.recv(1)
        except OSError:
            pass
        finally:
            self._s.settimeout(10.0)
        parts = rest.decode("ascii", "replace").split(",")
        try:
            status = int(parts[3] if method == "GET" else parts[2])
        except (IndexError, ValueError):
            raise ControlError(f"{what}: answer {rest!r} has no status") from None
        if status:
            raise ControlError(f"Merlin refused {what}: status {status} "
                               f"({_STATUS.get(status, 'unknown')}), answer {rest!r}")
        return parts[2] if method == "GET" else None

    def close(self) -> None:
        self._s.close()


class MerlinControl(Control):
    """``merlin://HOST[:PORT]``: a Merlin's control port."""

    scheme = "merlin"

    def __init__(self, url: str, settings: Dict[str, Any]) -> None:
        super().__init__(url, settings)
        host, _, port = url.partition("://")[2].strip("/").partition(":")
        self.host, self.port = host, int(port or 6341)
        self.started = False

    def _client(self) -> MerlinClient:
        return MerlinClient(self.host, self.port)

    def prepare(self, scan_shape: Optional[Sequence[int]]) -> Tuple[int, ...]:
        if not self.active:
            self._client().close()                 # reachable; the shape comes from HDR
            self.scan_shape = tuple(scan_shape or ())
            return self.scan_shape
        self._whole_shape(scan_shape, "frame")
        c = self._client()
        try:
            c.call("SET", "NUMFRAMESTOACQUIRE", self.images)
            if self.settings.get("count_time") is not None:
                c.call("SET", "ACQUISITIONTIME", float(self.settings["count_time"]) * 1e3)
            if self.settings.get("frame_time") is not None:
                c.call("SET", "ACQUISITIONPERIOD", float(self.settings["frame_time"]) * 1e3)
        finally:
            c.close()
        return self.scan_shape

    def start(self, hook: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
        info = {"series": None, "images": self.images, "scan_shape": list(self.scan_shape),
                "detector": self.url, "mode": "active" if self.active else "passive",
                "trigger_mode": self.settings.get("trigger_mode") or "soft"}
        if not self.active:
            if hook is not None:
                hook(info)
            return info
        self.started = True                  # from here on, any failure stops it
        try:
            c = self._client()
            try:
                c.call("CMD", "STARTACQUISITION")
                if hook is not None:
                    hook(info)
                if info["trigger_mode"] == "soft":
                    c.call("CMD", "SOFTTRIGGER")
            finally:
                c.close()
        except BaseException:
            self.finish()
            raise
        return info

    def finish(self) -> None:
        if not self.started:
            return
        self.started = False
        with contextlib.suppress(ControlError):
            c = self._client()
            try:
                c.call("CMD", "STOPACQUISITION")
            finally:
                c.close()
