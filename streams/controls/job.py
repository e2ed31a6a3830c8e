"""The control in a receiving job: its flags, its preparation before the receivers
start (collective), its arm once they wait, its disarm at the end (rank 0)."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Optional

from core.mpi.agree import bcast_result
from core.options import resolve
from streams import protocols
from streams.controls import OPTIONS, Control, ControlError, load_hook, open_control
from streams.scanshape import parse_scan_shape

__all__ = ["add_arguments", "prepare", "start", "finish"]


def add_arguments(r: Any) -> None:
    """``--control URL`` and the controls' options on ``stager stream receive``."""
    r.add_argument("--control", metavar="URL",
                   help="arm the detector through its control interface: simplon://HOST[:PORT] "
                        "(DECTRIS SIMPLON REST); see --control-mode")
    for o in OPTIONS:
        r.add_argument(o.flag, dest=o.name, metavar=o.metavar, help=o.help)


def _scan_shape_key(args: Any) -> Optional[str]:
    """The chosen protocol's scan-shape option (``dectris_scan_shape``), if it has one."""
    proto = protocols.chosen(getattr(args, "protocol", None), getattr(args, "stream2", None))
    return next((o.name for o in proto.options if o.name.endswith("scan_shape")), None)


def _prepare(args: Any, given: Dict[str, Any]) -> Any:
    settings = resolve(OPTIONS, {o.name: getattr(args, o.name, None) for o in OPTIONS},
                       os.environ, what="control option")
    load_hook(settings["on_ready"])          # a bad hook fails before the detector is touched
    if getattr(args, "corrections", None) == "detector":
        # the pixel mask comes with the series' start, which carries it with "all" only
        if settings.get("header_detail") not in (None, "all"):
            raise ValueError(f"--corrections detector needs the detector's pixel mask: "
                             f"--header-detail all, not {settings['header_detail']}")
        settings["header_detail"] = "all"
    control = open_control(args.control, settings)
    key = _scan_shape_key(args)
    text = given.get(key) if key else None
    shape = control.prepare(parse_scan_shape(str(text)) if text else None)
    mask = _pixel_mask(control) if getattr(args, "corrections", None) == "detector" else None
    return control, key, shape, mask


def _pixel_mask(control: Control) -> Any:
    """The detector's pixel mask from its control interface, as booleans (True:
    excluded), for the scans whose start carries none; None if it gives none. A
    detector that refuses the call is said once: the starts must carry the mask then."""
    try:
        mask = control.pixel_mask()
    except ControlError as e:
        if e.status is None:          # unreachable, or an answer that is no mask: refused
            raise
        print(f"stager stream: WARNING: {control.url} gives no pixel mask ({e}); "
              "--corrections detector takes it from each scan's start", file=sys.stderr,
              flush=True)
        return None
    return None if mask is None else mask != 0


def prepare(comm: Any, args: Any, given: Dict[str, Any]) -> Optional[Control]:
    """Collective over `comm`: every rank must call. Without ``--control``: None.

    Rank 0 opens the control and prepares the detector; every rank gets the scan
    shape into ``given`` and, with ``--corrections detector``, the control's pixel
    mask (``detector_pixel_mask``), or the same error; rank 0 gets the control.
    """
    if not getattr(args, "control", None):
        return None
    got = bcast_result(comm, _prepare, args, given)
    control, key, shape, mask = got
    if key:
        given[key] = ",".join(str(n) for n in shape)
    if mask is not None:
        given["detector_pixel_mask"] = mask
    return control if comm.rank == 0 else None


def start(control: Optional[Control], log: Callable[[str], Any]) -> None:
    """Rank 0, every receiver waiting: arm (active), the hook, triggers."""
    if control is None:
        return
    info = control.start(load_hook(control.settings.get("on_ready")))
    log(f"stager stream: detector {control.url} {info['mode']}: series {info['series']}, "
        f"{info['images']} images, scan shape {info['scan_shape']}")


def finish(control: Optional[Control]) -> None:
    """Rank 0, the job over (or failed): disarm (active)."""
    if control is not None:
        control.finish()
