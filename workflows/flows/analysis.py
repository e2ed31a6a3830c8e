"""Any stream analysis on staged files: the offline twin of ``stager stream receive``.

The analysis a receiving job runs on a live stream (``--analysis SPEC``: the
per-frame sum, ``pkg.module:NAME``, ``FILE.py[:NAME]``, or LiberTEM UDFs as
``udf:MODULE:CLASS``) runs here on a staged dataset or on the partitions a
receiving job spilled: one task per partition of K frames (``foreach``), the
ordered tree merge with the analysis's own ``merge`` (``reduce_tree``), one task
that writes ``OUT/<scan>.h5`` in the stream's layout
(:func:`streams.job.output.write_scan`)::

    python -m workflows run workflows.flows.analysis --out OUT -- \\
        --frames scan.h5:/frames --analysis udf:libertem.udf.sum:SumUDF
    mpirun -n 4 python -m workflows run workflows.flows.analysis --emulate-nodes 2 \\
        --out OUT -- --spilled '/dev/shm/sp/%n' --scan s1 \\
        --analysis udf:mymodule:MyUDF --analysis-params '{"radius": 4}'

``--valid FILE.h5:/mask`` (bool, scan-shaped) marks frames as missing where it
is False: the analysis sees only the others, as on a stream that lost them.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

from workflows import app, foreach, reduce_tree

_CACHE: Dict[str, Any] = {}
_PREPARED: Dict[str, Any] = {}      # key -> the geometry its analysis was prepared for


def _analysis(spec: Optional[str], params: Any, geometry: Any = None) -> Any:
    """The analysis of (spec, params), loaded once per worker (and prepared for ``geometry``)."""
    from streams.loading import load_analysis

    key = json.dumps([spec, params], sort_keys=True)
    a = _CACHE.get(key)
    if a is None:
        a = _CACHE[key] = load_analysis(spec, params)
    if geometry is not None and _PREPARED.get(key) != geometry:
        a.prepare(geometry)
        _PREPARED[key] = geometry
    return a


def add_arguments(parser: Any) -> None:
    parser.add_argument("--frames", metavar="FILE.h5:/DATASET",
                        help="frames (F, rows, cols) or (ny, nx, rows, cols)")
    parser.add_argument("--scan-shape", type=int, nargs=2, metavar=("NY", "NX"),
                        help="scan grid of a 3-D frames dataset")
    parser.add_argument("--spilled", metavar="DIR", help="a receiving job's --spill directory")
    parser.add_argument("--scan", default=None, help="scan name (output file name)")
    parser.add_argument("--partition-frames", type=int, default=64, metavar="K")
    parser.add_argument("--valid", metavar="FILE.h5:/MASK",
                        help="bool scan mask: frames where it is False are missing")
    parser.add_argument("--analysis", metavar="SPEC", default=None,
                        help="as stager stream receive --analysis (default: per-frame sum)")
    parser.add_argument("--analysis-params", metavar="JSON", default=None,
                        help="the analysis's options (JSON object; a list for udf:A,B)")


def _read(ref: Any, valid: Optional[Tuple[str, str]]) -> Tuple[Any, Any, Any]:
    import numpy as np

    from streams.offline import read_partition

    frames, positions, complete = read_partition(ref)
    if valid is not None:
        import h5py

        with h5py.File(valid[0], "r") as f:
            mask = np.asarray(f[valid[1]][()], bool).reshape(-1)
        keep = mask[positions]
        frames, positions, complete = frames[keep], positions[keep], complete[keep]
    return frames, positions, complete


# Partials travel as ((spec, params), partial): a merge task on any worker knows its analysis.

@app
def process(ref: Any, spec: Optional[str], params: Any, geometry: Any,
            valid: Optional[Tuple[str, str]]) -> Any:
    """One partition -> its partial (on whichever worker runs it)."""
    frames, positions, complete = _read(ref, valid)
    partial = _analysis(spec, params, geometry).process_partition(frames, positions, complete)
    return (spec, params), partial


@app
def merge(a: Any, b: Any) -> Any:
    """The analysis's own merge (associative: the tree may group pairs any way)."""
    (spec, params), pa = a
    return (spec, params), _analysis(spec, params).merge(pa, b[1])


@app
def write(keyed: Any, geometry: Any, path: str) -> str:
    from streams.offline import offline_report
    from streams.job.output import write_scan

    (spec, params), partial = keyed
    analysis = _analysis(spec, params, geometry)
    if hasattr(partial, "compact"):
        partial = partial.compact()
    F = geometry.frames
    received = partial.received(F) if hasattr(partial, "received") else partial.seen(F)
    rep = offline_report(geometry, partial.complete(F), received)
    write_scan(path, analysis, partial, rep)
    why = analysis.problem(partial, geometry)
    if why:
        from streams.errors import StreamError

        raise StreamError(f"{path}: {why} (the file is written for inspection)")
    return path


def main(args: Any) -> Any:
    from streams.offline import parse_source, read_frames, source_partitions

    params = json.loads(args.analysis_params) if args.analysis_params else None
    a = _analysis(args.analysis, params)     # a bad analysis fails here, before any task
    valid = parse_source(args.valid) if args.valid else None
    g, refs = source_partitions(args.frames, args.spilled, args.scan, args.scan_shape,
                                args.partition_frames)
    wanted = a.samples(g)
    if wanted is not None:      # e.g. thresholds sampled from the scan, once, here
        params = {**(params or {}), **a.use_samples(read_frames(refs, wanted))}
    _analysis(args.analysis, params, g)      # dtype, masks, calibration: before any task
    os.makedirs(args.out, exist_ok=True)
    parts = foreach(process, refs, args.analysis, params, g, valid)
    total = reduce_tree(merge, parts)
    return write(total, g, os.path.join(args.out, f"{g.scan}.h5"))
