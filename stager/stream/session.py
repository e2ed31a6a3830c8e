"""A receiving job: receivers on the nodes of one MPI job, analysis on arrival, outputs.

:func:`receive_scans` is what ``mpirun -n N stager stream receive`` runs on every
rank. Collective over `comm`:

1. options from rank 0 (one broadcast); the node layout
   (:func:`stager.mpi.nodes.node_layout`: ``emulate_nodes``, ``node_id_env``) and
   the roles (:func:`stager.stream.roles.assign_roles`);
2. every receiver binds its PULL socket (or, with Stream V2, connects to the
   detector); rank 0 binds the live PUB socket, gathers the endpoints and writes
   the rendezvous file atomically -- each step agreed, so a failed bind on one
   node is the same error on every rank;
3. the loop (:class:`stager.stream.ranks.RankLoop`) until ``scans`` scans are
   finalized (or the overall ``timeout`` closed what was open);
4. per scan, collectively: the partials merged per node, then across node
   leaders, each in a fixed tree (:func:`tree_reduce`); the receivers' reports
   gathered and merged; rank 0 writes ``<scan>.h5`` and ``<scan>.json`` to its
   node-local directory and the caller's ``on_written`` drains them to the
   shared output; a final live message.

Returns the merged reports on every rank (rank 0's, broadcast).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from stager.mpi.agree import agree, agreed, bcast_result
from stager.mpi.nodes import check_node_options, node_layout
from stager.nodelocal import localfs
from stager.planning.plan import expand_node
from stager.stream.accounting import ScanReport
from stager.stream.analysis import load_analysis
from stager.stream.errors import StreamError
from stager.stream.output import scan_ok, write_report, write_scan
from stager.stream.roles import assign_roles, partition_frames, tree_schedule

__all__ = ["SessionOptions", "receive_scans", "tree_reduce", "ScanOutcome"]


@dataclass
class SessionOptions:
    """Options of a receiving job (plain data, resolved on rank 0 and broadcast).

    Attributes
    ----------
    rendezvous : str
        Where to write the rendezvous file.
    out : str
        Shared output directory (``<scan>.h5``, ``<scan>.json``, live snapshots).
    local : str
        Node-local directory for outputs before the drain (``%n`` = node).
    scans : int
        Scans to serve, in a row.
    bind_host : str
        Interface to bind (``*`` = all; ``127.0.0.1`` for tests).
    advertise : str, optional
        Host name to publish (default: this host's name when binding ``*``).
    receivers_per_node : int
    partition_frames : int, optional
        K; default from ``rate`` (100 ms of frames per receiver) or 16 MiB.
    rate : float, optional
        Expected frames/s of the detector (sizes partitions).
    memory_bytes, idle_timeout, rcvhwm
        Per receiver (see :class:`~stager.stream.receiver.Receiver`).
    timeout : float, optional
        Overall seconds; then open scans close as ``stopped`` and the job ends.
    close_wait : float
        Seconds rank 0 waits for the other receivers after the first closed a scan.
    allow_loss : float
        Fraction of frames a scan may lose and still count as served (exit 0).
    live_interval : float
        Seconds between live publications.
    spill : str, optional
        Node-local directory (``%n``) for spilled partitions.
    stream2 : str, optional
        Receive DECTRIS Stream V2 from this endpoint instead of the native protocol.
    v2_grace : float
        Stream V2: seconds without images before a shared ``end`` closes a series.
    v2_decode_threads : int
        Stream V2: threads per receiver that decode payloads off the receiving
        thread (0: none).
    v2_pixel_mask : bool
        Stream V2: zero the pixels the start's ``pixel_mask`` marks in every frame
        before the analysis sees it (needs SIMPLON ``header_detail: all``).
    analysis : str, optional
        ``pkg.module:NAME`` or ``FILE.py[:NAME]`` (default: the per-frame sum).
    analysis_options : dict
    heartbeat, credit, outbox_bytes, batch
        Loop tuning: heartbeat period, partitions a worker may hold, the receiver's
        outbox bound in bytes, messages read per socket step.
    """

    rendezvous: str
    out: str
    local: str = ""
    scans: int = 1
    bind_host: str = "*"
    advertise: Optional[str] = None
    receivers_per_node: int = 1
    partition_frames: Optional[int] = None
    rate: Optional[float] = None
    memory_bytes: int = 256 << 20
    idle_timeout: float = 30.0
    rcvhwm: int = 100
    timeout: Optional[float] = None
    close_wait: float = 30.0
    allow_loss: float = 0.0
    live_interval: float = 1.0
    spill: Optional[str] = None
    stream2: Optional[str] = None
    v2_grace: float = 1.0
    v2_pixel_mask: bool = False
    v2_decode_threads: int = 0
    analysis: Optional[str] = None
    analysis_options: Dict[str, Any] = field(default_factory=dict)
    heartbeat: float = 0.25
    credit: int = 2
    outbox_bytes: int = 64 << 20
    batch: int = 200

    def check(self) -> None:
        """Reject impossible values (pure; raises ValueError naming the option)."""
        if self.scans < 1:
            raise ValueError(f"--scans must be >= 1, got {self.scans}")
        if not 0 <= self.allow_loss < 1:
            raise ValueError(f"--allow-loss must be a fraction in [0, 1), got {self.allow_loss}")
        if self.partition_frames is not None and self.partition_frames < 1:
            raise ValueError("--partition-frames must be >= 1")
        for name in ("idle_timeout", "live_interval", "heartbeat", "close_wait"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("--timeout must be positive")
        if self.v2_decode_threads < 0:
            raise ValueError(f"--v2-decode-threads must be >= 0, got {self.v2_decode_threads}")
        if self.credit < 1 or self.batch < 1:
            raise ValueError("credit and batch must be >= 1")
        if self.spill is not None and not os.path.isabs(self.spill.replace("%n", "x")):
            raise ValueError(f"--spill {self.spill}: give an absolute directory")


@dataclass(frozen=True)
class ScanOutcome:
    """What one finalized scan produced (rank 0's view, broadcast)."""

    scan: str
    report: ScanReport
    ok: bool
    files: Dict[str, str]
    timing: Dict[str, Any]


def tree_reduce(comm: Any, ranks: Sequence[int], value: Any, merge: Callable[[Any, Any], Any],
                tag: int = 7201) -> Any:
    """Point-to-point over `comm` among ``ranks`` (every one of them must call): merge
    their values in the fixed tree of :func:`tree_schedule` (lower position first).

    Returns the merged value at ``ranks[0]``, None elsewhere. An error at any step
    travels up the tree as text and is raised at ``ranks[0]``; the caller agrees
    on it afterwards (every rank of ``ranks`` has finished its sends by then).
    """
    pos = list(ranks).index(comm.rank)
    mine: Any = ("ok", value)
    for rnd in tree_schedule(len(ranks)):
        for dst, src in rnd:
            if pos == src:
                comm.send(mine, dest=ranks[dst], tag=tag)
                return None
            if pos == dst:
                other = comm.recv(source=ranks[src], tag=tag)
                if mine[0] == "ok" and other[0] == "ok":
                    try:
                        mine = ("ok", merge(mine[1], other[1]))
                    except Exception as e:   # carried up the tree
                        mine = ("err", f"rank {comm.rank}: merge failed: {e!r}")
                elif mine[0] == "ok":
                    mine = other
    if mine[0] == "err":
        raise StreamError(mine[1])
    return mine[1]


def _resolve(options: SessionOptions) -> SessionOptions:
    options.check()
    if not options.local:
        options.local = os.path.join("/tmp", f"mpistage-stream-{os.getuid()}-{os.getpid()}",
                                     "%n")
    return options


def _rendezvous(options: SessionOptions, endpoints: List[str], live: Optional[str]) -> None:
    from stager.stream.rendezvous import write_rendezvous

    d = os.path.dirname(os.path.abspath(options.rendezvous))
    os.makedirs(d, exist_ok=True)
    if options.stream2:
        # Nothing for a native producer to connect to: a protocol it refuses.
        text = json.dumps({"protocol": "dectris-stream2", "detector": options.stream2,
                           "live": live}, indent=1) + "\n"
        localfs.write_bytes_atomic(os.path.abspath(options.rendezvous), text.encode(),
                                   mode=0o644)
    else:
        write_rendezvous(options.rendezvous, endpoints, live)


def receive_scans(comm: Any, options: SessionOptions, *, emulate_nodes: Optional[int] = None,
                  node_id_env: Optional[str] = None,
                  on_written: Optional[Callable[[Any, str, str], None]] = None,
                  on_ready: Optional[Callable[[Dict[str, Any]], None]] = None,
                  on_rejections: Optional[Callable[[Dict[str, Any]], None]] = None
                  ) -> List[ScanOutcome]:
    """Collective over `comm`: every rank must call. Receive ``options.scans`` scans.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    options : SessionOptions
        Rank 0's value is used (broadcast).
    emulate_nodes, node_id_env
        How ranks form nodes (:func:`stager.mpi.nodes.node_layout`).
    on_written : callable(comm, scan, local_template), optional
        Collective: called on every rank after rank 0 wrote a scan's files into its
        node-local ``local_template`` (``%n`` = node): the command drains them to
        ``options.out`` here. The local files are removed afterwards.
    on_ready : callable(dict), optional
        Rank 0: called after the rendezvous file is written (endpoints, roles).
    on_rejections : callable(dict), optional
        Rank 0: called at the end with every message the receivers rejected during
        the job (tied to a scan or not; Stream V2 series that never started),
        also written to ``<out>/rejections.json``.

    Returns
    -------
    list of ScanOutcome
        In finalize order, the same on every rank.

    Raises
    ------
    ValueError
        Bad options (every rank).
    StreamError
        A bind, the rendezvous, the analysis, a merge or a write failed anywhere
        (every rank, naming rank, host, node).
    """
    from mpi4py import MPI

    from stager.stream.coordinator import Coordinator
    from stager.stream.ranks import RankLoop

    opts: SessionOptions = bcast_result(comm, _resolve, options)
    emulate, env_var = bcast_result(comm, lambda: (emulate_nodes, node_id_env))
    check_node_options(comm.size, emulate, env_var)
    fcomm = comm.Dup()     # collectives of the finalize, apart from the loop's messages
    layout = node_layout(fcomm, emulate, env_var)
    # before the try: the finally below reads them whatever failed first
    loop: Any = None
    publisher: Any = None
    try:
        node_of = fcomm.allgather(layout.index)
        roles = assign_roles(node_of, opts.receivers_per_node)
        index = roles.index(comm.rank)
        with agreed(fcomm, "loading the analysis", default=StreamError, node=layout.name):
            analysis = load_analysis(opts.analysis, opts.analysis_options)
        coordinator = Coordinator(roles, "any" if opts.stream2 else "modulo",
                                  close_wait=opts.close_wait, heartbeat=opts.heartbeat) \
            if comm.rank == 0 else None
        endpoint = None
        with agreed(fcomm, "binding the receivers", default=StreamError, node=layout.name):
            loop = RankLoop(comm, roles, analysis, opts, coordinator=coordinator)
            if comm.rank == 0:
                from stager.stream.live import LivePublisher

                os.makedirs(opts.out, exist_ok=True)
                publisher = LivePublisher(f"tcp://{opts.bind_host}:*", opts.out, opts.advertise)
                loop.publisher = publisher
            if opts.spill is not None and index is not None:
                from stager.stream.spill import SPEC_NAME, Spill

                loop.spill = Spill(opts.spill, layout.name, index,
                                   os.path.join(opts.out, SPEC_NAME))
            if index is not None:
                endpoint = _make_socket(loop, opts, index, roles.count)
        endpoints = fcomm.gather(endpoint, root=0)
        with agreed(fcomm, "writing the rendezvous file", default=StreamError):
            if comm.rank == 0:
                eps = [e for e in endpoints if e is not None]
                _rendezvous(opts, eps, publisher.endpoint if publisher else None)
                if opts.spill is not None:
                    from stager.stream.spill import SPEC_NAME, spill_spec_text

                    localfs.write_bytes_atomic(os.path.join(opts.out, SPEC_NAME),
                                               spill_spec_text(opts.spill).encode(), mode=0o644)
                if on_ready is not None:
                    on_ready({"receivers": eps, "live": publisher.endpoint if publisher else None,
                              "roles": roles.describe()})
        outcomes: List[ScanOutcome] = []
        deadline = None if opts.timeout is None else time.monotonic() + opts.timeout
        old = _terminate_handler(loop, opts, layout.names) if comm.rank == 0 else None
        try:
            err: Optional[BaseException] = None
            try:
                loop.run(lambda scan: outcomes.append(
                    _finalize(fcomm, layout, roles, loop, analysis, opts, scan, on_written)),
                    deadline=deadline)
            except StreamError as e:
                err = e
                if not str(e).startswith("stop:"):
                    loop.abort_all(str(e))
            except Exception as e:   # every rank must hear of it
                err = StreamError(f"rank {comm.rank} on node {layout.name}: {e!r}")
                loop.abort_all(str(err))
            if err is not None:
                loop.drain_requests(2.0)
                raise err
            loop.drain_requests()
        finally:
            if old is not None:
                old.__exit__(None, None, None)
        agree(fcomm, None, "receiving")
        summary = _job_rejections(fcomm, loop, opts, outcomes)
        if summary is not None and on_rejections is not None:
            on_rejections(summary)
        return outcomes
    finally:
        if loop is not None and loop.socket is not None:
            loop.socket.close()
        if publisher is not None:
            publisher.close()
        if loop is not None and loop.spill is not None:
            loop.spill.close()
        layout.free()
        fcomm.Free()
        del MPI


def _job_rejections(comm: Any, loop: Any, o: SessionOptions,
                    outcomes: Sequence[ScanOutcome]) -> Optional[Dict[str, Any]]:
    """Collective over `comm`: every rank must call. Every receiver's rejections of
    the whole job (Stream V2: what is still held for series that never started is
    rejected first), summed on rank 0 with the duplicates found only when the
    scans' reports merged (a frame accepted by two receivers), and written to
    ``<out>/rejections.json``. Returns the summary on rank 0, None elsewhere."""
    mine = None
    if loop.socket is not None:
        never = loop.socket.never_started() if hasattr(loop.socket, "never_started") else {}
        asm = loop.socket.assembler
        mine = (loop.index, dict(asm.rejected), list(asm.examples), never)
    got = comm.gather(mine, root=0)
    if comm.rank != 0:
        return None
    total: Dict[str, int] = {}
    examples: List[str] = []
    never_started: Dict[str, Dict[str, int]] = {}
    for item in got:
        if item is None:
            continue
        r, counts, ex, never = item
        for k, v in counts.items():
            total[str(k)] = total.get(str(k), 0) + int(v)
        examples.extend(f"receiver {r}: {e}" for e in ex)
        for series, d in never.items():
            acc = never_started.setdefault(series, {"images": 0, "ends": 0})
            for k, v in d.items():
                acc[k] += v
    across = sum(out.report.duplicates_across for out in outcomes)
    if across:
        total["duplicate"] = total.get("duplicate", 0) + across
        examples.extend(e for out in outcomes for e in out.report.examples
                        if "accepted by two receivers" in e)
    summary = {"rejected": sum(total.values()), "by_reason": dict(sorted(total.items())),
               "examples": examples[:40], "series_never_started": never_started}
    try:
        os.makedirs(o.out, exist_ok=True)
        localfs.write_bytes_atomic(os.path.join(o.out, "rejections.json"),
                                   (json.dumps(summary, indent=1) + "\n").encode(), mode=0o644)
    except OSError as e:   # the scans are written; say so rather than fail the job
        summary["write_error"] = f"{o.out}/rejections.json: {e}"
    return summary


def _make_socket(loop: Any, o: SessionOptions, index: int, count: int) -> str:
    def kfn(g: Any) -> int:
        if o.partition_frames:
            return o.partition_frames
        return partition_frames(g.frame_bytes, count, rate=o.rate, frames=g.frames)

    if o.stream2:
        from stager.stream.streamv2_receiver import StreamV2Receiver

        v2 = StreamV2Receiver(loop.deliver, o.stream2, partition_frames=kfn,
                                memory_bytes=o.memory_bytes, idle_timeout=o.idle_timeout,
                                rcvhwm=o.rcvhwm, on_close=loop.on_close,
                                apply_pixel_mask=o.v2_pixel_mask,
                                decode_threads=o.v2_decode_threads,
                                on_start=lambda s: loop.share_v2("v2start", s),
                                on_end=lambda e: loop.share_v2("v2end", e))
        v2.connect()
        loop.socket = v2
        return f"stream2:{o.stream2}"
    from stager.stream.receiver import Receiver

    sock = Receiver(loop.deliver, index=index, count=count, bind=f"tcp://{o.bind_host}:*",
                    advertise=o.advertise, rcvhwm=o.rcvhwm, partition_frames=kfn,
                    memory_bytes=o.memory_bytes, idle_timeout=o.idle_timeout,
                    on_close=loop.on_close)
    loop.socket = sock
    return sock.bind()


def _finalize(comm: Any, layout: Any, roles: Any, loop: Any, analysis: Any,
              o: SessionOptions, scan: str, on_written: Optional[Callable]) -> ScanOutcome:
    """Collective over `comm`: merge, gather, write and drain one scan."""
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
        merged = tree_reduce(comm, node_ranks, partial, analysis.merge)
    except StreamError as e:
        err = e
    if layout.is_leader:
        try:
            merged = tree_reduce(comm, list(layout.leader_ranks),
                                 merged if err is None else analysis.empty(), analysis.merge)
        except StreamError as e:
            err = err or e
    agree(comm, err, f"merging scan {scan}", default=StreamError, node=layout.name)
    t_merge = time.monotonic()
    mine = loop.closed_reports.pop(scan, None) if loop.is_receiver else None
    gathered = comm.gather((mine, _peak_rss_mib()), root=0)
    files: Dict[str, str] = {}
    timing: Dict[str, Any] = {}
    report: Any = None
    local_dir = os.path.join(expand_node(o.local, layout.name), scan)
    with agreed(comm, f"writing scan {scan}", default=StreamError, node=layout.name):
        if comm.rank == 0:
            coord = loop.coord
            reports = [m for m, _ in gathered]
            rss = [r for _, r in gathered]
            memory = {"peak_rss_mib": rss,
                      "receiver_peak_rss_mib": max(rss[rk] for rk in roles.receivers),
                      "assembler_bound_mib": round(o.memory_bytes / 2**20, 1),
                      "outbox_bound_mib": round(o.outbox_bytes / 2**20, 1)}
            recv_reports = [reports[rk] for rk in roles.receivers]
            for r, rep in enumerate(recv_reports):
                if rep is not None:
                    coord.closed(r, rep, time.monotonic())
            report = coord.merged(scan, final=True)
            if hasattr(partial, "compact") and merged is not None:
                merged = merged.compact()
            os.makedirs(local_dir, mode=0o700, exist_ok=True)
            h5 = os.path.join(local_dir, f"{scan}.h5")
            start = getattr(loop.socket, "starts_by_scan", {}).get(scan)
            size = write_scan(h5, analysis, merged, report, detector=_detector(start, loop, o))
            pub = loop.publisher
            first_live = pub.first_published.get(scan) if pub is not None else None
            timing = {"merge_s": round(t_merge - t0, 4),
                      "write_s": round(time.monotonic() - t_merge, 4),
                      "receive_s": round(report.last_message - report.first_message, 4),
                      "first_live_after_first_message_s":
                          None if first_live is None else
                          round(first_live - report.first_message, 4),
                      "finalized_after_last_message_s":
                          round(time.monotonic() - report.last_message, 4)}
            files = {"h5": f"{scan}.h5", "report": f"{scan}.json"}
            write_report(os.path.join(local_dir, f"{scan}.json"), report,
                         {"analysis": analysis.name, "outputs": files, "timing": timing,
                          "h5_bytes": size, "roles": roles.describe(), "memory": memory,
                          "allow_loss": o.allow_loss,
                          "served": scan_ok(report, o.allow_loss)})
            loop.publish(scan, time.monotonic(), final=True, partial=merged)
    if loop.socket is not None and hasattr(loop.socket, "forget"):
        loop.socket.forget(scan)        # Stream V2: the start's arrays are written
    if on_written is not None:
        on_written(comm, scan, os.path.join(o.local, scan))
    if comm.rank == 0:
        shutil.rmtree(local_dir, ignore_errors=True)
        _remove_empty_parents(local_dir, o.local)
    out = bcast_result(comm, lambda: ScanOutcome(scan, report, scan_ok(report, o.allow_loss),
                                                 files, timing))
    return out


def _detector(start: Any, loop: Any, o: SessionOptions) -> Optional[Dict[str, Any]]:
    """Stream V2: what the series' start says of the detector, for ``/detector``."""
    if start is None:
        return None
    channel = loop.socket._channel.get(start.key) if loop.socket is not None else None
    applied = bool(loop.socket is not None and loop.socket.masked(start.scan))
    return {"start": start, "channel": channel, "pixel_mask_applied": applied}


def _remove_empty_parents(local_dir: str, template: str) -> None:
    """rmdir what the scan's ``local_dir`` left: the node's directory, and with the
    default template (``/tmp/mpistage-stream-UID-PID/%n``) its parent, if empty."""
    node_dir = os.path.dirname(local_dir)
    dirs = [node_dir]
    if os.path.basename(os.path.dirname(template)).startswith("mpistage-stream-"):
        dirs.append(os.path.dirname(node_dir))
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            break       # not empty (another scan, or the user's files), or gone


def _peak_rss_mib() -> float:
    """This process's peak resident set so far (MiB; Linux reports KiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _terminate_handler(loop: Any, o: SessionOptions, nodes: Sequence[str]) -> Any:
    """Rank 0: on SIGTERM (the launcher ends the job after a rank died) or SIGINT, write
    the report of every open scan from the last heartbeats, naming the lost ranks, then
    exit (143, or 130).

    Returns the entered :class:`stager.staging.interrupt.Handling`; call ``__exit__`` to
    restore the previous handlers. The reports are written by its watchdog thread,
    woken through ``signal.set_wakeup_fd``, not by a Python signal handler: when a rank
    dies, rank 0's main thread may be blocked in an MPI call with it, where no handler
    runs. Writing takes a few ms (measured 2-5 ms), but Open MPI's ``mpirun`` sometimes
    sent SIGKILL within milliseconds of SIGTERM after a rank was killed (the report
    was lost in 2-4 of 8 runs of ``test_stream_receive``'s killed-receiver test, none
    with ``--mca odls_base_sigkill_timeout 5``): launch the receiver with that option
    (``slurm/stream-session.sbatch`` does).
    """
    from stager.staging.interrupt import Handling

    def write_reports(signum: int) -> None:
        now = time.monotonic()
        coord = loop.coord
        for scan in list(coord.open_scans()):
            try:
                rep, extra = coord.kill_report(scan, now, list(nodes))
                extra["signal"] = signal.Signals(signum).name
                os.makedirs(o.out, exist_ok=True)
                write_report(os.path.join(o.out, f"{scan}.json"), rep, extra)
            except Exception:   # we are being terminated; do what we can
                pass

    handling = Handling(grace=0.0, emergency=write_reports)
    return handling.__enter__()


def options_dict(o: SessionOptions) -> Dict[str, Any]:
    return asdict(o)
