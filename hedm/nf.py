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
Steps 2-4 are the analysis :class:`hedm.nfreduce.NFReduce` (given the backgrounds
and max projections of step 1) run by the library's runner on the frame files
(:func:`workflows.flows.analysis.run_analysis`), the one a receiving job runs on a
live stream (``--analysis hedm.nfreduce``):

2. **frames**: one task per frame reads the raw frame from its node's copy (once
   its distance's background exists), the backgrounds once per worker, orients it
   and reduces it with :func:`kernels.nf.reduce_frame` to spot pixels and centroids;
3. **reduce**: an ordered ``reduce_tree`` merges the per-frame partials
   (merges start while frames are still being reduced);
4. **write**: one task writes ``<ReducedFileName>.h5`` (the stream's layout, with
   ``/max_projection``), then the analysis's ``.png`` and the bit-packed binary
   images ``<ReducedFileName>_binary.npy`` (the input of stage 2, layout in
   ``docs/nf-files.md``) to the node-local results directory (``--results``,
   ``%n`` = its node);
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

from workflows import app, on_this_node, phase_spans, worker_name
from hedm.common import frame_reader, is_series, replacing, split_rows
from hedm.nfparams import REDUCE_SCHEMA as SCHEMA
from hedm.nfparams import read_nf_params
from hedm.nfreduce import BACKGROUND_NAME, binary_images, kernel_params, spot_tables
from hedm.params import BINARY_SUFFIX, ParamError, add_flow_arguments, flag_overrides, relative_to
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
    """Step 1 (backgrounds), then the NF analysis on the frame files; return the write
    task's future (already done).

    Raises
    ------
    ResultError
        After writing the outputs, when a distance yielded no spot pixel in any
        frame: stage 2 could not fit anything from it (exit 1, message says
        what to check).
    """
    from hedm.imtrans import raw_shape
    from streams.offline import frame_partitions
    from streams.protocol import ScanGeometry
    from workflows.flows.analysis import place, run_analysis

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
    for d in range(n_dist):
        start = first + d * n
        mine = [background_band(source, first, n_files, shape, r0, r1, start, n, transforms)
                for r0, r1 in split_rows(shape[0], n_bands)]
        images.append(assemble_background(mine, os.path.join(out, "work"), d))
        bands += mine
    refs = frame_partitions(source, first, n_files, 1, raw_shape(shape, transforms), "uint16")
    g = ScanGeometry(p["ReducedFileName"], 1, n_files, 1, raw_shape(shape, transforms), "<u2",
                     (n_dist, n))
    work = os.path.join(out, "work")
    run = run_analysis("hedm.nfreduce", {
        "params": p,
        "background": [os.path.join(work, BACKGROUND_NAME.format(d=d)) for d in range(n_dist)],
        "max_projection": [os.path.join(work, f"nf_max_projection_d{d}.npy")
                           for d in range(n_dist)]},
        place(refs, args), g, os.path.join(results, p["ReducedFileName"] + ".h5"),
        after=[images[ref.start // n] for ref in refs])   # a frame waits for its background
    summary = run.written.result()  # wait here so the phase times below are complete
    record = {
        "workflow": "hedm_nf", "executor": getattr(args, "executor", None),
        "ranks": getattr(args, "ranks", None), "workers": getattr(args, "workers", None),
        "params": p, "result": summary,
        "stage": stage_dict(args),
        "phases": phase_spans({"background": bands + images,
                               "frames": run.phases["partitions"], "reduce":
                               run.phases["reduce"], "write": run.phases["write"]}, t_origin),
        "frame_log": log_summary(run.rows(), "background"),
        "background_bands": [b for i in images for b in i.result()["bands"]],
    }
    write_json(os.path.join(out, "nf_run.json"), record)
    if summary["problem"]:
        raise ResultError(f"{summary['problem']}; the outputs were written to {results} for "
                          "inspection")
    return run.written


def finalize(args, comm) -> None:
    """Every rank: drain node-local results to ``--out`` and remove them (if ``--results``)."""
    drain_results(args, comm, "nf_run.json")
