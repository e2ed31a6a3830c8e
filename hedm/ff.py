"""FF-HEDM peak search: staged frames + dark -> peaks per frame -> tree merge -> HDF5, CSV, PNG.

Run it like the NF workflow::

    mpirun -n 4 python -m workflows run hedm/ff.py \\
        --stage hedm/hooks/ff.hook --emulate-nodes 2 --out OUT -- \\
        --params '/dev/shm/mpistage-ff/%n/ff.params' --results '/dev/shm/mpistage-ff/%n/results'

The graph:

1. **frames**: one task per frame reads it from its node's staged copy (a GE
   or HDF5 file holding every frame, or a TIFF series) and searches it with
   the analysis :class:`hedm.ffpeaks.FFPeaks` (the dark through the per-worker
   cache: read once per worker);
2. **reduce**: an ordered ``reduce_tree`` merges the partials (the analysis's merge);
3. **write**: one task writes the analysis's tables as ``<OutputFileName>.h5``,
   ``.csv`` and ``.png`` into the node-local results directory (``--results``);
4. **drain** (``finalize``): results to ``OUT``, node-local copies removed.

Steps 1-3 are what ``stager stream receive --analysis hedm.ffpeaks`` runs live.

On a **scatter** block (``hedm/hooks/ff_scatter.hook``: each frame file of a TIFF
series on one node, for datasets larger than one node's storage), each frame's
task is placed on the node holding that frame (``stager.where``) and reads the
copy there; placed softly, a task that runs elsewhere (its node's workers busy)
or finds its copy gone reads the frame from the shared filesystem instead, and
``ff_run.json`` counts it (``scatter``). ``--hard-placement`` makes such a task
fail, naming node and file. The results equal the broadcast run's.

For a GE/HDF5 input, frame numbers are indices into the file
(``RawStartNr`` .. ``RawStartNr + NrFilesPerSweep - 1``); for a TIFF series
they are the file numbers. ``OUT/ff_run.json`` records phases and cache hits.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from workflows import app, on_this_node, reduce_tree, this_node
from hedm.common import frame_reader, is_series, phase_spans, recording, worker_name
from hedm.ffpeaks import SCHEMA, FFPeaks, kernel_params, load_dark, read_ff_params
from hedm.output import plot_ff, write_csv, write_h5
from hedm.params import ParamError, add_flow_arguments, flag_overrides, relative_to
from hedm.run import drain_results, log_summary, stage_dict, write_json

__all__ = ["SCHEMA", "add_arguments", "main", "finalize", "read_ff_params", "load_dark",
           "kernel_params"]


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "FF", SCHEMA)
    parser.add_argument("--hard-placement", action="store_true",
                        help="scattered frames: run each frame's task only on the node "
                             "holding it (default: there if it can, else elsewhere, "
                             "reading the shared copy)")


# -- tasks ---------------------------------------------------------------------------
@app
def find_ff_peaks(frame: int, source: str, first: int, n: int, shape, dark: str,
                  params: Dict[str, Any], shared: Optional[str] = None,
                  hard: bool = False) -> Dict[str, Any]:
    """One frame from this node's staged copy -> the analysis's partial (+ a log row).

    ``shared``: the frame was scattered (its own file, on some nodes only); the
    task reads this node's copy, else the shared file (soft) or fails (``hard``).
    """
    t0 = time.perf_counter()
    fell = False
    if shared is None:
        reader, index_of = frame_reader(on_this_node(source), first, n, shape)
        image = reader.read(index_of(frame))
    else:
        from kernels import open_frames
        from stager.locality import read_path

        path, fell = read_path(on_this_node(frame_file(source, frame)), shared, this_node(),
                               hard)
        image = open_frames(path, dtype="uint16").read(0)
    analysis = FFPeaks(params, dark=on_this_node(dark))
    _, hit = analysis.dark(shape)
    t1 = time.perf_counter()
    partial = analysis.process_partition(image[None], np.array([frame - first]), np.ones(1, bool))
    log = (frame, worker_name(), round(t1 - t0, 6), round(time.perf_counter() - t1, 6), bool(hit))
    return {"partial": partial, "log": [log], "shared_reads": [frame] if fell else []}


@app
def merge_ff(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Merge two partials (the analysis's merge) and their log rows."""
    return {"partial": a["partial"].merge(b["partial"]), "log": a["log"] + b["log"],
            "shared_reads": a["shared_reads"] + b["shared_reads"]}


@app
def write_ff(merged: Dict[str, Any], params: Dict[str, Any], dark: str, shape,
             results: str) -> Dict[str, Any]:
    """Write the HDF5 table, the CSV and the PNG into this node's results directory."""
    out_dir = on_this_node(results)
    os.makedirs(out_dir, exist_ok=True)
    analysis = FFPeaks(params, dark=on_this_node(dark))
    table = analysis.tables(merged["partial"], params["NrFilesPerSweep"])
    base = os.path.join(out_dir, params["OutputFileName"])
    n_frames = len(table["frames"])
    h5 = write_h5(base + ".h5", {"peaks": table["peaks"], "frames": table["frames"],
                                 "dark": analysis.dark(shape)[0]},
                  params, {"workflow": "hedm_ff", "n_frames": n_frames})
    csv = write_csv(base + ".csv", table["peaks"])
    png = plot_ff(base + ".png", table["peaks"], tuple(shape), table["frames"])
    return {"node": this_node(), "h5": h5, "csv": csv, "png": png,
            "peaks": len(table["peaks"]), "frames": n_frames}


# -- the graph -------------------------------------------------------------------------
def main(args):
    """Build and run the FF graph; return the write task's future (already done)."""
    t_origin = time.time()
    p = read_ff_params(on_this_node(args.params), flag_overrides(args, SCHEMA))
    folder = relative_to(p["DataDirectory"], args.params)
    source = os.path.join(folder, p["InputPattern"])
    dark = os.path.join(folder, p["Dark"])
    first, n = p["RawStartNr"], p["NrFilesPerSweep"]
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    for path in [dark, frame_file(source, first) if is_series(source) else source]:
        if not os.path.isfile(on_this_node(path)):
            raise ParamError(f"{on_this_node(path)} does not exist on this node; check "
                             "DataDirectory/InputPattern/Dark or stage it (--stage SPEC)")
    out = getattr(args, "out", None) or os.getcwd()
    results = args.results or out

    frames = range(first, first + n)
    placed = scattered_frames(args, source, frames)
    hard = bool(getattr(args, "hard_placement", False))
    per_frame = [find_ff_peaks.on(placed[f][0], hard=hard)(f, source, first, n, shape, dark, p,
                                                           placed[f][1], hard)
                 if f in placed else find_ff_peaks(f, source, first, n, shape, dark, p)
                 for f in frames]
    merge, merges = recording(merge_ff)
    merged = reduce_tree(merge, per_frame, ordered=True)
    written = write_ff(merged, p, dark, shape, results)
    summary = written.result()  # wait here so the phase times below are complete
    record = {
        "workflow": "hedm_ff", "executor": getattr(args, "executor", None),
        "ranks": getattr(args, "ranks", None), "workers": getattr(args, "workers", None),
        "params": p, "result": summary, "stage": stage_dict(args),
        "phases": phase_spans({"frames": per_frame, "reduce": merges, "write": [written]},
                              t_origin),
        "frame_log": log_summary(merged.result()["log"], "dark"),
    }
    if placed:
        from workflows.runtime import active_runtime

        rt = active_runtime()
        record["scatter"] = {"frames_placed": len(placed), "placed": rt.placed,
                             "ran_where_placed": rt.placed_here,
                             "read_shared": merged.result()["shared_reads"]}
    write_json(os.path.join(out, "ff_run.json"), record)
    return written


def frame_file(series: str, frame: int) -> str:
    """The file of ``frame`` in a TIFF series (``%d`` field in the file name only, so a
    ``%n`` in its folder stays for :func:`workflows.on_this_node`)."""
    folder, name = os.path.split(series)
    return os.path.join(folder, name % frame)


def scattered_frames(args, source: str, frames) -> Dict[int, Tuple[str, str]]:
    """Frames whose file a scatter block put on some nodes only: frame -> (node, shared path).

    Empty when the run staged nothing or only broadcast blocks. Plans the staged spec
    again on this one process (what ``stager.where`` does) to learn the placement.
    """
    rep, spec = getattr(args, "stage_report", None), getattr(args, "stage_spec", None)
    if rep is None or not spec:
        return {}
    from stager import where

    w = where(spec, rep.nodes)
    if not w.plan.scatters:
        return {}
    out: Dict[int, Tuple[str, str]] = {}
    for f in frames:
        src = w.source_at(frame_file(source, f) if is_series(source) else source)
        if src is not None and len(w.nodes(src)) < len(rep.nodes):
            if not is_series(source):
                raise ParamError(f"{source} is scattered, but it holds every frame: a scatter "
                                 "block spreads files, so give one file per frame (a TIFF "
                                 "series, InputPattern with a %d field) or broadcast it")
            out[f] = (w.node(src), src)
    return out


def finalize(args, comm) -> None:
    """Every rank: drain node-local results to ``--out`` and remove them (if ``--results``)."""
    drain_results(args, comm, "ff_run.json")
