"""Draining a flow's node-local results into its output directory, after its ``finalize``."""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Optional

from core.job import Job
from core.mpi.agree import agreed

__all__ = ["drain_results"]


def drain_results(args: Any, job: Any, record: Optional[str] = None) -> None:
    """Collective over `job`: every rank must call. Drain a flow's node-local results
    (``args.results``, ``%n``: each node's) into ``args.out``; the runner calls it after
    the flow's ``finalize`` when the flow has a ``results`` option (``--no-drain``:
    ``args.drain`` false, left in place for a later ``stager drain``).

    Every node's files land directly in ``args.out`` (``merge``; names are unique
    because one task writes them), replacing an earlier run's; then each node's leader
    removes its node-local results directory. ``record``: a JSON file in ``args.out`` (a
    flow's ``RUN_RECORD``) to which rank 0 adds ``"drain"`` (seconds, files, bytes).
    ``job`` is the runner's, the node layout the stager used (``None``: one made here).
    """
    from stager import drain
    from core.nodes import expand_node

    with Job.of(job) as job:
        comm = job.comm
        # After a failed main there may be nothing to drain: then say nothing more.
        here = False
        with agreed(comm, "draining results"):
            here = os.path.isdir(expand_node(args.results, job.name))
        if not comm.allreduce(here):
            return
        t0 = time.perf_counter()
        report = drain(args.results, args.out, job, merge=True, overwrite=True)
        seconds = time.perf_counter() - t0
        if job.is_leader:
            shutil.rmtree(expand_node(args.results, job.name), ignore_errors=True)
    if comm.rank == 0 and record:
        from core.localfs import write_bytes_atomic
        from core.outputs import mark

        path = os.path.join(args.out, record)
        try:
            with open(path) as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            rec = {}
        rec["drain"] = {"seconds": round(seconds, 4), "files": report.files,
                        "bytes": report.bytes, "dest": report.dest}
        mark(rec)
        write_bytes_atomic(path, json.dumps(rec, indent=1, default=str).encode(), mode=0o644)
