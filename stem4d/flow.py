"""One 4D-STEM flow for a live stream and for a staged (or spilled) dataset.

The flow is a declaration: :data:`ANALYSIS`. On a stream the receiving job
drives it on the nodes that hold the frames, merges per node and then across
nodes::

    mpirun -n 8 stager stream receive --analysis stem4d.flow --rendezvous RV --out OUT

On files the library's offline flow (:mod:`workflows.flows.analysis`) runs the
same analysis -- one task per partition of K frames, the ordered tree merge,
one task that writes ``OUT/<scan>.h5`` in the same layout; thresholds
``sampled`` from the scan itself are computed once before any task
(:meth:`stem4d.analysis.Stem4D.samples`)::

    python -m workflows run stem4d/flow.py --out OUT -- --frames scan.h5:/frames
    python -m workflows run stem4d/flow.py --out OUT -- --spilled '/dev/shm/sp/%n' --scan s1

``--set KEY=VALUE`` options of the stream command are the keyword arguments of
:class:`stem4d.analysis.Stem4D`; here they are ``--param KEY=VALUE`` (or the
offline flow's ``--analysis-params JSON``).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List

from stem4d.analysis import Stem4D

#: What ``stager stream receive --analysis stem4d.flow`` runs (a class: --set gives options).
ANALYSIS = Stem4D


def add_arguments(parser: Any) -> None:
    from workflows.flows import analysis as offline

    offline.add_arguments(parser)
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a Stem4D keyword argument (JSON value)")


def _params(items: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for it in items:
        k, _, v = it.partition("=")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def main(args: Any) -> Any:
    from workflows.flows import analysis as offline

    params = json.loads(args.analysis_params) if args.analysis_params else {}
    params.update(_params(args.param))
    args.analysis = args.analysis or "stem4d.flow"
    args.analysis_params = json.dumps(params)
    return offline.main(args)
