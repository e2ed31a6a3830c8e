"""Run-level pieces of the HEDM workflows: the run record (JSON).

Each workflow's ``main`` writes ``OUT/<name>_run.json`` on rank 0 (parameters, the
stage report, phase spans, per-worker times and cache hits); the runner drains
the node-local results into ``OUT`` and adds the drain's time
(:func:`workflows.run.drain_results`).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from hedm.common import output_file
from workflows import on_this_node
from hedm.errors import HedmError
from workflows.errors import WorkflowError

__all__ = ["stage_dict", "log_summary", "write_json", "ResultError",
           "analysis_record", "finish", "check_outputs_of"]


class ResultError(HedmError, WorkflowError):
    """A run finished but its result is empty or not a reconstruction (the message says
    why and what to check); the workflow exits 1 after writing what it has."""


def stage_dict(args: Any) -> Any:
    """The runner's stage report as a dict (``None`` when the run did not stage)."""
    rep = getattr(args, "stage_report", None)
    return rep.to_dict() if rep is not None and hasattr(rep, "to_dict") else None


def log_summary(log: Iterable[tuple], input_name: str) -> Dict[str, Any]:
    """Per-worker totals of :func:`analyses.runner.run_analysis`'s timing rows; reads of
    ``input_name`` (``background``, ``dark``) should be at most one per worker."""
    workers: Dict[str, Dict[str, Any]] = {}
    reads, hits = f"{input_name}_reads", f"{input_name}_cache_hits"
    for _, who, read_s, compute_s, prepared, *_ in log:
        w = workers.setdefault(who, {"tasks": 0, "read_s": 0.0, "compute_s": 0.0,
                                     reads: 0, hits: 0})
        w["tasks"] += 1
        w["read_s"] = round(w["read_s"] + read_s, 6)
        w["compute_s"] = round(w["compute_s"] + compute_s, 6)
        w[reads if prepared else hits] += 1
    return {"tasks": sum(w["tasks"] for w in workers.values()), "workers": workers,
            reads: sum(w[reads] for w in workers.values()),
            hits: sum(w[hits] for w in workers.values())}


def analysis_record(args: Any, workflow: str, params: Mapping[str, Any], run: Any,
                    origin: float, cached: str, refs: Sequence[Any],
                    phases: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The run record of a flow on :func:`analyses.runner.run_analysis` (waits
    for its write): what ran where, the write's summary, the phases (``phases`` before
    ``frames``, ``reduce``, ``write``), :func:`log_summary` of the partitions and, when
    refs were placed on the nodes holding their scattered files, ``scatter``."""
    from workflows import phase_spans

    summary = run.written.result()      # first: the phase times below are then complete
    rows = run.merged.result()[2]
    record = {"workflow": workflow, "executor": getattr(args, "executor", None),
              "ranks": getattr(args, "ranks", None), "workers": getattr(args, "workers", None),
              "params": params, "result": summary, "stage": stage_dict(args),
              "phases": phase_spans({**(phases or {}), "frames": run.phases["partitions"],
                                     "reduce": run.phases["reduce"],
                                     "write": run.phases["write"]}, origin),
              "frame_log": log_summary(rows, cached)}
    placed = [r for r in refs if r.node]
    if placed:
        from workflows.runtime import active_runtime

        rt = active_runtime()
        record["scatter"] = {"frames_placed": len(placed), "placed": rt.placed,
                             "ran_where_placed": rt.placed_here,
                             "read_shared": [refs[0].first + r[0] for r in rows if r[5]]}
    return record


def check_outputs_of(args: Any, out: str, names: Sequence[str], inputs: Sequence[str]) -> None:
    """Before any task: the run's files in ``out`` (``names``: the run record, and the
    results the drain brings there) are none of ``inputs`` (``%n``: this node) and replace
    no file this project did not write (unless ``--overwrite``;
    :func:`core.outputs.check_outputs`)."""
    from core.outputs import check_outputs

    check_outputs([os.path.join(out, n) for n in names], [on_this_node(i) for i in inputs],
                  overwrite=bool(getattr(args, "overwrite", False)))


def finish(path: str, record: Mapping[str, Any], results: str) -> None:
    """Write ``record`` to ``path``; then a result of no use (its ``problem``) is a
    :class:`ResultError` (exit 1), the outputs kept in ``results`` for inspection."""
    write_json(path, record)
    why = record["result"]["problem"]
    if why:
        raise ResultError(f"{why}; the outputs were written to {results} for inspection")


def write_json(path: str, record: Mapping[str, Any]) -> None:
    """Write ``record`` as JSON atomically (marked as this project's, :mod:`core.outputs`)."""
    from core.outputs import mark

    record = dict(record)
    mark(record)
    with output_file(path) as fh:
        json.dump(record, fh, indent=1, default=str)
