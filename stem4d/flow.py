"""One 4D-STEM flow for a live stream and for a staged (or spilled) dataset.

On a stream -- the receiving job drives the analysis on the nodes that hold
the frames, merges per node and then across nodes::

    mpirun -n 8 stager stream receive --analysis stem4d.flow --rendezvous RV --out OUT

On files -- the same :data:`ANALYSIS` through ``workflows``: one task per
partition of K frames (``foreach``), the ordered tree merge (``reduce_tree``),
one task that writes ``OUT/<scan>.h5`` in the same layout::

    python -m workflows run stem4d/flow.py --out OUT -- --frames scan.h5:/frames
    python -m workflows run stem4d/flow.py --out OUT -- --spilled '/dev/shm/sp/%n' --scan s1

``--set KEY=VALUE`` options of the stream command are the keyword arguments of
:class:`stem4d.analysis.Stem4D`; here they are ``--param KEY=VALUE``.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from stem4d.analysis import Stem4D
from workflows import app, foreach, reduce_tree

#: What ``stager stream receive --analysis stem4d.flow`` runs (a class: --set gives options).
ANALYSIS = Stem4D

_CACHE: Dict[str, Any] = {}


def _analysis(params: Dict[str, Any]) -> Stem4D:
    key = json.dumps(params, sort_keys=True)
    a = _CACHE.get(key)
    if a is None:
        a = _CACHE[key] = Stem4D(**params)
    return a


def add_arguments(parser: Any) -> None:
    parser.add_argument("--frames", metavar="FILE.h5:/DATASET",
                        help="frames (F, rows, cols) or (ny, nx, rows, cols)")
    parser.add_argument("--scan-shape", type=int, nargs=2, metavar=("NY", "NX"),
                        help="scan grid of a 3-D frames dataset")
    parser.add_argument("--spilled", metavar="DIR", help="a receiving job's --spill directory")
    parser.add_argument("--scan", default=None, help="scan name (output file name)")
    parser.add_argument("--partition-frames", type=int, default=64, metavar="K")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a Stem4D keyword argument (JSON value)")


@app
def process(ref: Any, params: Dict[str, Any]) -> Any:
    """One partition -> its partial (on whichever worker runs it)."""
    from streams.offline import read_partition

    frames, positions, complete = read_partition(ref)
    return _analysis(params).process_partition(frames, positions, complete)


@app
def merge(a: Any, b: Any) -> Any:
    return a.merge(b)


@app
def write(partial: Any, geometry: Any, params: Dict[str, Any], path: str) -> str:
    from streams.offline import offline_report
    from streams.job.output import write_scan

    partial = partial.compact()
    rep = offline_report(geometry, partial.complete(geometry.frames),
                         partial.seen(geometry.frames))
    write_scan(path, _analysis(params), partial, rep)
    return path


def _params(items: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for it in items:
        k, _, v = it.partition("=")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def _samples(refs: List[Any], frames: int, samples: int) -> Any:
    """The frames sampled for the thresholds (``stem4d.counting.sample_indices``)."""
    import numpy as np

    from streams.offline import read_partition
    from stem4d.counting import sample_indices

    want = set(sample_indices(frames, samples).tolist())
    out: List[Any] = []
    for ref in refs:
        if ref.kind == "dataset" and not any(ref.start <= i < ref.stop for i in want):
            continue
        data, positions, _ = read_partition(ref)
        out.extend(data[i] for i, p in enumerate(positions.tolist()) if p in want)
    return np.stack(out)


def main(args: Any) -> Any:
    from streams.offline import source_partitions

    params = _params(getattr(args, "param", []))
    a = Stem4D(**params)    # bad parameters fail here, before any task
    g, refs = source_partitions(args.frames, args.spilled, args.scan, args.scan_shape,
                                args.partition_frames)
    if a.counting and a.params["thresholds"] == "sampled" and not a.params["threshold_stats"] \
            and not a.params["threshold_frames"]:
        a.sample_thresholds(_samples(refs, g.frames, a.params["samples"]))
    # dtype, masks, dark, gain and thresholds checked here, before any task
    a.prepare(g)
    params = {k: v for k, v in a.params.items() if v is not None}
    os.makedirs(args.out, exist_ok=True)
    total = reduce_tree(merge, foreach(process, refs, params))
    return write(total, g, params, os.path.join(args.out, f"{g.scan}.h5"))
