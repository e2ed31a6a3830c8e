"""What a receiving job leaves per scan: ``<scan>.h5`` (written once) and ``<scan>.json``.

``<scan>.h5`` holds the analysis's datasets (:meth:`Analysis.write`) plus what the
job itself knows about every scan position:

``/frames_complete``
    bool (ny, nx): every sector of the frame arrived (from the loss accounting,
    not from the analysis: a frame that never arrived never reached it);
``/frames_received``
    bool (ny, nx): at least one sector arrived (complete or incomplete);

``/detector`` (Stream V2 only)
    what the series' ``start`` message said of the detector, named after NeXus
    NXmx / NXdetector: ``pixel_mask`` (uint32), ``flatfield`` (float32) of the kept
    channel, ``countrate_correction_lookup_table``, the ``*_enabled`` flags as
    ``*_applied``, ``threshold_energy``, ``sensor_material``, ``sensor_thickness``,
    ``x_pixel_size``/``y_pixel_size``, ``beam_center_x``/``_y``, ``count_time``,
    ``frame_time``, ``serial_number``, ``description``, and per channel
    ``<channel>_channel/{pixel_mask, flatfield, threshold_energy}``
    (NXdetector_channel); attribute ``pixel_mask_applied_by_receiver``;

and root attributes ``scan``, ``frames``, ``scan_shape``, ``frame_shape``,
``dtype``, ``sectors``, ``producers``, ``ok``, ``ended_by``, ``analysis``,
``loss_fraction`` and ``written_by`` (``mpistage``: :mod:`stager.outputs` tells the
project's results from other files by it). The file is built in memory
(``driver='core'``) and written to a temporary name then renamed: it appears whole, once.

``<scan>.json`` is the merged :class:`~streams.accounting.ScanReport`
(``to_dict``) plus ``outputs``, ``timing`` and ``lost_receivers`` when ranks were
lost. :func:`exit_status` is the job's verdict over all scans.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import numpy as np

from core import localfs
from stager.outputs import mark
from streams.accounting import ScanReport
from streams.analysis import Analysis

__all__ = ["write_scan", "write_report", "scan_ok", "exit_status"]


def write_scan(path: str, analysis: Analysis, partial: Any, report: ScanReport,
               detector: Optional[Dict[str, Any]] = None) -> int:
    """Write ``<scan>.h5`` at ``path`` (atomically); return its size in bytes.

    ``detector`` (Stream V2): ``{"start": Start, "channel": str,
    "pixel_mask_applied": bool}``, written to ``/detector``.
    """
    import h5py

    g = report.geometry
    received = (report.got.any(axis=1) & report.expected).reshape(g.scan_shape)
    with h5py.File(f"scan-{g.scan}", "w", driver="core", backing_store=False) as f:
        analysis.write(f, partial, g)
        f.create_dataset("frames_complete", data=report.frames_complete)
        f.create_dataset("frames_received", data=received)
        if detector is not None:
            _write_detector(f.create_group("detector"), **detector)
        f.attrs.update({"scan": g.scan, "frames": g.frames, "scan_shape": list(g.scan_shape),
                        "frame_shape": list(g.shape), "dtype": g.dtype, "sectors": g.sectors,
                        "producers": g.producers, "ok": report.ok, "ended_by": report.ended_by,
                        "analysis": analysis.name,
                        "loss_fraction": report.loss_fraction()})
        mark(f.attrs)
        f.flush()
        image = f.id.get_file_image()
    with localfs.AtomicFile(path, mode=0o644, hash=False) as af:
        af.write(image)
        af.commit()
    return len(image)


#: start-message field -> NXdetector field (scalars)
_NX_SCALARS = {"count_time": "count_time", "frame_time": "frame_time",
               "sensor_material": "sensor_material", "sensor_thickness": "sensor_thickness",
               "pixel_size_x": "x_pixel_size", "pixel_size_y": "y_pixel_size",
               "beam_center_x": "beam_center_x", "beam_center_y": "beam_center_y",
               "detector_serial_number": "serial_number",
               "detector_description": "description", "saturation_value": "saturation_value",
               "countrate_correction_enabled": "countrate_correction_applied",
               "flatfield_enabled": "flatfield_applied",
               "pixel_mask_enabled": "pixel_mask_applied",
               "virtual_pixel_interpolation_enabled": "virtual_pixel_interpolation_applied"}


def _write_detector(g: Any, start: Any, channel: Optional[str],
                    pixel_mask_applied: bool = False) -> None:
    g.attrs["NX_class"] = "NXdetector"
    g.attrs["pixel_mask_applied_by_receiver"] = bool(pixel_mask_applied)
    g.attrs["series_id"] = int(start.series_id)
    g.attrs["series_unique_id"] = start.series_unique_id
    if channel:
        g.attrs["channel"] = channel
    f = start.fields
    for key, nx in _NX_SCALARS.items():
        v = f.get(key)
        if isinstance(v, (bool, int, float, str)) and not isinstance(v, np.ndarray):
            g.create_dataset(nx, data=v)
    arrays = start.arrays()
    table = arrays.get("countrate_correction_lookup_table")
    if table is not None:
        g.create_dataset("countrate_correction_lookup_table", data=table)
    energy = f.get("threshold_energy")
    for c in start.channels:
        sub = g.create_group(f"{c}_channel")
        sub.attrs["NX_class"] = "NXdetector_channel"
        if isinstance(energy, dict) and isinstance(energy.get(c), (int, float)):
            sub.create_dataset("threshold_energy", data=float(energy[c]))
        for name in ("pixel_mask", "flatfield"):
            a = arrays.get(name, {}).get(c)
            if a is not None:
                sub.create_dataset(name, data=a, compression="gzip", shuffle=True)
                if c == channel:
                    g[name] = sub[name]      # the kept channel's, where NXmx looks
    if channel and isinstance(energy, dict) and isinstance(energy.get(channel), (int, float)):
        g.create_dataset("threshold_energy", data=float(energy[channel]))


def write_report(path: str, report: Optional[ScanReport], extra: Dict[str, Any]) -> None:
    """Write ``<scan>.json`` atomically: the report's dict updated with ``extra``."""
    d: Dict[str, Any] = report.to_dict() if report is not None else {}
    d.update(extra)
    mark(d)
    localfs.write_bytes_atomic(path, (json.dumps(d, indent=1, default=_plain) + "\n").encode(),
                               mode=0o644)


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def scan_ok(report: ScanReport, allow_loss: float = 0.0) -> bool:
    """True when the scan lost at most ``allow_loss`` of its frames (0: nothing missing)
    and its result is not invalid (:attr:`ScanReport.result_invalid`)."""
    if report.result_invalid:
        return False
    if allow_loss <= 0:
        return report.ok
    return report.loss_fraction() <= allow_loss


def exit_status(reports: List[ScanReport], wanted: int, allow_loss: float = 0.0) -> int:
    """0 when ``wanted`` scans were served and each is :func:`scan_ok`; else 1."""
    if len(reports) < wanted:
        return 1
    return 0 if all(scan_ok(r, allow_loss) for r in reports) else 1
