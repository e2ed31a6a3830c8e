"""One 4D-STEM flow for a live stream and for a staged (or spilled) dataset.

The flow is a declaration: :data:`ANALYSIS`. On a stream the receiving job
drives it on the nodes that hold the frames, merges per node and then across
nodes::

    mpirun -n 8 stager stream receive --analysis stem4d.flow --rendezvous RV --out OUT

On files the library's offline flow (:mod:`analyses.runner`) runs the
same analysis -- one task per partition of K frames, the ordered tree merge,
one task that writes ``OUT/<scan>.h5`` in the same layout; thresholds
``sampled`` from the scan itself are computed once before any task
(:meth:`stem4d.analysis.Stem4D.samples`)::

    python -m workflows run stem4d/flow.py --out OUT -- --frames scan.h5:/frames
    python -m workflows run stem4d/flow.py --out OUT -- --spilled '/dev/shm/sp/%n' --scan s1

``--set KEY=VALUE`` options (on both commands) are the keyword arguments of
:class:`stem4d.analysis.Stem4D`.
"""
from __future__ import annotations

from typing import Any

from stem4d.analysis import Stem4D

__all__ = ["ANALYSIS", "add_arguments", "main"]

#: What ``stager stream receive --analysis stem4d.flow`` runs (a class: --set gives options).
ANALYSIS = Stem4D


def add_arguments(parser: Any) -> None:
    from analyses.runner import add_arguments as offline_arguments

    offline_arguments(parser)


def main(args: Any) -> Any:
    from analyses import runner as offline

    args.analysis = args.analysis or "stem4d.flow"
    return offline.main(args)
