"""``<scan>.h5``: what an analysis of a scan leaves, live or offline, and the one finish.

Besides the analysis's datasets (:meth:`Analysis.write`), ``<scan>.h5`` holds its
:class:`Coverage` (``/frames_complete``, ``/frames_received``, root attributes:
``docs/stream-protocol.md`` section 10), a stream's ``/detector`` group where its
protocol knows one, and ``written_by`` (:mod:`core.outputs` tells the project's
results by it). Built in memory, written to a temporary name and renamed.
:func:`finish` is the one end of an analysis of a scan, live and offline.
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, NamedTuple, Optional

import numpy as np

from analyses.contract import Analysis
from analyses.geometry import ScanGeometry
from core import localfs
from core.outputs import mark

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
           detector: Optional[Callable[[Any], None]] = None) -> Written:
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
               detector: Optional[Callable[[Any], None]] = None) -> int:
    """Write ``<scan>.h5`` at ``path`` (atomically); its size in bytes. ``detector``
    writes the ``/detector`` group (a protocol's ``detector_metadata``)."""
    import h5py

    with h5py.File(f"scan-{g.scan}", "w", driver="core", backing_store=False) as f:
        analysis.write(f, partial, g)
        f.create_dataset("frames_complete", data=coverage.complete)
        f.create_dataset("frames_received", data=coverage.received)
        if detector is not None:
            detector(f.create_group("detector"))
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
