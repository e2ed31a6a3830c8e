"""How a receiving job ends: the summary of what it rejected, its node-local directories
removed when empty, and, interrupted, one line and the open scans' reports.

Rank 0 of :func:`streams.job.session.receive_scans` calls these; split from the session
so that each phase of a job has a module of its own.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from core import localfs
from core.interrupt import Handling
from core.nodes import expand_node
from streams.job.localdir import local_root
from streams.job.output import write_report
from streams.protocols.native.rendezvous import remove_rendezvous
from streams.security import refusals_line

__all__ = ["job_rejections", "remove_empty_parents", "interrupted"]


def job_rejections(comm: Any, loop: Any, o: Any,
                    outcomes: Sequence[Any], publisher: Any = None
                    ) -> Optional[Dict[str, Any]]:
    """Collective over `comm`: every rank must call. Every receiver's rejections of
    the whole job (Stream V2: what is still held for series that never started is
    rejected first), summed on rank 0 with the duplicates found only when the
    scans' reports merged (a frame accepted by two receivers), and written to
    ``<out>/rejections.json`` with every connection refused during the job (the
    receivers', those while no scan was open among them, and the live socket's
    viewers). Returns the summary on rank 0, None elsewhere."""
    got = comm.gather(loop.job_rejections(), root=0)
    if comm.rank != 0:
        return None
    total: Counter = Counter()
    examples: List[str] = []
    never_started: Dict[str, Dict[str, int]] = {}
    refused: Counter = Counter()
    outside: Counter = Counter()
    outside_examples: List[str] = []
    for item in got:
        if item is None:
            continue
        r, counts, ex, never, refused_from, pending = item
        refused.update(refused_from)
        for reason, detail in pending:
            outside[reason] += 1
            if len(outside_examples) < 10:
                outside_examples.append(f"receiver {r}: {reason}: {detail}")
        total.update({str(k): int(v) for k, v in counts.items()})
        examples.extend(f"receiver {r}: {e}" for e in ex)
        for series, d in never.items():
            acc = never_started.setdefault(series, {"images": 0, "ends": 0})
            for k, v in d.items():
                acc[k] += v
    across = sum(out.report.duplicates_across for out in outcomes)
    if across:
        total["duplicate"] += across
        examples.extend(e for out in outcomes for e in out.report.examples
                        if "accepted by two receivers" in e)
    live: Dict[Any, int] = {}
    if publisher is not None:
        publisher.refusals()
        live = dict(publisher.refused_from)

    def by_reason(counts: Dict[Any, int]) -> Dict[str, int]:
        out: Counter = Counter()
        for (reason, _), n in counts.items():
            out[reason] += n
        return dict(sorted(out.items()))

    summary = {"rejected": sum(total.values()), "by_reason": dict(sorted(total.items())),
               "examples": examples[:40], "series_never_started": never_started,
               "connections_refused": by_reason(refused),
               "connections_refused_while_no_scan_open": dict(sorted(outside.items())),
               "connections_refused_examples": outside_examples,
               "live_viewers_refused": by_reason(live),
               "refused": refusals_line(refused),
               "live_refused": refusals_line(live),
               "arming_refused": loop.refused}
    try:
        os.makedirs(o.out, exist_ok=True)
        localfs.write_bytes_atomic(os.path.join(o.out, "rejections.json"),
                                   (json.dumps(summary, indent=1) + "\n").encode(), mode=0o644)
    except OSError as e:   # the scans are written; say so rather than fail the job
        summary["write_error"] = f"{o.out}/rejections.json: {e}"
    return summary


def remove_empty_parents(local_dir: str, template: str) -> None:
    """rmdir what the scan's ``local_dir`` left: the node's directory, and with the
    default template (``/tmp/mpistage-stream-UID-XXXXXXXX/%n``) its parent, if empty."""
    node_dir = os.path.dirname(local_dir)
    dirs = [node_dir]
    if os.path.basename(os.path.dirname(template)).startswith("mpistage-stream-"):
        dirs.append(os.path.dirname(node_dir))
    for d in dirs:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            continue    # removed after the last scan already: its parent may be left
        except OSError:
            break       # not empty: another scan's files, or the user's


def interrupted(loop: Any, o: Any, nodes: Sequence[str],
                       rv_written: Sequence[Any] = (), sec: Any = None, node: str = "") -> Any:
    """Rank 0: on SIGTERM (the launcher ends the job after a rank died) or SIGINT, write
    the report of every open scan from the last heartbeats, naming the lost ranks,
    remove the rendezvous file (``rv_written``: its device and inode) and the
    certificates of ``sec``, and the node-local directory of ``node`` when empty, say in
    one line what was interrupted and what was kept, then exit (143, or 130).

    Returns the :class:`core.interrupt.Handling` to enter (``with``); leaving it
    restores the previous handlers. The reports are written by its watchdog thread,
    woken through ``signal.set_wakeup_fd``, not by a Python signal handler: when a rank
    dies, rank 0's main thread may be blocked in an MPI call with it, where no handler
    runs. Writing takes milliseconds, but Open MPI's ``mpirun`` may send SIGKILL about
    as soon after SIGTERM once a rank was killed: launch the receiver with ``--mca
    odls_base_sigkill_timeout 5`` (``slurm/stream-session.sbatch`` does; the figures
    are in ``bench/results/history.md``).
    """
    def write_reports(signum: int) -> None:
        remove_rendezvous(o.rendezvous, rv_written[0] if rv_written else None)
        if rv_written and sec is not None:
            sec.remove_certificates()
        now = time.monotonic()
        coord = loop.coord
        said = []
        for scan in list(coord.open_scans()):
            with contextlib.suppress(Exception):   # we are being terminated; do what we can
                rep, extra = coord.kill_report(scan, now, list(nodes))
                extra["signal"] = signal.Signals(signum).name
                os.makedirs(o.out, exist_ok=True)
                path = os.path.join(o.out, f"{loop.out_name(scan)}.json")
                write_report(path, rep, extra)
                said.append(f"scan {loop.out_name(scan)} was open ({int(rep.got.all(1).sum())}"
                            f"/{rep.geometry.frames} frames in; its frames are not kept, its "
                            f"report is {path})")
        with contextlib.suppress(OSError):
            remove_empty_parents(os.path.join(expand_node(o.local, node), "-"), o.local)
        root = local_root(o.local)
        kept = f"; node-local files kept in {root}" if os.path.isdir(root) and \
            root.startswith(os.path.join(os.sep, "tmp", "mpistage-stream-")) else ""
        loop.say(f"stager stream receive: interrupted by {signal.Signals(signum).name}: "
                 + ("; ".join(said) or "no scan was open")
                 + f"; {len(coord.order)} scan(s) finalized before, in {o.out}{kept}")

    return Handling(grace=0.0, emergency=write_reports)
