"""A scan's ``/detector`` group (NeXus NXmx / NXdetector names; ``docs/stream-protocol.md``
section 10) from a Stream V2 ``start`` message or another protocol's header made one
(Merlin's): :func:`write_detector`, handed to :func:`analyses.output.write_scan` by the
protocol's ``detector_metadata``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["write_detector", "socket_detector"]


def socket_detector(socket: Any, scan: str) -> Optional[Callable[[Any], None]]:
    """:func:`write_detector` of what ``socket.detector(scan)`` kept of the series' start
    (Stream V2, the legacy stream); None without one."""
    info = socket.detector(scan) if socket is not None else None
    return None if info is None else functools.partial(write_detector, **info)


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


def write_detector(g: Any, start: Any, channel: Optional[str],
                   pixel_mask_applied: bool = False) -> None:
    """Fill the h5py group ``g`` (the scan file's ``/detector``) from ``start``, keeping
    ``channel``'s arrays where NXmx looks; ``pixel_mask_applied``: this receiver zeroed
    the masked pixels."""
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
