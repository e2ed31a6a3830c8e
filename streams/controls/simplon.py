"""DECTRIS SIMPLON REST API (1.8): configure, arm, trigger and disarm a detector.

``--control simplon://DCU[:PORT]``. The calls LiberTEM-live's ``DEigerClient``
sends: ``GET``/``PUT {"value": V}`` ``/detector/api/1.8.0/config/NAME``, ``PUT
.../command/{arm,trigger,disarm}``, ``PUT /stream/api/1.8.0/config/NAME``, the
pixel mask as a ``darray`` (:func:`decode_darray`). Standard-library ``urllib``,
a timeout on every call; a refusal is a :class:`~streams.controls.ControlError`
naming method, URL, status and answer.
"""
from __future__ import annotations

import contextlib
import base64
import binascii
import json
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from streams.controls import Control, ControlError
from streams.scanshape import resolve_scan_shape

__all__ = ["Simplon", "SimplonClient", "decode_darray"]

API = "1.8.0"
#: largest answer read from the detector (a configuration value is a few hundred bytes)
MAX_ANSWER = 1 << 20
#: largest pixel mask taken from the detector, decoded (an EIGER2 16M's uint32 mask: 72 MB)
MAX_MASK_BYTES = 1 << 27
#: largest side of a pixel mask
MAX_MASK_SIDE = 1 << 15


class SimplonClient:
    """The REST calls, each one a method; ``base`` is ``http://HOST:PORT``."""

    def __init__(self, base: str, timeout: float = 10.0) -> None:
        self.base, self.timeout = base.rstrip("/"), timeout

    def call(self, method: str, path: str, value: Any = None, body: bool = False,
             limit: int = MAX_ANSWER) -> Any:
        """One request; the JSON answer (None when empty) of at most ``limit`` bytes.
        ControlError names the call, the HTTP ``status`` and the answer."""
        url = self.base + path
        data = json.dumps({"value": value}).encode() if body else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if body
                                     else {})
        what = f"{method} {url}" + (f" {{'value': {value!r}}}" if body else "")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                text = r.read(limit + 1)
        except urllib.error.HTTPError as e:
            answer = e.read(4096).decode(errors="replace").strip()
            refused = ControlError(f"detector refused {what}: HTTP {e.code} {e.reason}: "
                                   f"{answer or '(no answer)'}")
            refused.status = e.code
            raise refused from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ControlError(f"detector unreachable for {what}: {reason} (is the DCU at "
                               f"{self.base}?)") from None
        if len(text) > limit:
            raise ControlError(f"{what}: an answer of more than {limit} bytes")
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise ControlError(f"{what}: the answer is not JSON: {text[:200]!r}") from None

    def version(self) -> str:
        v = self.call("GET", "/detector/api/version/")
        return str(v.get("value") if isinstance(v, dict) else v)

    def config(self, name: str) -> Any:
        v = self.call("GET", f"/detector/api/{API}/config/{name}")
        if not isinstance(v, dict) or "value" not in v:
            raise ControlError(f"GET {self.base}/detector/api/{API}/config/{name}: no value "
                               f"in the answer {v!r}")
        return v["value"]

    def pixel_mask(self) -> np.ndarray:
        """The detector's pixel mask ``(rows, cols)``, nonzero = exclude; ControlError when
        the call fails or the answer is no mask."""
        path = f"/detector/api/{API}/config/pixel_mask"
        v = self.call("GET", path, limit=MAX_MASK_BYTES * 4 // 3 + 4096)
        return decode_darray(v.get("value") if isinstance(v, dict) else None,
                             f"GET {self.base}{path}")

    def set_config(self, name: str, value: Any) -> Any:
        return self.call("PUT", f"/detector/api/{API}/config/{name}", value, body=True)

    def set_stream(self, name: str, value: Any) -> Any:
        return self.call("PUT", f"/stream/api/{API}/config/{name}", value, body=True)

    def command(self, name: str) -> Any:
        return self.call("PUT", f"/detector/api/{API}/command/{name}")


def decode_darray(value: Any, what: str) -> np.ndarray:
    """A SIMPLON ``darray`` (``{"__darray__", "type", "shape": [WIDTH, HEIGHT], "filters":
    ["base64"], "data"}``) as a ``(HEIGHT, WIDTH)`` array, as LiberTEM-live reads it;
    every field checked and the size bounded before decoding (ControlError)."""
    if not isinstance(value, dict) or "__darray__" not in value:
        raise ControlError(f"{what}: not a SIMPLON darray (no __darray__ in "
                           f"{str(value)[:200]!r})")
    shape, filters, data = value.get("shape"), value.get("filters"), value.get("data")
    if not (isinstance(shape, list) and len(shape) == 2 and
            all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_MASK_SIDE
                for n in shape)):
        raise ControlError(f"{what}: darray shape {shape!r}: expected [width, height], "
                           f"each 1..{MAX_MASK_SIDE}")
    try:
        dtype = np.dtype(str(value.get("type")))
    except TypeError:
        dtype = np.dtype("O")
    if dtype.kind not in "uib" or dtype.itemsize > 8:
        raise ControlError(f"{what}: darray type {value.get('type')!r}: expected an "
                           "integer type such as <u4")
    if filters != ["base64"]:
        raise ControlError(f"{what}: darray filters {filters!r}: only [\"base64\"] is read")
    width, height = shape
    nbytes = width * height * dtype.itemsize
    # base64 is 4 characters per 3 bytes; line breaks (as base64.encodebytes puts them) allowed
    if nbytes > MAX_MASK_BYTES or not isinstance(data, str) or \
            len(data) > (nbytes + 2) // 3 * 4 * 78 // 76 + 4:
        raise ControlError(f"{what}: darray of {width}x{height} {dtype}: "
                           f"{'no data' if not isinstance(data, str) else 'too large'} "
                           f"(at most {MAX_MASK_BYTES} bytes)")
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ControlError(f"{what}: darray data is not base64: {e}") from None
    if len(raw) != nbytes:
        raise ControlError(f"{what}: darray data of {len(raw)} bytes, {width}x{height} "
                           f"{dtype} is {nbytes}")
    return np.frombuffer(raw, dtype).reshape(height, width)


def images_of(mode: Any, nimages: Any, ntrigger: Any) -> int:
    """The images a series takes: one per trigger with ``exte``/``inte``, ``nimages``
    per trigger otherwise."""
    if mode in ("exte", "inte"):
        return int(ntrigger)
    return int(nimages) * int(ntrigger)


class Simplon(Control):
    """``simplon://HOST[:PORT]``: a DECTRIS detector's SIMPLON REST API."""

    scheme = "simplon"

    def __init__(self, url: str, settings: Dict[str, Any]) -> None:
        super().__init__(url, settings)
        host = url.partition("://")[2].strip("/")
        self.client = SimplonClient("http://" + (host if ":" in host else host + ":80"))
        self.mode: Optional[str] = None
        self.armed = False

    def prepare(self, scan_shape: Optional[Sequence[int]]) -> Tuple[int, ...]:
        c, s = self.client, self.settings
        c.version()                                  # reachable, speaks SIMPLON
        if not self.active:
            self.mode = c.config("trigger_mode")
            self.images = images_of(self.mode, c.config("nimages"), c.config("ntrigger"))
            try:
                self.scan_shape = resolve_scan_shape(scan_shape, self.images)
            except ValueError as e:
                raise ControlError(f"{self.url} (passive): the detector is set for "
                                   f"{self.images} images: {e}") from None
            return self.scan_shape
        self._whole_shape(scan_shape, "image")
        self.mode = s.get("trigger_mode") or c.config("trigger_mode")
        # the order LiberTEM-live uses: counts reset first, then the mode, then the count
        if s.get("trigger_mode"):
            c.set_config("ntrigger", 1)
            c.set_config("nimages", 1)
            c.set_config("trigger_mode", s["trigger_mode"])
        if self.mode in ("exte", "inte"):
            c.set_config("ntrigger", self.images)
        else:
            c.set_config("nimages", self.images)
        # count_time before frame_time: the manual's order for the best duty cycle
        for name in ("count_time", "frame_time", "compression"):
            if s.get(name) is not None:
                c.set_config(name, s[name])
        c.set_stream("mode", "enabled")
        for name in ("format", "header_detail"):
            v = s.get("stream_format" if name == "format" else name)
            if v is not None:
                c.set_stream(name, v)
        return self.scan_shape

    def start(self, hook: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
        c = self.client
        if self.active:
            self.armed = True              # from here on, any failure disarms
            try:
                answer = c.command("arm")
                if not isinstance(answer, dict) or not isinstance(answer.get("sequence id"),
                                                                  int):
                    raise ControlError(f"PUT {c.base}/detector/api/{API}/command/arm: no "
                                       f"'sequence id' in the answer {answer!r}")
                self.series = answer["sequence id"]
            except BaseException:
                self.finish()             # a failed arm leaves the detector disarmed
                raise
        info = {"series": self.series, "images": self.images,
                "scan_shape": list(self.scan_shape), "detector": self.url,
                "mode": "active" if self.active else "passive", "trigger_mode": self.mode}
        try:
            if hook is not None:
                hook(info)
            if self.active and self.mode == "ints":
                c.command("trigger")
            elif self.active and self.mode == "inte":
                for _ in range(self.images):
                    c.command("trigger")
        except BaseException:
            self.finish()
            raise
        return info

    def pixel_mask(self) -> Optional[np.ndarray]:
        return self.client.pixel_mask()

    def finish(self) -> None:
        if not self.armed:
            return
        with contextlib.suppress(ControlError):   # the job's own error (or result) matters
            self.client.command("disarm")
        self.armed = False
