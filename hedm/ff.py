"""FF-HEDM peak search: staged frames + dark -> peaks per frame -> tree merge -> HDF5, CSV, PNG.

Run it like the NF workflow::

    mpirun -n 4 python -m workflows run hedm/ff.py \\
        --stage hedm/hooks/ff.hook --emulate-nodes 2 --out OUT -- \\
        --params '/dev/shm/mpistage-ff/%n/ff.params' --results '/dev/shm/mpistage-ff/%n/results'

The flow is the analysis :class:`hedm.ffpeaks.FFPeaks` (its parameters, dark,
per-frame peak search, merge and files) handed to the library's runner of an
analysis on files (:func:`workflows.flows.analysis.run_analysis`), the same
analysis ``stager stream receive --analysis hedm.ffpeaks`` runs live:

1. **frames**: one task per frame reads it from its node's staged copy (a GE
   or HDF5 file holding every frame, or a TIFF series: :mod:`streams.offline`
   frame files) and searches it (the dark read once per worker);
2. **reduce**: an ordered ``reduce_tree`` merges the partials (the analysis's merge);
3. **write**: one task writes ``<OutputFileName>.h5`` (the stream's layout) and the
   analysis's ``.csv`` and ``.png`` into the node-local results directory (``--results``);
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
they are the file numbers. ``OUT/ff_run.json`` records phases, per-worker
read/compute times and dark reads (``frame_log``).
"""

from __future__ import annotations

import os
import time

from hedm.ffpeaks import SCHEMA, load_dark, kernel_params, read_ff_params
from hedm.params import ParamError, add_flow_arguments, flag_overrides, relative_to
from hedm.run import ResultError, drain_results, log_summary, stage_dict, write_json
from workflows import on_this_node, phase_spans

__all__ = ["SCHEMA", "add_arguments", "main", "finalize", "read_ff_params", "load_dark",
           "kernel_params"]


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "FF", SCHEMA)
    parser.add_argument("--hard-placement", action="store_true",
                        help="scattered frames: run each frame's task only on the node "
                             "holding it (default: there if it can, else elsewhere, "
                             "reading the shared copy)")


def main(args):
    """Run the FF analysis on the frame files; return the write task's future (done)."""
    from streams.offline import frame_files, frame_partitions
    from streams.protocol import ScanGeometry
    from workflows.flows.analysis import place, run_analysis

    t_origin = time.time()
    p = read_ff_params(on_this_node(args.params), flag_overrides(args, SCHEMA))
    folder = relative_to(p["DataDirectory"], args.params)
    dark = os.path.join(folder, p["Dark"])
    first, n = p["RawStartNr"], p["NrFilesPerSweep"]
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    refs = frame_partitions(os.path.join(folder, p["InputPattern"]), first, n, 1, shape,
                            "uint16")
    for path in [dark, frame_files(refs[0])[0]]:
        if not os.path.isfile(on_this_node(path)):
            raise ParamError(f"{on_this_node(path)} does not exist on this node; check "
                             "DataDirectory/InputPattern/Dark or stage it (--stage SPEC)")
    out = getattr(args, "out", None) or os.getcwd()
    name = p["OutputFileName"]
    g = ScanGeometry(name, 1, n, 1, shape, "<u2", (1, n))
    refs = place(refs, args)
    run = run_analysis("hedm.ffpeaks", {"params": p, "dark": dark}, refs, g,
                       os.path.join(args.results or out, name + ".h5"),
                       hard=bool(getattr(args, "hard_placement", False)))
    summary = run.written.result()  # wait here so the phase times below are complete
    rows = run.rows()
    record = {
        "workflow": "hedm_ff", "executor": getattr(args, "executor", None),
        "ranks": getattr(args, "ranks", None), "workers": getattr(args, "workers", None),
        "params": p, "result": summary, "stage": stage_dict(args),
        "phases": phase_spans({"frames": run.phases["partitions"], "reduce":
                               run.phases["reduce"], "write": run.phases["write"]}, t_origin),
        "frame_log": log_summary(rows, "dark"),
    }
    placed = [r for r in refs if r.node]
    if placed:
        from workflows.runtime import active_runtime

        rt = active_runtime()
        record["scatter"] = {"frames_placed": len(placed), "placed": rt.placed,
                             "ran_where_placed": rt.placed_here,
                             "read_shared": [first + r[0] for r in rows if r[5]]}
    write_json(os.path.join(out, "ff_run.json"), record)
    if summary["problem"]:
        raise ResultError(f"{summary['problem']}; the outputs were written to "
                          f"{args.results or out} for inspection")
    return run.written


def finalize(args, comm) -> None:
    """Every rank: drain node-local results to ``--out`` and remove them (if ``--results``)."""
    drain_results(args, comm, "ff_run.json")
