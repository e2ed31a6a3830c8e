"""Any stream analysis on files: the offline twin of ``stager stream receive``.

:func:`run_analysis` is the one runner of an analysis on files
(:mod:`analyses.sources`; ``stem4d/flow.py``, ``hedm/ff.py``, ``hedm/nf.py``): one
task per partition of K frames, placed on the node holding it (:func:`place`), the
ordered tree merge, one task writing ``<scan>.h5`` (:func:`analyses.output.finish`).
``python -m workflows run analyses.runner --out OUT -- --frames FILE.h5:/DATASET`` (or
``--spilled DIR --scan NAME``, or ``--tpx3 FILE``, a recorded TPX3 stream) takes the
receiving job's ``--analysis`` options.
``--valid FILE.h5:/mask`` marks frames missing where False, as on a lossy stream;
``--udf-roi`` and ``--corrections`` are ``stager stream receive``'s. A result of
no use (``Analysis.problem``) fails the run after writing. ``%n`` in a path or a
string parameter is the node's name where the task runs.
"""
from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import replace
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from workflows import app, on_this_node, reduce_tree, this_node, worker_name
from workflows.errors import FlowError

__all__ = ["run_analysis", "place", "Run", "add_arguments", "main"]

_CACHE: Dict[str, Any] = {}
_PREPARED: Dict[str, Any] = {}      # key -> the geometry its analysis was prepared for


def _here(value: Any) -> Any:
    """``value`` with ``%n`` in every string resolved for this node."""
    if isinstance(value, str):
        return on_this_node(value)
    if isinstance(value, dict):
        return {k: _here(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_here(v) for v in value)
    return value


def _analysis(spec: Optional[str], params: Any, geometry: Any = None) -> Tuple[Any, bool]:
    """The analysis of (spec, params), loaded once per worker (and prepared for ``geometry``),
    and whether this call loaded or prepared it (read its inputs: dark, masks...)."""
    from analyses.loading import load_analysis

    key = json.dumps([spec, params], sort_keys=True, default=str)
    a, fresh = _CACHE.get(key), False
    if a is None:
        # (spec, --udf-roi, --corrections) when those are given (udf: analyses)
        name, udf = (spec[0], spec[1:]) if isinstance(spec, (tuple, list)) else (spec, ())
        a, fresh = load_analysis(name, _here(params),
                                 **dict(zip(("roi", "corrections"), _here(tuple(udf))))), True
        _CACHE[key] = a
    if geometry is not None and _PREPARED.get(key) != geometry:
        a.prepare(geometry)
        _PREPARED[key], fresh = geometry, True
    return a, fresh


def add_arguments(parser: Any) -> None:
    parser.add_argument("--frames", metavar="FILE.h5:/DATASET",
                        help="frames (F, rows, cols) or (ny, nx, rows, cols)")
    parser.add_argument("--scan-shape", type=int, nargs=2, metavar=("NY", "NX"),
                        help="scan grid of a 3-D frames dataset")
    parser.add_argument("--spilled", metavar="DIR", help="a receiving job's --spill directory")
    parser.add_argument("--tpx3", metavar="FILE", help="a recorded ASI TPX3 stream "
                        "(streams.simulate --dump): its first acquisition, as CSR")
    parser.add_argument("--scan", default=None, help="scan name (output file name)")
    parser.add_argument("--partition-frames", type=int, default=64, metavar="K")
    parser.add_argument("--valid", metavar="FILE.h5:/MASK",
                        help="bool scan mask: frames where it is False are missing")
    parser.add_argument("--analysis", metavar="SPEC", default=None,
                        help="as stager stream receive --analysis (default: per-frame sum)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the analysis (JSON value), as stager stream receive")
    parser.add_argument("--analysis-params", metavar="JSON", default=None,
                        help="the analysis's options (JSON object; a list for udf:A,B)")
    from analyses.udfinputs import add_arguments as add_udf_arguments

    add_udf_arguments(parser)     # --udf-roi, --corrections: as stager stream receive


def _read(ref: Any, valid: Optional[Tuple[str, str]], hard: bool) -> Tuple[Any, bool]:
    """``(frames, positions, complete)`` of ``ref`` on this node, and whether a scattered
    file was read from the shared filesystem (its copy not here)."""

    from analyses.sources import frame_files, read_partition

    files, fell = [on_this_node(f) for f in frame_files(ref)], False
    if ref.shared:
        from stager.locality import read_path

        got = [read_path(c, s, this_node(), hard) for c, s in zip(files, ref.shared)]
        files, fell = [p for p, _ in got], any(f for _, f in got)
    frames, positions, complete = read_partition(ref, files)
    if valid is not None:
        keep = _mask(*valid, os.stat(valid[0]).st_mtime_ns)[positions]
        frames, positions, complete = frames[keep], positions[keep], complete[keep]
    return (frames, positions, complete), fell


@functools.lru_cache(maxsize=2)
def _mask(path: str, dataset: str, _mtime: int) -> Any:
    """The ``--valid`` mask, flat, read once per worker (not once per partition)."""
    import h5py
    import numpy as np

    with h5py.File(path, "r") as f:
        return np.asarray(f[dataset][()], bool).reshape(-1)


# Partials travel as ((spec, params), partial, rows): a merge task on any worker knows its
# analysis; rows are the partitions' timings, (position, worker, read_s, compute_s,
# prepared, read_shared) -- prepared: this task loaded the analysis (its inputs) on its worker.

@app
def process(ref: Any, spec: Optional[str], params: Any, geometry: Any,
            valid: Optional[Tuple[str, str]] = None, hard: bool = False,
            after: Any = None) -> Any:
    """One partition -> its partial (on whichever worker runs it; once ``after`` is done)."""
    t0 = time.perf_counter()
    a, fresh = _analysis(spec, params, geometry)
    (frames, positions, complete), fell = _read(ref, valid, hard)
    t1 = time.perf_counter()
    from analyses.sparse import frames_for

    # CSR (a tpx3 source) stays CSR for an analysis that takes it, as live (streams.job)
    partial = a.process_partition(frames_for(a, frames), positions, complete)
    row = (ref.start, worker_name(), round(t1 - t0, 6), round(time.perf_counter() - t1, 6),
           fresh, fell)
    return (spec, params), partial, [row]


@app
def merge(a: Any, b: Any) -> Any:
    """The analysis's own merge (associative: the tree may group pairs any way)."""
    key, pa, rows = a
    return key, _analysis(*key)[0].merge(pa, b[1]), rows + b[2]


@app
def write(keyed: Any, geometry: Any, path: str) -> Dict[str, Any]:
    """:func:`analyses.output.finish` into ``path`` (``%n``: this node): what was written
    and the analysis's ``problem`` ("" if none)."""
    from analyses.output import finish

    (spec, params), partial, _ = keyed
    path = on_this_node(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    out = finish(_analysis(spec, params, geometry)[0], partial, geometry, path)
    return {"node": this_node(), "h5": path, "bytes": out.bytes, "files": out.files,
            "frames": int(partial.complete(geometry.frames).sum()), "problem": out.problem}


class Run(NamedTuple):
    """Futures of the write and of the merged ``(key, partial, rows)`` (rows: see
    :func:`process`), and each phase's (``partitions``, ``reduce``, ``write``)."""

    written: Any
    merged: Any
    phases: Dict[str, List[Any]]


def run_analysis(spec: Optional[str], params: Any, refs: Sequence[Any], geometry: Any,
                 path: str, valid: Optional[Tuple[str, str]] = None,
                 hard: bool = False, after: Any = None, overwrite: bool = False,
                 files: Sequence[str] = ()) -> Run:
    """Run the analysis ``spec`` (``params`` may hold ``%n``; ``(spec, roi, corrections)``
    for ``udf:``) over ``refs`` of a scan of ``geometry`` into ``path``.

    One task per ref (on ``ref.node``: softly, or only there with ``hard``; after
    ``after``), the ordered tree merge, one :func:`write`. Returns at once;
    ``Run.written.result()`` is ``{"node", "h5", "bytes", "files", "frames",
    "problem"}``. Raises core.errors.OutputError before any task when an output would
    overwrite an input or a file this project did not write
    (:func:`core.outputs.check_outputs`).
    """
    from core.outputs import check_outputs
    from analyses.sources import frame_files

    inputs = [on_this_node(f) for ref in refs for f in frame_files(ref) + list(ref.shared)]
    h5 = on_this_node(path)
    check_outputs([h5] + [os.path.splitext(h5)[0] + f for f in files],
                  inputs + ([valid[0]] if valid else []), overwrite=overwrite)
    tasks = [(process.on(ref.node, hard=hard) if ref.node else process)(
        ref, spec, params, geometry, valid, hard, after) for ref in refs]
    merges: List[Any] = []
    merged = reduce_tree(merge, tasks, ordered=True, launched=merges)
    written = write(merged, geometry, path)
    return Run(written, merged, {"partitions": tasks, "reduce": merges, "write": [written]})


def place(refs: Sequence[Any], args: Any) -> List[Any]:
    """``refs`` placed where the stage (``args.stage_report``) put their files: on the node
    holding a scattered file, or a ``scatter ... h5`` frame range. FlowError when one
    scattered file holds frames of several partitions."""
    w = _staged(args)
    if w is None:
        return list(refs)
    from analyses.sources import frame_files
    from analyses.sources.frames import is_series
    from analyses.sources.staged import staged_partitions

    out: List[Any] = []
    ranged = {}     # (file, dataset) of a scattered h5 dataset -> its partitions
    for ref in refs:
        key = (ref.path, ref.dataset)
        if ref.kind == "dataset" and (key in ranged or _has_ranges(w, ref.path)):
            if key not in ranged:
                ranged[key] = staged_partitions(w, ref.path, ref.dataset, ref.stop - ref.start)
                out += ranged[key]
            continue
        files = frame_files(ref)
        src = [w.source_at(f) for f in files]
        held = [s for s in src if s is not None and len(w.nodes(s)) < len(w.names)]
        if held and not (ref.kind == "frames" and is_series(ref.path)):
            raise FlowError(f"{ref.path} is scattered, but it holds every frame: a scatter "
                            "block spreads files, so give one file per frame (a TIFF series, "
                            "a %d field in the file name), scatter the dataset as h5 (frame "
                            "ranges) or broadcast it")
        out.append(replace(ref, node=w.node(held[0]), shared=tuple(
            s or f for s, f in zip(src, files))) if held else ref)
    return out


def _staged(args: Any) -> Any:
    """Where the run's stage put each file (:class:`stager.locality.Where`) if it scattered
    any, else None: from the plan the stage ran (``args.stage_report.plan``), not planned
    again; a report without one (made elsewhere) has its spec planned again."""
    rep, spec = getattr(args, "stage_report", None), getattr(args, "stage_spec", None)
    plan = getattr(rep, "plan", None) or spec
    if rep is None or not plan:
        return None
    from stager import where

    w = where(plan, rep.nodes)
    return w if w.plan.scatters else None


def _has_ranges(w: Any, path: str) -> bool:
    try:
        return bool(w.frame_ranges(path))
    except KeyError:
        return False


def _absolute(path: Optional[str]) -> Optional[str]:
    """A file path the workers read, made absolute (``none``, ``%n``-free names kept)."""
    if path is None or path == "none":
        return path
    return path if os.path.isabs(path) else os.path.abspath(path)


def main(args: Any) -> Any:
    from analyses.errors import AnalysisError
    from analyses.loading import analysis_options
    from analyses.sources import parse_source, read_frames, source_partitions

    params = analysis_options(args.analysis_params, args.set)
    spec = args.analysis
    if args.corrections == "detector":
        raise AnalysisError("--corrections detector: files have no detector start message; give "
                          "the mask the receiving job kept, --corrections "
                          "OUT/SCAN.h5:/detector/pixel_mask (or a FILE.npy)")
    if args.udf_roi is not None or args.corrections not in (None, "none"):
        spec = (spec, _absolute(args.udf_roi), _absolute(args.corrections))
    a, _ = _analysis(spec, params)  # a bad analysis fails here, before any task
    valid = parse_source(args.valid) if args.valid else None
    g, refs = source_partitions(args.frames, args.spilled, args.scan, args.scan_shape,
                                args.partition_frames, getattr(args, "tpx3", None))
    wanted = a.samples(g)
    if wanted is not None:      # e.g. thresholds sampled from the scan, once, here
        params = {**(params or {}), **a.use_samples(read_frames(refs, wanted))}
    _analysis(spec, params, g)      # dtype, masks, calibration: before any task
    run = run_analysis(spec, params, place(refs, args), g,
                       os.path.join(args.out, f"{g.scan}.h5"), valid,
                       overwrite=getattr(args, "overwrite", False), files=a.files)
    why = run.written.result()["problem"]
    if why:
        raise AnalysisError(f"{run.written.result()['h5']}: {why} (the file is written for "
                          "inspection)")
    return run.written
