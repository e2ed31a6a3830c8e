"""``stager stream receive|watch|view``: live detector streams into the nodes of one MPI job.

``receive`` binds one receiver per node, writes the rendezvous file, serves
``--scans`` scans into ``DIR/<scan>.h5`` and ``.json`` (drained from node-local
storage), runs ``--then`` on each (:mod:`streams.after`), and exits 0 only when
every scan arrived whole (within ``--allow-loss``) and every ``--then`` succeeded,
1 otherwise, 2 on bad options. ``watch`` prints each live message's progress
(``--png``: the current image on Enter or SIGUSR1); ``view`` serves a web page
(:mod:`streams.view.server`).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any, Dict, Optional, Tuple


def add_arguments(p: argparse.ArgumentParser) -> None:
    from core.job import add_node_id_arguments
    from streams import protocols

    sub = p.add_subparsers(dest="stream_command", metavar="{receive,watch,view}")
    sub.required = True
    r = sub.add_parser("receive", help="receive scans into the nodes of this MPI job")
    from core.options import add_flags
    from streams.job.session import SESSION_OPTIONS as OPTS

    add_flags(r, OPTS, "rendezvous out scans")      # each declared once, in SessionOptions
    add_node_id_arguments(r)
    add_flags(r, OPTS, "stream2")
    r.add_argument("--protocol", metavar="NAME",
                   help=f"the stream protocol: {', '.join(protocols.ROWS)} (default native; "
                        "the table of streams.protocols), or a plug-in's module:Class")
    add_flags(r, OPTS, "analysis")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the analysis (repeatable; JSON values)")
    r.add_argument("--analysis-params", metavar="JSON",
                   help="the analysis's options as one JSON object (a list: one object per "
                        "UDF of udf:A,B); instead of --set")
    from analyses.udfinputs import add_arguments as add_udf_arguments

    add_udf_arguments(r)      # --udf-roi, --corrections
    add_flags(r, OPTS, "bind_host advertise receivers_per_node partition_frames rate "
              "memory_bytes max_open_scans idle_timeout close_wait timeout allow_loss "
              "overwrite live_interval")
    r.add_argument("--then", metavar="COMMAND",
                   help="run COMMAND (no shell; {scan}, {h5}, {out} filled in) on rank 0's "
                        "node when a served scan's files are drained, while the job goes on; "
                        "output in OUT/<scan>.then.log; the job waits for it and exits 1 if "
                        "it fails (streams.after)")
    add_flags(r, OPTS, "spill local")
    add_flags(r, protocols.options())     # each protocol's own options, declared there
    add_flags(r, OPTS, "rcvhwm outbox_bytes insecure authorized_keys allow_from "
              "rendezvous_mode handshake_timeout io_threads")
    from streams.controls import job as control_job

    control_job.add_arguments(r)
    w = sub.add_parser("watch", help="show the live progress of a receiving job")
    w.add_argument("source", metavar="RENDEZVOUS", help="rendezvous file or tcp:// live endpoint")
    w.add_argument("--png", metavar="FILE", help="write the current image here on request")
    w.add_argument("--once", action="store_true", help="exit after the first image")
    w.add_argument("--final", action="store_true", help="exit after a scan's final image")
    w.add_argument("--timeout", type=float, default=None, metavar="S")
    w.add_argument("--certificate", metavar="FILE", help="CURVE client certificate "
                   "(.key_secret; default: the viewers' one the rendezvous file names)")
    w.add_argument("--wait", type=float, default=None, metavar="S",
                   help="wait up to S s for the rendezvous file to appear, or for a new job's "
                        "when it names a job that has ended (default: 60 s for a missing "
                        "file; an ended job's file is an error)")
    w.add_argument("--trust-owner", metavar="USER", action="append",
                   help="also trust a rendezvous file of USER (default: only your own)")
    w.add_argument("--insecure", action="store_true",
                   help="accept a rendezvous without a CURVE key (a job run --insecure)")
    from streams.view.cli import add_arguments as add_view_arguments

    add_view_arguments(sub.add_parser("view", help="a web page of a receiving job, live"))


def _mib(value: Optional[float]) -> Optional[int]:
    return None if value is None else int(value * (1 << 20))


def run(args: argparse.Namespace) -> int:
    if args.stream_command == "watch":
        return _watch(args)
    if args.stream_command == "view":
        from streams.view.cli import run as view

        return int(view(args))
    return _receive(args)


def _receive(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    import stager
    from core.errors import JobError, MpistageError
    from core.mpi.agree import bcast_result
    from stager.errors import PlanError
    from streams.job.output import exit_status
    from core.job import job_of
    from streams import protocols
    from streams.job.session import SESSION_OPTIONS, SessionOptions, receive_scans
    from analyses.loading import analysis_options

    from streams.controls import job as control_job

    comm = MPI.COMM_WORLD
    opts: Any = None
    job: Any = None
    control: Any = None
    then: Any = None

    def drain(c: Any, scan: str, local_template: str, written: Any = None) -> None:
        rep = stager.drain(local_template, opts.out, job, merge=True, written=written,
                           overwrite=opts.overwrite)
        left = [x for n in rep.nodes for x in n.left]
        if left and c.rank == 0:    # someone else's files, or files this job did not write
            print(f"stager stream: WARNING: scan {scan}: not drained (not this job's): "
                  + "; ".join(left), file=sys.stderr, flush=True)
        if then is not None and c.rank == 0:
            then.start(scan)

    def ready(info: Dict[str, Any]) -> None:
        print(f"stager stream: {len(info['receivers'])} receiver(s) ({info['roles']}); "
              f"live {info['live']}; rendezvous {opts.rendezvous}", file=sys.stderr, flush=True)
        sec = info.get("security") or {}
        if sec.get("warning"):
            print(f"stager stream: WARNING: {sec['warning']}", file=sys.stderr, flush=True)
        control_job.start(control, lambda m: print(m, file=sys.stderr, flush=True))

    rejections: Dict[str, Any] = {}
    try:    # refused start: options, the analysis, the output; nothing made yet (exit 2)
        # given flags, then STAGER_STREAM_* (rank 0's, as the job broadcasts them), defaults
        given = {o.name: getattr(args, o.name) for o in SESSION_OPTIONS if hasattr(args, o.name)}
        given.update({o.name: getattr(args, o.name) for o in protocols.options()},
                     rendezvous=os.path.abspath(args.rendezvous), out=os.path.abspath(args.out),
                     memory_bytes=_mib(args.memory), outbox_bytes=_mib(args.outbox),
                     analysis_options=analysis_options(args.analysis_params, args.set))
        if args.then:       # every rank refuses a bad template alike; rank 0 runs it
            from streams.after import AfterScan

            then = AfterScan(args.then, given["out"],
                             lambda m: print(m, file=sys.stderr, flush=True))
        control = control_job.prepare(comm, args, given)     # --control: configured here
        opts = SessionOptions.resolve(**given)
        bcast_result(comm, _check_start, opts)
    except (ValueError, MpistageError) as e:
        control_job.finish(control)
        return _failed(comm, e, 2)
    try:
        from stager import stageout  # noqa: F401  # the drain's modules: not at a scan's end
        job = job_of(args, comm)
        outcomes = receive_scans(job, opts, on_written=drain, on_ready=ready,
                                 on_rejections=rejections.update)
    except (ValueError, MpistageError) as e:
        control_job.finish(control)      # disarm before the job ends
        if then is not None:
            then.wait()             # the scans served before the failure are handed on
        return _failed(comm, e, 2 if isinstance(e, (ValueError, PlanError, JobError))
                       else 1)
    except BaseException:       # interrupted: the scans' commands end with the job
        if then is not None:
            then.stop()
        raise
    finally:
        control_job.finish(control)      # at the end, or on any failure: disarm
    if comm.rank == 0:
        for o in outcomes:
            verdict = "ok" if o.ok else "NOT DRAINED" if o.problem else "NOT SERVED"
            print(f"{o.report.summary()} [{verdict}] -> {os.path.join(opts.out, o.files['h5'])}"
                  f"{'' if o.name in ('', o.scan) else f' (written as {o.name})'}", flush=True)
        if len(outcomes) < opts.scans and not rejections.get("arming_refused"):
            print(f"stager stream receive: {len(outcomes)} of {opts.scans} scan(s) served "
                  "before the timeout", file=sys.stderr)
        if rejections:
            print(_rejections_line(rejections, opts.out), flush=True)
        if not any(o.ok or o.problem for o in outcomes):    # the last line says why
            why = "; ".join(x for x in (rejections.get("refused"),
                                        rejections.get("live_refused") and
                                        f"live viewers: {rejections['live_refused']}") if x)
            print(f"stager stream receive: nothing served"
                  f"{': ' + why if why else ''}", file=sys.stderr, flush=True)
    # Only rank 0 says how the job went. A rank that left with a non-zero code before rank 0
    # had written the reports made mpirun kill rank 0 mid-write ("1 process returned a
    # non-zero exit code ... the job has been aborted"): the scan's report was lost.
    status = exit_status([o.report for o in outcomes], opts.scans, opts.allow_loss)
    if then is not None and not then.wait():
        status = status or 1
    problems = [o.problem for o in outcomes if o.problem]
    if rejections.get("arming_refused"):     # rank 0's: the job ended for it
        problems.append(f"the detector's series was refused at its arming, so the job "
                        f"ended: {rejections['arming_refused']}")
    if problems:        # the last lines: where the results of a failed drain are
        status = 1
        if comm.rank == 0:
            for p in problems:
                print(f"stager stream receive: {p}", file=sys.stderr, flush=True)
    return status if comm.rank == 0 else 0


def _check_start(opts: Any) -> None:
    """Rank 0, before the job makes anything: the analysis loads with its options,
    and ``--out`` is inside neither ``--local`` nor ``--spill``."""
    from core.outputs import check_outputs
    from analyses.loading import load_analysis

    load_analysis(opts.analysis, opts.analysis_options, roi=opts.udf_roi,
                  corrections=opts.corrections)
    dirs = [(flag, d) for flag, d in (("--local", opts.local), ("--spill", opts.spill)) if d]
    for flag, d in dirs:
        check_outputs([opts.out], [d.split("%n")[0].rstrip("/") + "/"],
                      what="--out", hint=f"give an --out outside {flag} {d}")


#: How long a rank that failed alone waits for rank 0 (told by the loop's abort) to say
#: why and end the job, before it says so itself.
_GRACE_S = 5.0


def _failed(comm: Any, e: BaseException, code: int) -> int:
    """Rank 0 says what failed, once; the exit status is ``code`` (2: bad input).

    An error every rank raised alike (agreed) returns on every rank; anything else
    (one receiver's analysis failing) ends the job with ``MPI_Abort``, rank 0 saying
    why first, another rank only if it is not ended after :data:`_GRACE_S`."""
    everyone = (code == 2 and isinstance(e, ValueError)) or \
        getattr(e, "agreed_by", 0) == comm.size
    if comm.rank == 0:
        print(f"stager stream receive: {e}", file=sys.stderr, flush=True)
    if everyone:
        return code if comm.rank == 0 else 0
    if comm.rank != 0:
        time.sleep(_GRACE_S)
        print(f"stager stream receive: rank {comm.rank}: {e}", file=sys.stderr, flush=True)
    comm.Abort(code)
    return code


def _rejections_line(job: Dict[str, Any], out: str) -> str:
    """The job's summary of every rejected message (tied to a scan or not)."""
    n = job.get("rejected", 0)
    line = f"job: {n} messages rejected"
    if n:
        line += " (" + ", ".join(f"{k} {v}" for k, v in job["by_reason"].items()) + ")"
        if job.get("examples"):
            line += f"; e.g. {job['examples'][0]}"
    never = job.get("series_never_started") or {}
    if never:
        line += "; series that never started: " + ", ".join(
            f"{s} ({d['images']} images, {d['ends']} ends)" for s, d in never.items())
    if job.get("refused"):
        line += f"; {job['refused']}"
    if job.get("live_refused"):
        line += f"; live viewers: {job['live_refused']}"
    return line + f" -> {os.path.join(out, 'rejections.json')}"


def _endpoint(args: argparse.Namespace) -> Tuple[str, Optional[str], Optional[str], Any]:
    """The live endpoint, the CURVE server key and client certificate (None: plain), and
    what tells that the job ended (None for a ``tcp://`` endpoint)."""
    from streams.protocols.native.rendezvous import read_rendezvous_json, wait_for_rendezvous

    source = args.source
    if source.startswith("tcp://"):
        return source, None, None, None
    d = wait_for_rendezvous(source, timeout=60.0 if args.wait is None else args.wait,
                            trust_owner=args.trust_owner, wait_ended=args.wait is not None,
                            reader=read_rendezvous_json)
    live = d.get("live")
    if not live:
        raise ValueError(f"{source}: the job publishes no live endpoint")
    key = d.get("curve_serverkey")
    if key is None and not args.insecure:
        raise ValueError(f"{source} names no CURVE key (a job run --insecure, or a file that "
                         "is not the job's): watch it in plain text only with --insecure")
    st = os.stat(source)
    # a viewer's certificate suffices; a producer's works too (it may watch)
    return live, key, d.get("viewer_certificate") or d.get("client_certificate"), \
        (st.st_dev, st.st_ino, d)


def _job_ended(source: str, written: Any) -> Optional[str]:
    """Why the job a viewer watches has ended (its rendezvous file gone, replaced, or
    naming a process that is gone), or None."""
    from streams.protocols.native.rendezvous import ended

    dev, ino, d = written
    try:
        st = os.stat(source)
    except FileNotFoundError:
        return f"the job ended (its rendezvous file {source} was removed)"
    if (st.st_dev, st.st_ino) != (dev, ino):
        return f"the job ended ({source} now names another job)"
    return ended(d)


def _watch(args: argparse.Namespace) -> int:
    from streams.job.live import LiveView

    from streams.errors import StreamError

    try:
        ep, key, cert, written = _endpoint(args)
        view = LiveView(ep, key, args.certificate or cert)
    except (OSError, ValueError, StreamError) as e:
        print(f"stager stream watch: {e}", file=sys.stderr)
        return 2
    want = {"png": False}
    if args.png:
        signal.signal(signal.SIGUSR1, lambda *_: want.update(png=True))
    print(f"watching {ep} (Enter or SIGUSR1: write {args.png or 'no PNG: give --png'})",
          file=sys.stderr, flush=True)
    prev: Dict[str, Any] = {}
    end = None if args.timeout is None else time.monotonic() + args.timeout
    last = None
    next_look = time.monotonic() + 1.0
    try:
        while end is None or time.monotonic() < end:
            if written is not None and time.monotonic() >= next_look:
                next_look = time.monotonic() + 1.0
                gone = _job_ended(args.source, written)
                if gone is not None:
                    msg = view.receive(0.3)
                    while msg is not None:      # what it published before it ended
                        print(_line(msg, prev), flush=True)
                        last = msg if not msg.job else last
                        msg = view.receive(0.3)
                    print(f"stager stream watch: {gone}", file=sys.stderr, flush=True)
                    break
            if args.png and not args.once and sys.stdin and sys.stdin.isatty():
                import select

                if select.select([sys.stdin], [], [], 0)[0]:
                    sys.stdin.readline()
                    want["png"] = True
            msg = view.receive(0.2)
            if msg is None:
                if want["png"] and last is not None:
                    _write_png(args.png, last)
                    want["png"] = False
                continue
            print(_line(msg, prev), flush=True)
            if msg.job:     # the job's rejections: a line, no image
                continue
            last = msg
            if want["png"] or (args.once and args.png and msg.valid.any()):
                _write_png(args.png, msg)
                want["png"] = False
            if args.once and msg.valid.any():
                return 0
            if args.final and msg.final:
                if args.png:
                    _write_png(args.png, msg)
                from streams.view.results import failed_end

                return 1 if failed_end(msg.progress) else 0
    finally:
        view.close()
    return 1 if last is None else 0


def _write_png(path: Optional[str], msg: Any) -> None:
    if not path:
        return
    from core import localfs

    localfs.write_bytes_atomic(os.path.abspath(path), msg.png(), mode=0o644)
    print(f"wrote {path}", file=sys.stderr, flush=True)


def _line(msg: Any, prev: Dict[str, Any]) -> str:
    p = msg.progress
    if getattr(msg, "job", False):     # the job's rejections, no scan
        return _why(p)[2:-1] or "job: nothing rejected"
    t = msg.header.get("t", time.time())
    old = prev.get(msg.scan)
    fps = gbs = 0.0
    if old is not None and t > old[0]:
        fps = (p.get("complete", 0) - old[1]) / (t - old[0])
        gbs = (p.get("bytes", 0) - old[2]) / (t - old[0]) / 1e9
    prev[msg.scan] = (t, p.get("complete", 0), p.get("bytes", 0))
    idle = p.get("idle_s")
    return (f"{msg.scan}: {p.get('complete', 0)}/{p.get('frames', 0)} complete, "
            f"{p.get('incomplete', 0)} incomplete, {p.get('not_arrived', 0)} "
            f"{'missing' if msg.final else 'not arrived'}, {fps:.0f} frames/s, {gbs:.3f} GB/s, "
            f"last frame {'-' if idle is None else f'{idle:.1f} s'} ago, "
            f"{p.get('rejected', 0)} rejected{_why(p)}, {p.get('refused', 0)} connections "
            f"refused{_end(msg) if msg.final else ''}")


def _end(msg: Any) -> str:
    from streams.view.results import failed_end

    why = failed_end(msg.progress)
    return " [final]" if why is None else f" [final, FAILED: {why}]"


def _why(p: Dict[str, Any]) -> str:
    """Rejections by reason with an example, and the job's (any scan or none)."""
    parts = []
    by = p.get("rejected_by_reason") or {}
    if by:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(by.items())))
    if p.get("rejection_example"):
        parts.append(f"e.g. {p['rejection_example']}")
    job = p.get("job_rejected") or {}
    if job.get("total"):
        text = f"job: {job['total']} rejected (" + ", ".join(
            f"{k} {v}" for k, v in job.get("by_reason", {}).items()) + ")"
        if job.get("examples"):
            text += f" e.g. {job['examples'][0]}"
        parts.append(text)
    if job.get("held_before_start"):
        parts.append("held before their start: " + ", ".join(
            f"{s} {n}" for s, n in sorted(job["held_before_start"].items())))
    return f" [{'; '.join(parts)}]" if parts else ""
