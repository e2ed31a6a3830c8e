"""Analyses of scans, live and offline: one contract, its sources, its output, its runner.

An analysis (:class:`Analysis`, after LiberTEM's UDFs) never sees sockets, nodes or
executors: the same one runs on a stream (:mod:`streams`) and on files
(:mod:`analyses.runner`) into the same ``<scan>.h5``. Names load on first use.
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
