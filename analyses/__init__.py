"""Analyses of scans, live and offline: one contract, its sources, its output, its runner.

An analysis (:class:`Analysis`, after LiberTEM's UDFs) is a few hooks on partitions
of K frames; it never sees sockets, nodes or executors. The same analysis runs on a
live stream (:mod:`streams`, ``stager stream receive --analysis``) and on files
(:mod:`analyses.runner`, ``python -m workflows run analyses.runner``):

- :mod:`analyses.contract` -- the hooks, :class:`PerFrame` partials, :class:`FrameSum`;
- :mod:`analyses.geometry` -- :class:`ScanGeometry` and its checks;
- :mod:`analyses.loading` -- an analysis by name (``pkg.module:NAME``, ``FILE.py``,
  ``udf:MODULE:CLASS``); :mod:`analyses.udf` adapts LiberTEM UDFs,
  :mod:`analyses.udfinputs` their ROI and corrections;
- :mod:`analyses.sources` -- files as partitions, one plug-in row per source;
- :mod:`analyses.output` -- ``<scan>.h5`` and :func:`finish`, the one end of a scan;
- :mod:`analyses.runner` -- the offline run on the workflow executors.

Importing this package loads nothing but this file: the names below are resolved on
first use (``streams.protocol`` imports the geometry without numpy).
"""
from __future__ import annotations

import lazy_loader

__all__ = ["Analysis", "PerFrame", "Chunk", "FrameSum", "ScanGeometry", "load_analysis",
           "AnalysisError", "GeometryError", "UDFError", "finish", "SOURCES"]

__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "contract": ["Analysis", "PerFrame", "Chunk", "FrameSum"],
    "geometry": ["ScanGeometry"],
    "loading": ["load_analysis"],
    "errors": ["AnalysisError", "GeometryError", "UDFError"],
    "output": ["finish"],
    "sources": ["SOURCES"],
})
