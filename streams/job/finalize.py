"""Finalizing one scan of a receiving job, collectively: the partials merged per node
and across node leaders (:func:`core.mpi.tree.merge_ranks`), the receivers' reports
gathered and merged, rank 0's ``<name>.h5`` and ``<name>.json`` written node-locally
and drained (:func:`streams.job.output.drained`), the final live message."""
from __future__ import annotations

import os
import resource
import shutil
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional

from analyses.output import finish
from core import localfs
from core.mpi.agree import agree, agreed, bcast_result
from core.mpi.tree import TreeMergeError, merge_ranks
from core.nodes import expand_node
from streams.accounting import ScanReport
from streams.errors import StreamError
from streams.job.ending import remove_empty_parents
from streams.job.localdir import node_local_dir
from streams.job.output import drained, scan_ok, write_report

__all__ = ["ScanOutcome", "finalize", "import_ahead"]


@dataclass(frozen=True)
class ScanOutcome:
    """What one finalized scan produced (rank 0's view, broadcast)."""

    scan: str
    report: ScanReport
    ok: bool
    files: Dict[str, str]
    timing: Dict[str, Any]
    name: str = ""          # the name of its files in OUT (:mod:`streams.job.names`)
    problem: str = ""       # why its results are not where they belong (a failed drain)


def finalize(comm: Any, layout: Any, roles: Any, loop: Any, analysis: Any,
             o: Any, scan: str, on_written: Optional[Callable],
             sec: Any, proto: Any) -> ScanOutcome:
    """Collective over `comm`: merge, gather, write and drain one scan (``loop``: this
    rank's :mod:`streams.job.ranks` loop; ``o``: the job's ``SessionOptions``)."""
    t0 = time.monotonic()
    partial = loop.partial_of(scan)
    if partial is None:
        partial = analysis.empty()
    if hasattr(partial, "compact"):
        partial = partial.compact()
    node_ranks = [r for r in range(comm.size) if roles.node_of[r] == layout.index]
    err: Optional[BaseException] = None
    merged = None
    try:
        merged = merge_ranks(comm, node_ranks, partial, analysis.merge)
    except TreeMergeError as e:
        err = StreamError(str(e))
    if layout.is_leader:
        try:
            merged = merge_ranks(comm, list(layout.leader_ranks),
                                 merged if err is None else analysis.empty(), analysis.merge)
        except TreeMergeError as e:
            err = err or StreamError(str(e))
    agree(comm, err, f"merging scan {scan}", default=StreamError, node=layout.name)
    t_merge = time.monotonic()
    mine = loop.closed_report(scan)
    gathered = comm.gather((mine, _peak_rss_mib()), root=0)
    files: Dict[str, str] = {}
    timing: Dict[str, Any] = {}
    report: Any = None
    result: Any = None
    local_dir = os.path.join(expand_node(o.local, layout.name), scan)
    name = bcast_result(comm, lambda: loop.out_name(scan))
    with agreed(comm, f"writing scan {scan}", default=StreamError, node=layout.name):
        if comm.rank == 0:
            reports = [m for m, _ in gathered]
            rss = [r for _, r in gathered]
            memory = {"peak_rss_mib": rss,
                      "receiver_peak_rss_mib": max(rss[rk] for rk in roles.servers),
                      "assembler_bound_mib": round(o.memory_bytes / 2**20, 1),
                      "outbox_bound_mib": round(o.outbox_bytes / 2**20, 1)}
            report = loop.final_report(scan, [reports[rk] for rk in roles.servers])
            if report.duplicates_across and not analysis.duplicates_safe:
                report.invalid = (
                    f"{report.duplicates_across} frame(s) reached two receivers and were "
                    f"both analysed; {analysis.name} sums over frames, so its result counts "
                    "them twice (the source sent them twice: see the rejection examples)")
            node_dir = node_local_dir(o.local, layout.name, create=True)
            localfs.ensure_dir(node_dir, local_dir)      # ours, 0700, no link followed
            # the analysis's own files (CSV, PNG, stage 2's input) are drained with it
            out = finish(analysis, merged, replace(report.geometry, scan=name),
                         os.path.join(local_dir, f"{name}.h5"), report.coverage(),
                         proto.detector_metadata(loop.socket, scan))
            if out.problem:
                report.invalid = "; ".join(x for x in (report.invalid, out.problem) if x)
            first_live = loop.first_live(name)
            timing = {"merge_s": round(t_merge - t0, 4),
                      "write_s": round(time.monotonic() - t_merge, 4),
                      "receive_s": round(report.last_message - report.first_message, 4),
                      "first_live_after_first_message_s":
                          None if first_live is None else
                          round(first_live - report.first_message, 4),
                      "finalized_after_last_message_s":
                          round(time.monotonic() - report.last_message, 4)}
            files = {"h5": f"{name}.h5", "report": f"{name}.json",
                     **{os.path.basename(p): os.path.basename(p) for p in out.files}}
            renamed = {} if name == scan else {"name": name, "scan_as_sent": scan}
            write_report(os.path.join(local_dir, f"{name}.json"), report,
                         {**renamed, "analysis": analysis.name, "outputs": files,
                          "timing": timing,
                          "h5_bytes": out.bytes, "roles": roles.describe("receiver"),
                          "memory": memory, "allow_loss": o.allow_loss,
                          "served": scan_ok(report, o.allow_loss),
                          "security": sec.describe() if sec is not None else None})
            result = out.partial
    loop.forget(scan)        # e.g. a Stream V2 start's arrays: written now
    problem, keep_local = "", False
    if on_written is not None:
        written = comm.bcast({layout.name: sorted(files.values())} if comm.rank == 0
                             else None, root=0)
        if comm.rank == 0:
            loop.release_name(name)    # its "receiving" record, replaced by the drain
        problem, keep_local = drained(comm, on_written, name, os.path.join(o.local, scan),
                                written, local_dir, o.out)
    if comm.rank == 0:      # the final message after the drain: a failed end is told
        loop.publish(scan, time.monotonic(), final=True, partial=result,
                     ended={"served": scan_ok(report, o.allow_loss) and not problem,
                            "failed": problem or None})
        if not keep_local:
            shutil.rmtree(local_dir, ignore_errors=True)
            remove_empty_parents(local_dir, o.local)
    return bcast_result(comm, lambda: ScanOutcome(
        scan, report, scan_ok(report, o.allow_loss) and not problem, files, timing, name,
        problem))


def import_ahead() -> None:
    """Rank 0, at the job's set-up: h5py, which a scan's write imports, or the first scan's
    end pays for it after its last frame (0.1-0.2 s here: py-spy, bench/README.md's DECTRIS
    legacy section)."""
    import h5py  # noqa: F401


def _peak_rss_mib() -> float:
    """This process's peak resident set so far (MiB; Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
