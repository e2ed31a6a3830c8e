"""NF-HEDM reduction: staged frames -> background -> spots per frame -> tree merge -> HDF5, PNG,
and the reduced binary images that stage 2 (:mod:`hedm.nffit`) fits.

Run it the way users do, staging and reducing in one MPI job::

    mpirun -n 4 python -m workflows run hedm/nf.py \\
        --stage hedm/hooks/nf.hook --emulate-nodes 2 --out OUT -- \\
        --params '/dev/shm/mpistage-nf/%n/nf.params' --results '/dev/shm/mpistage-nf/%n/results'

The graph (paper, section V), for each detector distance ``d`` of
``nDistances`` (MIDAS numbers the files of distance ``d`` from
``RawStartNr + d * NrFilesPerDistance``, as ``ProcessImagesCombined`` does):

1. **background**: ``BackgroundTasks`` tasks each read a band of pixel rows
   of every frame of the distance from their node's staged copy and take the
   per-pixel (lower) median and maximum; one task stacks the bands and writes
   the distance's background image to ``OUT/work/`` (the shared filesystem);
2. **frames**: one task per frame reads the frame from its node's copy, the
   background through the per-worker cache (read once per worker, then from
   memory), and reduces it with :func:`kernels.nf.reduce_frame` to sparse
   spot pixels plus per-spot centroids;
3. **reduce**: an ordered ``reduce_tree`` merges the per-frame partials
   (merges start while frames are still being reduced);
4. **write**: one task writes ``<ReducedFileName>.h5``, ``.png`` and the
   bit-packed binary images ``<ReducedFileName>_binary.npy`` (the input of
   stage 2, layout in ``docs/nf-files.md``) to the node-local results
   directory (``--results``, ``%n`` = its node);

Steps 2-4 are the analysis :class:`hedm.nfreduce.NFReduce` (its ``reduce``,
``merge``, ``tables`` and ``binary``), the one a receiving job runs on a live
stream (``--analysis hedm.nfreduce``) with the backgrounds of step 1 given;
5. **drain** (``finalize``, every rank): ``stager.drain`` copies each node's
   results to ``OUT`` (merged) and the node-local results are removed.

Without ``--results`` the write task writes straight to ``OUT`` and nothing
is drained. In a batch job rendered from the ``stage-run-drain`` template
(``stager sbatch``), the template stages and drains; the workflow line is::

    mpirun python -m workflows run hedm/nf.py \
        --node-id-env SLURMD_NODENAME --out "$MPISTAGE_SHARED_OUT" -- \
        --params "$HEDM_STAGE/%n/nf/nf.params" --results "$MPISTAGE_RESULTS" --no-drain

The parameter file is the layer's one MIDAS-style file: stage 2's keys and
every MIDAS NF key are accepted and left to their readers
(:mod:`hedm.params`). The frames are ``InputPattern`` or MIDAS's
``OrigFileName_%06d.extOrig``; each raw frame is oriented by ``ImTransOpt``
(:mod:`hedm.imtrans`; default none, MIDAS's NF reading is codes 1 and 2)
before anything else. A distance whose frames hold no spot at all fails the
run (exit 1, after the outputs are written): stage 2 could fit nothing from
it. Staging hooks for any frame names: :mod:`hedm.nfhook`.
``OUT/nf_run.json`` records the stage report, phase times, tasks and cache
hits. File layout: :mod:`hedm.output`.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List

import numpy as np

from workflows import app, on_this_node, phase_spans, reduce_tree, this_node, worker_name
from hedm.common import frame_reader, is_series, replacing, split_rows
from hedm.nfparams import REDUCE_SCHEMA as SCHEMA
from hedm.nfparams import read_nf_params
from hedm.nfreduce import (BACKGROUND_NAME, binary_images, empty_distances, kernel_params,
                           spot_tables)
from hedm.output import plot_nf, write_h5
from hedm.params import (BINARY_SUFFIX, ParamError, add_flow_arguments, flag_overrides,
                         relative_to)
from hedm.run import ResultError, drain_results, log_summary, stage_dict, write_json

__all__ = ["SCHEMA", "BINARY_SUFFIX", "add_arguments", "main", "finalize", "read_nf_params",
           "binary_images", "kernel_params", "spot_tables"]


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "NF", SCHEMA)


# -- tasks ---------------------------------------------------------------------------
@app
def background_band(source: str, first: int, n_files: int, shape, r0: int, r1: int,
                    start: int, count: int, transforms: tuple = ()) -> Dict[str, Any]:
    """Per-pixel lower median and maximum of rows ``r0:r1`` over files ``start`` ..
    ``start + count - 1`` (one distance) of the ``n_files`` from ``first`` (frames
    oriented by the ``ImTransOpt`` codes ``transforms``)."""
    from kernels.nf import median_background

    t0 = time.perf_counter()
    reader, index_of = frame_reader(on_this_node(source), first, n_files, shape, transforms)
    stack = np.empty((count, r1 - r0, shape[1]), np.uint16)
    for k in range(count):
        reader.read_rows(index_of(start + k), r0, r1, out=stack[k])
    t1 = time.perf_counter()
    median = median_background(stack)
    return {"r0": r0, "median": median, "max": stack.max(axis=0), "read_s": t1 - t0,
            "compute_s": time.perf_counter() - t1, "worker": worker_name()}


def _save_npy(path: str, arr: np.ndarray) -> None:
    with replacing(path, ".npy") as tmp:
        np.save(tmp, arr)


@app
def assemble_background(bands, work_dir: str, distance: int = 0) -> Dict[str, Any]:
    """Stack the bands into the background and max projection of one distance; write
    both to ``work_dir``.

    Returns the two paths (what frame tasks need) and each band's timings.
    """
    bands = sorted(bands, key=lambda b: b["r0"])
    os.makedirs(work_dir, exist_ok=True)
    paths: Dict[str, Any] = {
        "background": os.path.join(work_dir, BACKGROUND_NAME.format(d=distance)),
        "max_projection": os.path.join(work_dir, f"nf_max_projection_d{distance}.npy")}
    _save_npy(paths["background"], np.vstack([b["median"] for b in bands]))
    _save_npy(paths["max_projection"], np.vstack([b["max"] for b in bands]))
    paths["bands"] = [{"distance": distance, "rows": [b["r0"], b["r0"] + len(b["median"])],
                       "read_s": round(b["read_s"], 4), "compute_s": round(b["compute_s"], 4),
                       "worker": b["worker"]} for b in bands]
    return paths


def _analysis(params: Dict[str, Any], backgrounds: List[str]):
    from hedm.nfreduce import NFReduce

    return NFReduce(params, background=backgrounds)


@app
def reduce_nf_frame(number: int, source: str, first: int, n_files: int, shape,
                    images: Dict[str, str], params: Dict[str, Any],
                    distance: int = 0) -> Dict[str, Any]:
    """File ``number`` from this node's staged copy -> the analysis's partial (+ a log row)."""
    t0 = time.perf_counter()
    reader, index_of = frame_reader(on_this_node(source), first, n_files, shape,
                                    tuple(params["ImTransOpt"]))
    image = reader.read(index_of(number))
    # every frame of this task is of one distance: its background serves them all
    analysis = _analysis(params, [images["background"]] * params["nDistances"])
    _, hit = analysis.background(distance)
    t1 = time.perf_counter()
    partial = analysis.reduce([image], [number - first], [True])
    return {"partial": partial, "log": [(number, worker_name(), round(t1 - t0, 6),
                                         round(time.perf_counter() - t1, 6), not hit)]}


@app
def merge_nf(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Merge two partials (the analysis's merge) and their log rows."""
    return {"partial": a["partial"].merge(b["partial"]), "log": a["log"] + b["log"]}


@app
def write_nf(merged: Dict[str, Any], images: List[Dict[str, str]], params: Dict[str, Any],
             results: str) -> Dict[str, Any]:
    """Write the HDF5 file, the PNG and the binary images into this node's results directory."""
    out_dir = on_this_node(results)
    os.makedirs(out_dir, exist_ok=True)
    analysis = _analysis(params, [i["background"] for i in images])
    n_files = params["nDistances"] * params["NrFilesPerDistance"]
    table = analysis.tables(merged["partial"], n_files)
    background = analysis.backgrounds()
    max_projection = np.stack([np.load(i["max_projection"]) for i in images])
    base = os.path.join(out_dir, params["ReducedFileName"])
    n_frames = len(table["frames"])
    h5 = write_h5(base + ".h5", {"spots": table["pixels"], "spot_centroids": table["centroids"],
                                 "frames": table["frames"], "background": background,
                                 "max_projection": max_projection},
                  params, {"workflow": "hedm_nf", "n_frames": n_frames})
    png = plot_nf(base + ".png", max_projection, background, table["centroids"],
                  params["NrFilesPerDistance"])
    binary = analysis.save_binary(out_dir, analysis.binary(table["pixels"]))
    return {"node": this_node(), "h5": h5, "png": png, "binary": binary,
            "spot_pixels": len(table["pixels"]), "spots": len(table["centroids"]),
            "frames": n_frames,
            "empty_distances": empty_distances(table["frames"]["distance"],
                                               table["frames"]["n_pixels"],
                                               params["nDistances"])}


# -- the graph -------------------------------------------------------------------------
def _check_frames(source: str, first: int, n: int) -> None:
    if not is_series(source):
        if not os.path.isfile(source):
            raise ParamError(f"input file {source} does not exist; check DataDirectory/"
                             "InputPattern or stage it (--stage SPEC)")
        return
    missing = [source % f for f in range(first, first + n) if not os.path.isfile(source % f)]
    if missing:
        raise ParamError(f"{len(missing)} of {n} frames missing on this node, first {missing[0]}; "
                         "check DataDirectory/InputPattern or stage them (--stage SPEC)")


def _check_shape(source: str, first: int, n: int, shape, transforms) -> None:
    """The first frame's shape against NrPixelsZ x NrPixelsY (after ImTransOpt)."""
    from hedm.imtrans import describe, raw_shape

    reader, index_of = frame_reader(source, first, n, shape, transforms)
    got = tuple(reader.read(index_of(first)).shape)
    if got != tuple(shape):
        raw = raw_shape(shape, transforms)
        raise ParamError(f"{source if not is_series(source) else source % first}: frames of "
                         f"{got[0]} rows x {got[1]} columns after {describe(transforms)}, but "
                         f"NrPixelsZ x NrPixelsY is {shape[0]} x {shape[1]} (raw frames of "
                         f"{raw[0]} x {raw[1]}); check NrPixelsY/NrPixelsZ and ImTransOpt")


def main(args):
    """Build and run the NF graph; return the write task's future (already done).

    Raises
    ------
    ResultError
        After writing the outputs, when a distance yielded no spot pixel in any
        frame: stage 2 could not fit anything from it (exit 1, message says
        what to check).
    """
    t_origin = time.time()
    params_path = on_this_node(args.params)
    p = read_nf_params(params_path, flag_overrides(args, SCHEMA))
    # %n stays in the source: each task resolves it for its own node.
    source = os.path.join(relative_to(p["DataDirectory"], args.params), p["InputPattern"])
    first, n, n_dist = p["RawStartNr"], p["NrFilesPerDistance"], p["nDistances"]
    n_files = n * n_dist
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    transforms = tuple(p["ImTransOpt"])
    _check_frames(on_this_node(source), first, n_files)
    _check_shape(on_this_node(source), first, n_files, shape, transforms)
    out = getattr(args, "out", None) or os.getcwd()
    results = args.results or out

    n_bands = p["BackgroundTasks"] or max(1, getattr(args, "workers", None) or 1)
    bands: List[Any] = []
    images: List[Any] = []
    per_frame: List[Any] = []
    for d in range(n_dist):
        start = first + d * n
        mine = [background_band(source, first, n_files, shape, r0, r1, start, n, transforms)
                for r0, r1 in split_rows(shape[0], n_bands)]
        images.append(assemble_background(mine, os.path.join(out, "work"), d))
        bands += mine
    for d in range(n_dist):
        per_frame += [reduce_nf_frame(k, source, first, n_files, shape, images[d], p, d)
                      for k in range(first + d * n, first + (d + 1) * n)]
    merges: List[Any] = []
    merged = reduce_tree(merge_nf, per_frame, ordered=True, launched=merges)
    written = write_nf(merged, images, p, results)
    summary = written.result()  # wait here so the phase times below are complete
    empty = summary.pop("empty_distances")
    table = merged.result()
    record = {
        "workflow": "hedm_nf", "executor": getattr(args, "executor", None),
        "ranks": getattr(args, "ranks", None), "workers": getattr(args, "workers", None),
        "params": p, "result": summary,
        "stage": stage_dict(args),
        "phases": phase_spans({"background": bands + images, "frames": per_frame,
                               "reduce": merges, "write": [written]}, t_origin),
        "frame_log": log_summary(table["log"], "background"),  # (frame, worker, s, s, read)
        "background_bands": [b for i in images for b in i.result()["bands"]],
    }
    record["empty_distances"] = empty
    write_json(os.path.join(out, "nf_run.json"), record)
    if empty:
        files = ", ".join(f"{first + d * n}..{first + (d + 1) * n - 1}" for d in empty)
        raise ResultError(
            f"no spot found at distance(s) {', '.join(map(str, empty))} in any of its "
            f"{n} frames (files {files} of {p['InputPattern']}): stage 2 cannot fit from "
            "empty images. Check that "
            "these files hold the layer's diffraction frames (DataDirectory, InputPattern, "
            "RawStartNr, NrFilesPerDistance, nDistances), that BlanketSubtraction "
            f"({p['BlanketSubtraction']}) is below the spots' height above the median "
            "background, and the LoG settings (GaussFiltRadius, LoGMaskRadius); the "
            f"outputs were written to {results} for inspection")
    return written


def finalize(args, comm) -> None:
    """Every rank: drain node-local results to ``--out`` and remove them (if ``--results``)."""
    drain_results(args, comm, "nf_run.json")
