"""Detector controls: who arms the detector, and how the job learns the scan.

``--control simplon://DCU[:PORT]`` (DECTRIS's SIMPLON REST API) or
``merlin://HOST:6341``, one row of :data:`ROWS` per URL scheme. Active (default):
configure before the receivers start, arm once they are connected, call the
``--on-ready`` hook, trigger, and disarm at the end or on any failure; passive:
read what another program armed and call the hook (docs/guide/coming-from-libertem-live.md).
Errors are :class:`ControlError` naming the call and the answer; only rank 0 talks
to the detector.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from core.errors import UnknownName
from core.options import parse_choice, parse_number, parse_text
from core.table import Table
from streams.errors import StreamError
from streams.protocols import ProtocolOption

__all__ = ["ControlError", "Control", "ROWS", "OPTIONS", "open_control", "load_hook"]


class ControlError(StreamError):
    """The detector's control interface refused or failed a call (named, with its answer).
    ``status``: the HTTP status of a call the detector answered with an error."""

    status: Optional[int] = None


class Control:
    """One detector's control interface (``SCHEME://HOST[:PORT]``, the resolved
    :data:`OPTIONS` as ``settings``): subclass it, set :attr:`scheme`."""

    scheme: str = ""

    def __init__(self, url: str, settings: Dict[str, Any]) -> None:
        self.url, self.settings = url, dict(settings)
        self.active = settings.get("control_mode", "active") == "active"
        self.series: Optional[int] = None
        self.images = 0
        self.scan_shape: Tuple[int, ...] = ()

    def prepare(self, scan_shape: Optional[Sequence[int]]) -> Tuple[int, ...]:
        """Before the receivers start: configure the detector for ``scan_shape``
        (active; no ``-1`` then) or read how many images it takes (passive; one
        ``-1`` resolved from them). Returns the scan shape."""
        raise NotImplementedError

    def _whole_shape(self, scan_shape: Optional[Sequence[int]], what: str) -> None:
        """Active: keep ``scan_shape`` and its product as :attr:`images` (the ``what``
        count the control sets); refused with a ``-1`` or none."""
        if scan_shape is None or -1 in scan_shape:
            raise ControlError(f"{self.url} (active): the control sets the {what} count from "
                               f"the scan shape: give it whole (no -1), got {scan_shape}")
        self.scan_shape = tuple(int(n) for n in scan_shape)
        self.images = math.prod(self.scan_shape)

    def start(self, hook: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
        """Once every receiver waits: arm (active), call ``hook`` with what is known
        ("ready for data"), trigger (active, internal trigger). Returns that dict."""
        raise NotImplementedError

    def pixel_mask(self) -> Optional[Any]:
        """The detector's pixel mask ``(rows, cols)``, nonzero = excluded, or None when the
        interface has none (Merlin's); ControlError when refused or nonsense."""
        return None

    def finish(self) -> None:
        """At the end of the job, or on any failure: disarm (active). Never raises."""


#: scheme -> "module:Class" (the control's class, made per job with the URL and settings)
ROWS: Table[Any] = Table("control scheme", {
    "simplon": "streams.controls.simplon:Simplon",
    "merlin": "streams.controls.merlin:MerlinControl",
}, hint="a URL SCHEME://HOST[:PORT]")

#: the controls' options (flags of ``stager stream receive``)
OPTIONS = (
    ProtocolOption("control_mode", "active", parse_choice("active", "passive"),
                   "STAGER_STREAM_CONTROL_MODE",
                   "with --control: active (configure, arm, trigger, disarm) or passive (wait "
                   "for another program's arm)", "MODE"),
    ProtocolOption("trigger_mode", None, parse_choice("exte", "exts", "inte", "ints"),
                   "STAGER_STREAM_TRIGGER_MODE",
                   "with --control: the detector's trigger mode (default: leave it)", "MODE"),
    ProtocolOption("count_time", None, parse_number(0, strict=True), "STAGER_STREAM_COUNT_TIME",
                   "with --control: exposure per image, seconds", "S"),
    ProtocolOption("frame_time", None, parse_number(0, strict=True), "STAGER_STREAM_FRAME_TIME",
                   "with --control: time between image starts, seconds (>= count time)", "S"),
    ProtocolOption("compression", None, parse_choice("bslz4", "lz4", "none"),
                   "STAGER_STREAM_COMPRESSION", "with --control: the detector's compression",
                   "ALG"),
    ProtocolOption("stream_format", None, parse_choice("legacy", "cbor"),
                   "STAGER_STREAM_STREAM_FORMAT",
                   "with --control: the stream's format (legacy for --protocol dectris-legacy, "
                   "cbor for stream2)", "FORMAT"),
    ProtocolOption("header_detail", None, parse_choice("all", "basic", "none"),
                   "STAGER_STREAM_HEADER_DETAIL",
                   "with --control: the stream's header_detail (all: pixel mask, flatfield)",
                   "DETAIL"),
    ProtocolOption("on_ready", None, parse_text, "STAGER_STREAM_ON_READY",
                   "with --control: a Python hook MODULE:FUNCTION or FILE.py:FUNCTION called "
                   "with {series, images, scan_shape, detector} once the detector is ready "
                   "for data (start the scan there)", "HOOK"),
)


def open_control(url: str, settings: Dict[str, Any]) -> Control:
    """The control for ``url`` (its scheme a row of :data:`ROWS`); ValueError naming the
    known schemes."""
    scheme, sep, rest = url.partition("://")
    if not sep or not rest.strip("/"):
        raise ValueError(f"--control {url!r}: expected SCHEME://HOST[:PORT] "
                         f"({', '.join(s + '://' for s in ROWS)})")
    try:
        cls = ROWS.load(scheme)
    except UnknownName as e:
        raise ValueError(f"--control {url!r}: {e}") from None
    return cls(url, settings)  # type: ignore[no-any-return]


def load_hook(spec: Optional[str]) -> Optional[Callable[[Dict[str, Any]], Any]]:
    """``MODULE:FUNCTION`` or ``FILE.py:FUNCTION`` -> the function (None: no hook);
    ValueError naming the spec when it is no importable callable."""
    if not spec:
        return None
    from core.table import load_object

    try:
        fn = load_object(spec)
    except (ImportError, OSError, StreamError) as e:
        raise ValueError(f"--on-ready {spec!r}: {type(e).__name__}: {e}") from None
    if not callable(fn):
        raise ValueError(f"--on-ready {spec!r}: {spec.rpartition(':')[2]} is not callable")
    return fn  # type: ignore[no-any-return]
