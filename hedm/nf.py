"""NF-HEDM reduction: staged frames -> background -> spots per frame -> tree merge -> HDF5, PNG,
and the reduced binary images that stage 2 (:mod:`hedm.nffit`) fits.

Staged and run in one MPI job as ``docs/guide/hedm.md`` shows. For each distance ``d``
(files from ``RawStartNr + d * NrFilesPerDistance``, as MIDAS numbers them): 1.
**background**: ``BackgroundTasks`` tasks each take the per-pixel lower median and
maximum of a band of rows from their node's copy, one task writes the distance's images
to ``OUT/work/``; 2.-4. the analysis :class:`hedm.nfreduce.NFReduce` run on the frame
files (:func:`analyses.runner.run_analysis`): one task per frame, an ordered tree merge,
one task writing ``<ReducedFileName>.h5``, ``.png`` and ``_binary.npy`` to the
node-local ``--results``; 5. **drain** to ``OUT`` (without ``--results``: written
straight to ``OUT``). In a ``stage-run-drain`` batch job the template stages and drains
(``--node-id-env SLURMD_NODENAME ... --no-drain``).

The parameter file is the layer's one file (:mod:`hedm.params`); frames are
``InputPattern`` or MIDAS's ``OrigFileName_%06d.extOrig``, oriented by
``ImTransOpt`` (:mod:`hedm.imtrans`). A distance without any spot fails the run
after writing (stage 2 could fit nothing). ``OUT/nf_run.json`` records the stage
report, phases and per-worker times; file layout: :mod:`hedm.output`.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List

import numpy as np

from workflows import app, on_this_node, worker_name
from hedm.common import is_series, output_file, split_rows
from analyses.sources.frames import open_frame_file
from hedm.nfparams import REDUCE_SCHEMA as SCHEMA
from hedm.nfparams import read_nf_params
from hedm.nfreduce import (BACKGROUND_NAME, MAX_NAME, NFReduce, binary_images, kernel_params,
                           spot_tables)
from hedm.params import (BINARY_SUFFIX, ParamError, add_flow_arguments, check_inputs,
                         flag_overrides, relative_to)
from hedm.run import analysis_record, check_outputs_of, finish

#: This flow's run record in ``OUT``; the runner adds its drain of ``--results`` to it.
RUN_RECORD = "nf_run.json"

__all__ = ["SCHEMA", "BINARY_SUFFIX", "add_arguments", "main", "RUN_RECORD", "read_nf_params",
           "binary_images", "kernel_params", "spot_tables"]


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "NF", SCHEMA)


# -- tasks ---------------------------------------------------------------------------
@app
def background_band(source: str, shape, r0: int, r1: int, start: int, count: int,
                    transforms: tuple = ()) -> Dict[str, Any]:
    """Per-pixel lower median and maximum of rows ``r0:r1`` (of frames oriented by the
    ``ImTransOpt`` codes ``transforms``) over frames ``start`` .. ``start + count - 1``
    (one distance; file numbers of a TIFF series, else indices into the file)."""
    from kernels.nf import median_background

    from hedm.imtrans import OrientedFrames, raw_shape

    t0 = time.perf_counter()
    series = is_series(source)
    raw = open_frame_file(on_this_node(source), raw_shape(shape, transforms), "uint16",
                          **({"first": start, "n_frames": count} if series else {}))
    reader = OrientedFrames(raw, transforms)      # read_rows: bands of the oriented frame
    stack = np.empty((count, r1 - r0, shape[1]), np.uint16)
    for k in range(count):
        reader.read_rows(k if series else start + k, r0, r1, out=stack[k])
    t1 = time.perf_counter()
    median = median_background(stack)
    return {"r0": r0, "median": median, "max": stack.max(axis=0), "read_s": t1 - t0,
            "compute_s": time.perf_counter() - t1, "worker": worker_name()}


@app
def assemble_background(bands, paths: List[str], distance: int = 0) -> List[Dict[str, Any]]:
    """Stack the bands into the background and max projection of one distance, write them
    to ``paths`` (two ``.npy``); return each band's timings."""
    bands = sorted(bands, key=lambda b: b["r0"])
    for path, key in zip(paths, ("median", "max")):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with output_file(path, binary=True) as fh:
            np.save(fh, np.vstack([b[key] for b in bands]))
    return [{"distance": distance, "rows": [b["r0"], b["r0"] + len(b["median"])],
             "read_s": round(b["read_s"], 4), "compute_s": round(b["compute_s"], 4),
             "worker": b["worker"]} for b in bands]


# -- the graph -------------------------------------------------------------------------
def _check_frames(refs, shape, transforms) -> None:
    """Every frame file on this node; the first frame's shape against NrPixelsZ x
    NrPixelsY (after ImTransOpt)."""
    from hedm.imtrans import apply, describe, raw_shape
    from analyses.sources import frame_files, read_partition

    files = [f for r in refs for f in frame_files(r)]
    check_inputs(files, "DataDirectory/InputPattern")
    got = apply(read_partition(refs[0], [on_this_node(files[0])])[0][0], transforms).shape
    if got != tuple(shape):
        raw = raw_shape(shape, transforms)
        raise ParamError(f"{on_this_node(files[0])}: frames of {got[0]} rows x {got[1]} columns "
                         f"after {describe(transforms)}, but NrPixelsZ x NrPixelsY is "
                         f"{shape[0]} x {shape[1]} (raw frames of {raw[0]} x {raw[1]}); check "
                         "NrPixelsY/NrPixelsZ and ImTransOpt")


def main(args):
    """Step 1 (backgrounds), then the NF analysis on the frame files; the write task's
    future (done). ResultError after writing when a distance yielded no spot pixel."""
    from hedm.imtrans import raw_shape
    from analyses.sources import frame_files, partitions
    from streams.protocol import ScanGeometry
    from analyses.runner import place, run_analysis

    t_origin = time.time()
    params_path = on_this_node(args.params)
    p = read_nf_params(params_path, flag_overrides(args, SCHEMA))
    # %n stays in the source: each task resolves it for its own node.
    source = os.path.join(relative_to(p["DataDirectory"], args.params), p["InputPattern"])
    first, n, n_dist = p["RawStartNr"], p["NrFilesPerDistance"], p["nDistances"]
    n_files = n * n_dist
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    transforms = tuple(p["ImTransOpt"])
    refs = partitions(source, n_files, 1, kind="frames", first=first,
                      shape=raw_shape(shape, transforms), dtype="uint16")
    _check_frames(refs, shape, transforms)
    refs = place(refs, args)
    out = getattr(args, "out", None) or os.getcwd()
    results = args.results or out
    check_outputs_of(args, out, [RUN_RECORD] + [p["ReducedFileName"] + x for x in
                                                (".h5",) + NFReduce.files],
                     [args.params] + frame_files(refs[0]) + frame_files(refs[-1]))

    work = os.path.join(out, "work")
    n_bands = p["BackgroundTasks"] or max(1, getattr(args, "workers", None) or 1)
    bands: List[Any] = []
    images: List[Any] = []
    for d in range(n_dist):
        start = first + d * n
        mine = [background_band(source, shape, r0, r1, start, n, transforms)
                for r0, r1 in split_rows(shape[0], n_bands)]
        images.append(assemble_background(mine, [os.path.join(work, name.format(d=d)) for name
                                                  in (BACKGROUND_NAME, MAX_NAME)], d))
        bands += mine
    g = ScanGeometry(p["ReducedFileName"], 1, n_files, 1, raw_shape(shape, transforms), "<u2",
                     (n_dist, n))
    run = run_analysis("hedm.nfreduce", {"params": p, "background": work,
                                         "max_projection": work}, refs, g,
                       os.path.join(results, p["ReducedFileName"] + ".h5"),
                       # the analysis loads every distance's background
                       after=images, overwrite=bool(getattr(args, "overwrite", False)),
                       files=NFReduce.files)
    record = analysis_record(args, "hedm_nf", p, run, t_origin, "background", refs,
                             {"background": bands + images})
    record["background_bands"] = [b for i in images for b in i.result()]
    finish(os.path.join(out, RUN_RECORD), record, results)
    return run.written

