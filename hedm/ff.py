"""FF-HEDM peak search: staged frames + dark -> peaks per frame -> tree merge -> HDF5, CSV, PNG.

Run it like the NF workflow::

    mpirun -n 4 python -m workflows run hedm/ff.py \\
        --stage hedm/hooks/ff.hook --emulate-nodes 2 --out OUT -- \\
        --params '/dev/shm/mpistage-ff/%n/ff.params' --results '/dev/shm/mpistage-ff/%n/results'

The flow is the analysis :class:`hedm.ffpeaks.FFPeaks` (parameters, dark, per-frame
peak search, merge, files) run by the library's runner on the frame files
(:func:`analyses.runner.run_analysis`; ``stager stream receive --analysis
hedm.ffpeaks`` runs it live): one task per frame on its node's staged copy (a GE or
HDF5 file holding every frame, or a TIFF series), the dark read once per worker;
an ordered tree merge; one task writing ``<OutputFileName>.h5``, ``.csv`` and
``.png`` into the node-local results directory (``--results``); then the drain
(by the runner, :func:`workflows.run.drain_results`): results to ``OUT``, node-local
copies removed.

On a **scatter** block (``hedm/hooks/ff_scatter.hook``: each frame file of a TIFF
series on one node, for datasets larger than one node's storage), each frame's
task is placed on the node holding that frame (``stager.where``) and reads the
copy there; placed softly, a task that runs elsewhere (its node's workers busy)
or finds its copy gone reads the frame from the shared filesystem instead, and
``ff_run.json`` counts it (``scatter``). ``--hard-placement`` makes such a task
fail, naming node and file. The results equal the broadcast run's.

For a GE/HDF5 input, frame numbers are indices into the file
(``RawStartNr`` .. ``RawStartNr + NrFrames - 1``; ``NrFilesPerSweep`` is MIDAS's files per
sweep, so 1); for a TIFF series they are the file numbers (``NrFilesPerSweep`` files,
one frame each): :func:`hedm.ffpeaks.sweep_frames`. ``OUT/ff_run.json`` records phases, per-worker
read/compute times and dark reads (``frame_log``).

Stage 2, grains from these peaks (indexing, refinement, ``Grains.csv``): :mod:`hedm.ffgrains`,
with the same parameter file.
"""

from __future__ import annotations

import os
import time

from hedm.common import is_series
from hedm.ffpeaks import SCHEMA, FFPeaks, kernel_params, load_dark, read_ff_params, sweep_frames
from hedm.params import add_flow_arguments, check_inputs, flag_overrides, relative_to
from hedm.run import analysis_record, check_outputs_of, finish
from workflows import on_this_node

#: This flow's run record in ``OUT``; the runner adds its drain of ``--results`` to it.
RUN_RECORD = "ff_run.json"

__all__ = ["SCHEMA", "add_arguments", "main", "RUN_RECORD", "read_ff_params", "load_dark",
           "kernel_params"]


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "FF", SCHEMA)
    parser.add_argument("--hard-placement", action="store_true",
                        help="scattered frames: run each frame's task only on the node "
                             "holding it (default: there if it can, else elsewhere, "
                             "reading the shared copy)")


def main(args):
    """Run the FF analysis on the frame files; return the write task's future (done)."""
    from analyses.sources import frame_files, partitions
    from streams.protocol import ScanGeometry
    from analyses.runner import place, run_analysis

    t_origin = time.time()
    p = read_ff_params(on_this_node(args.params), flag_overrides(args, SCHEMA))
    folder = relative_to(p["DataDirectory"], args.params)
    dark = os.path.join(folder, p["Dark"])
    first = p["RawStartNr"]
    shape = (p["NrPixelsZ"], p["NrPixelsY"])
    pattern = os.path.join(folder, p["InputPattern"])
    series = is_series(pattern)
    if not series:
        check_inputs([pattern], "DataDirectory/InputPattern")
    n = sweep_frames(p, on_this_node(pattern), series, args.params)
    refs = partitions(os.path.join(folder, p["InputPattern"]), n, 1, kind="frames", first=first,
                      shape=shape, dtype="uint16")
    check_inputs([dark, frame_files(refs[0])[0]], "DataDirectory/InputPattern/Dark")
    out = getattr(args, "out", None) or os.getcwd()
    name = p["OutputFileName"]
    g = ScanGeometry(name, 1, n, 1, shape, "<u2", (1, n))
    refs = place(refs, args)
    results = args.results or out
    check_outputs_of(args, out, [RUN_RECORD] + [name + x for x in (".h5",) + FFPeaks.files],
                     [args.params, dark] + frame_files(refs[0]) + frame_files(refs[-1]))
    run = run_analysis("hedm.ffpeaks", {"params": p, "dark": dark}, refs, g,
                       os.path.join(results, name + ".h5"),
                       hard=bool(getattr(args, "hard_placement", False)),
                       overwrite=bool(getattr(args, "overwrite", False)), files=FFPeaks.files)
    finish(os.path.join(out, RUN_RECORD),
           analysis_record(args, "hedm_ff", p, run, t_origin, "dark", refs), results)
    return run.written

