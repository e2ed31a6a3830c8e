"""FF-HEDM peak search: staged frames + dark -> peaks per frame -> tree merge -> HDF5, CSV, PNG.

Run it like the NF workflow::

    mpirun -n 4 python -m workflows run hedm/ff.py \\
        --stage hedm/hooks/ff.hook --emulate-nodes 2 --out OUT -- \\
        --params '/dev/shm/mpistage-ff/%n/ff.params' --results '/dev/shm/mpistage-ff/%n/results'

The graph:

1. **frames**: one task per frame reads it from its node's staged copy (a GE
   or HDF5 file holding every frame, or a TIFF series), and the dark -- the
   mean of the dark file's frames -- through the per-worker cache (computed
   once per worker, then from memory); :func:`kernels.ff.find_peaks` gives
   the frame's peak table;
2. **reduce**: an ordered ``reduce_tree`` concatenates the peak tables;
3. **write**: one task writes ``<OutputFileName>.h5``, ``.csv`` and ``.png``
   into the node-local results directory (``--results``);
4. **drain** (``finalize``): results to ``OUT``, node-local copies removed.

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
from hedm.common import (as_records, cached, frame_reader, is_series, raw_options,
                                   merge_tables, phase_spans, recording, worker_name)
from hedm.output import FF_FRAME_DTYPE, plot_ff, write_csv, write_h5
from hedm.params import (Param, add_flow_arguments, at_least, flag_overrides, load_params,
                                   relative_to, resolve_params)
from hedm.run import drain_results, log_summary, stage_dict, write_json

__all__ = ["SCHEMA", "add_arguments", "main", "finalize", "read_ff_params", "load_dark"]

SCHEMA = (
    Param("DataDirectory", str, ".", "folder of frames and dark; relative to the parameter "
          "file's folder, %n = node name"),
    Param("InputPattern", str, "ff_000001.ge3", "one GE/HDF5 file holding every frame, or a "
          "TIFF series name with a %d field"),
    Param("Dark", str, None, "dark file (GE/HDF5, or one TIFF); the mean of its frames is used"),
    Param("RawStartNr", int, 0, "first frame (index in the file, or TIFF file number)",
          at_least(0)),
    Param("NrFilesPerSweep", int, None, "number of frames", at_least(1)),
    Param("NrPixelsY", int, None, "frame width (detector columns)", at_least(1)),
    Param("NrPixelsZ", int, None, "frame height (detector rows)", at_least(1)),
    Param("Threshold", float, 50.0, "counts above the dark for a pixel to count", at_least(0)),
    Param("MinNrPx", int, 2, "smallest region (pixels) kept", at_least(1)),
    Param("MaxNrPx", int, 10000, "largest region (pixels) kept", at_least(1)),
    Param("OutputFileName", str, "ff_peaks", "base name of the result files (.h5, .csv, .png)"),
)


def read_ff_params(path: str, flags: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """Parameters from the file ``path`` and flag overrides, checked together."""
    from hedm.params import ParamError

    values = resolve_params(SCHEMA, load_params(path, SCHEMA), flags or {}, path)
    if values["MinNrPx"] > values["MaxNrPx"]:
        raise ParamError(f"{path}: MinNrPx ({values['MinNrPx']}) must not exceed MaxNrPx "
                         f"({values['MaxNrPx']})")
    if "/" in values["OutputFileName"] or not values["OutputFileName"]:
        raise ParamError(f"{path}: OutputFileName must be a plain file name, "
                         f"got {values['OutputFileName']!r}")
    return values


def kernel_params(p: Dict[str, Any]):
    """The :class:`kernels.ff.FFParams` of a parameter set."""
    from kernels.ff import FFParams

    return FFParams(threshold=p["Threshold"], min_pixels=p["MinNrPx"], max_pixels=p["MaxNrPx"])


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "FF", SCHEMA)
    parser.add_argument("--hard-placement", action="store_true",
                        help="scattered frames: run each frame's task only on the node "
                             "holding it (default: there if it can, else elsewhere, "
                             "reading the shared copy)")


def load_dark(path: str, shape) -> np.ndarray:
    """Mean of every frame of the dark file (float32), read frame by frame."""
    from kernels import open_frames

    reader = open_frames(path, **raw_options(path, shape))
    total = np.zeros(reader.shape, np.float64)
    for i in range(reader.n_frames):
        total += reader.read(i)
    return (total / reader.n_frames).astype(np.float32)


# -- tasks ---------------------------------------------------------------------------
@app
def find_ff_peaks(frame: int, source: str, first: int, n: int, shape, dark: str,
                  params: Dict[str, Any], shared: Optional[str] = None,
                  hard: bool = False) -> Dict[str, Any]:
    """One frame from this node's staged copy -> its peak table (+ a log row).

    ``shared``: the frame was scattered (its own file, on some nodes only); the
    task reads this node's copy, else the shared file (soft) or fails (``hard``).
    """
    from kernels.ff import find_peaks

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
    dark_image, hit = cached(on_this_node(dark), lambda p: load_dark(p, shape), kind="dark")
    t1 = time.perf_counter()
    peaks = find_peaks(image, dark_image, kernel_params(params), frame_index=frame)
    return {"peaks": peaks, "frames": as_records([(frame, len(peaks))], FF_FRAME_DTYPE),
            "log": [(frame, worker_name(), round(t1 - t0, 6), round(time.perf_counter() - t1, 6),
                     bool(hit))],
            "shared_reads": [frame] if fell else []}


@app
def merge_ff(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Concatenate two partial peak tables (ordered: frames stay in order)."""
    return merge_tables(a, b)


@app
def write_ff(table: Dict[str, Any], params: Dict[str, Any], dark: str, shape,
             results: str) -> Dict[str, Any]:
    """Write the HDF5 table, the CSV and the PNG into this node's results directory."""
    out_dir = on_this_node(results)
    os.makedirs(out_dir, exist_ok=True)
    dark_image, _ = cached(on_this_node(dark), lambda p: load_dark(p, shape), kind="dark")
    base = os.path.join(out_dir, params["OutputFileName"])
    n_frames = len(table["frames"])
    h5 = write_h5(base + ".h5", {"peaks": table["peaks"], "frames": table["frames"],
                                 "dark": dark_image},
                  params, {"workflow": "hedm_ff", "n_frames": n_frames})
    csv = write_csv(base + ".csv", table["peaks"])
    png = plot_ff(base + ".png", table["peaks"], tuple(shape), table["frames"])
    return {"node": this_node(), "h5": h5, "csv": csv, "png": png,
            "peaks": len(table["peaks"]), "frames": n_frames}


# -- the graph -------------------------------------------------------------------------
def main(args):
    """Build and run the FF graph; return the write task's future (already done)."""
    from hedm.params import ParamError

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
    from hedm.params import ParamError

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
