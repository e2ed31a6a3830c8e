"""``<scan>.h5``: what an analysis of a scan leaves, live or offline, and the one finish.

``<scan>.h5`` holds the analysis's datasets (:meth:`Analysis.write`) plus what the
run knows about every scan position (its :class:`Coverage`):

``/frames_complete``
    bool (ny, nx): every sector of the frame arrived (a stream's loss accounting;
    from files: the frame was read);
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


:func:`finish` is the one end of an analysis of a scan, live (``stager stream
receive``) and offline (:mod:`analyses.runner`): the merged partial compacted, the
analysis's ``problem``, ``<scan>.h5``, then the analysis's own files beside it.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

from analyses.contract import Analysis
from analyses.geometry import ScanGeometry
from core import localfs
from stager.outputs import mark

__all__ = ["Coverage", "Written", "finish", "write_scan"]


class Coverage(NamedTuple):
    """What ``<scan>.h5`` says of every scan position beside the analysis's datasets:
    frames complete and received (bool, scan-shaped) and the scan's verdict."""

    complete: np.ndarray
    received: np.ndarray
    ok: bool
    ended_by: str
    loss_fraction: float

    @classmethod
    def of_files(cls, geometry: ScanGeometry, complete: np.ndarray,
                 received: Optional[np.ndarray] = None) -> Coverage:
        """Frames read from files: ``complete`` (bool, frames) are complete, those only
        in ``received`` arrived incomplete (a spilled partition's)."""
        done = np.asarray(complete, bool)
        got = done if received is None else done | np.asarray(received, bool)
        return cls(done.reshape(geometry.scan_shape), got.reshape(geometry.scan_shape),
                   bool(done.all()), "end", 1.0 - int(done.sum()) / done.size)


class Written(NamedTuple):
    """What :func:`finish` wrote: ``<scan>.h5``, its size, the analysis's own files, its
    ``problem`` with the result ("" if none), and the result written (compacted)."""

    h5: str
    bytes: int
    files: List[str]
    problem: str
    partial: Any


def finish(analysis: Analysis, partial: Any, geometry: ScanGeometry, h5: str,
           coverage: Optional[Coverage] = None,
           detector: Optional[Dict[str, Any]] = None) -> Written:
    """The end of an analysis of a scan: the merged ``partial`` compacted, the analysis's
    ``problem`` asked, ``h5`` written (:func:`write_scan`), then the analysis's own files
    in its folder (which must exist). ``coverage``: a stream's accounting; default the
    frames the partial holds, as read from files."""
    if hasattr(partial, "compact"):
        partial = partial.compact()
    if coverage is None:
        F = geometry.frames
        coverage = Coverage.of_files(geometry, partial.complete(F), partial.received(F)
                                     if hasattr(partial, "received") else partial.seen(F))
    why = analysis.problem(partial, geometry)
    size = write_scan(h5, analysis, partial, geometry, coverage, detector)
    files = analysis.write_files(os.path.dirname(os.path.abspath(h5)), partial, geometry)
    return Written(h5, size, list(files), why, partial)


def write_scan(path: str, analysis: Analysis, partial: Any, g: ScanGeometry, coverage: Coverage,
               detector: Optional[Dict[str, Any]] = None) -> int:
    """Write ``<scan>.h5`` at ``path`` (atomically); return its size in bytes.

    ``detector`` (Stream V2): ``{"start": Start, "channel": str,
    "pixel_mask_applied": bool}``, written to ``/detector``.
    """
    import h5py

    with h5py.File(f"scan-{g.scan}", "w", driver="core", backing_store=False) as f:
        analysis.write(f, partial, g)
        f.create_dataset("frames_complete", data=coverage.complete)
        f.create_dataset("frames_received", data=coverage.received)
        if detector is not None:
            _write_detector(f.create_group("detector"), **detector)
        f.attrs.update({"scan": g.scan, "frames": g.frames, "scan_shape": list(g.scan_shape),
                        "frame_shape": list(g.shape), "dtype": g.dtype, "sectors": g.sectors,
                        "producers": g.producers, "ok": coverage.ok, "ended_by": coverage.ended_by,
                        "analysis": analysis.name,
                        "loss_fraction": coverage.loss_fraction})
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
