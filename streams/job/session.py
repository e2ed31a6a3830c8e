"""A receiving job: receivers on the nodes of one MPI job, analysis on arrival, outputs.

:func:`receive_scans` is what ``mpirun -n N stager stream receive`` runs on every
rank. Collective over `job`:

1. options from rank 0 (one broadcast); the job's node layout
   (a communicator made a job by :meth:`core.job.Job.of`) and the roles
   (:func:`streams.job.roles.assign_roles`);
2. every receiver binds its PULL socket (or, with Stream V2, connects to the
   detector); rank 0 binds the live PUB socket, gathers the endpoints and writes
   the rendezvous file atomically -- each step agreed, so a failed bind on one
   node is the same error on every rank;
3. each rank's loop (:func:`streams.job.ranks.rank_loop`) until ``scans`` scans are
   finalized (or the overall ``timeout`` closed what was open);
4. per scan, collectively: the partials merged per node, then across node
   leaders, each in the fixed tree (:func:`core.mpi.tree.tree_reduce`); the receivers' reports
   gathered and merged; rank 0 writes ``<name>.h5`` and ``<name>.json`` to its
   node-local directory (the name settled when the scan was first heard of:
   :mod:`streams.job.names`) and the caller's ``on_written`` drains them to the
   shared output, a failed drain keeping them (:func:`streams.job.output.drained`);
   a final live message;
5. the end (:mod:`streams.job.ending`): the job's rejections summed, its files and
   empty directories removed; interrupted, one line and the open scans' reports.

Returns the merged reports on every rank (rank 0's, broadcast).
"""
from __future__ import annotations

import contextlib
import os
import resource
import shutil
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional

from core.mpi.agree import agree, agreed, bcast_result
from core.job import Job
from core.mpi.tree import TreeMergeError, tree_reduce
from core import localfs
from core.options import (
    option, options_of, parse_bool, parse_int, parse_number, parse_size, resolve)
from core.nodes import expand_node
from streams.accounting import ScanReport
from analyses.loading import load_analysis
from analyses.output import finish
from streams.errors import StreamError
from streams.job.ending import interrupted, job_rejections, remove_empty_parents
from streams.job.names import OutputNames
from streams.job.localdir import default_local, local_root, node_local_dir
from streams.job.output import drained, scan_ok, write_report
from streams.job.ranks import rank_loop
from streams.job.roles import assign_roles, partition_frames
from streams.job.live import LivePublisher
from streams.job.spill import SPEC_NAME, Spill, spill_spec_text
from streams import protocols
from streams.protocols import chosen
from streams.protocols.native.rendezvous import remove_rendezvous
from streams.security import StreamSecurity, check_authorized_keys

__all__ = ["SessionOptions", "SESSION_OPTIONS", "receive_scans", "ScanOutcome"]


def _mapping(value: Any, name: str) -> Any:
    """A mapping of keyword arguments, or a list of them (one per UDF of ``udf:A,B``)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, Mapping) for v in value):
        return [dict(v) for v in value]
    raise ValueError(f"{name} must be a mapping (or a list of mappings), got {value!r}")


def _octal(value: Any, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(str(value), 8)
    except ValueError:
        raise ValueError(f"{name} must be an octal file mode like 600, got {value!r}") from None


_POSITIVE, _INT1 = parse_number(0, strict=True), parse_int(1)


@dataclass
class SessionOptions:
    """Options of a receiving job (plain data, resolved on rank 0 and broadcast).

    :meth:`resolve` fills what is not given from ``STAGER_STREAM_<NAME>``, then the
    defaults below (:data:`SESSION_OPTIONS`, the shared resolver of ``core.options``).

    Attributes
    ----------
    rendezvous : str
        Where to write the rendezvous file.
    out : str
        Shared output directory (``<scan>.h5``, ``<scan>.json``, live snapshots).
    local : str
        Node-local directory for outputs before the drain (``%n`` = node). Default: a
        new private directory of rank 0 (``mkdtemp``: ``/tmp/mpistage-stream-UID-XXXXXXXX``,
        0700). Given, it must be the user's own
        (:func:`streams.job.localdir.node_local_dir`).
    scans : int
        Scans to serve, in a row: the job ends when this many were finalized (served
        or failed) and nothing else is open; refused ``begin`` s do not count.
    bind_host : str
        Interface to bind (``*`` = all; ``127.0.0.1`` for tests).
    advertise : str, optional
        Host name to publish (default: this host's name when binding ``*``).
    receivers_per_node : int
    partition_frames : int, optional
        K; default from ``rate`` (100 ms of frames per receiver) or 16 MiB.
    rate : float, optional
        Expected frames/s of the detector (sizes partitions).
    memory_bytes : int
        What one open scan may cost a receiver, checked at its ``begin``: partitions,
        accounting, the analysis's state, live snapshot and output
        (:func:`streams.bounds.scan_cost`); a scan that costs more is refused ``too_large``.
    max_open_scans : int
        Scans open at once per receiver; a further ``begin`` is refused ``busy`` (the
        open ones go on). The job holds about ``max_open_scans x memory_bytes``.
    idle_timeout, rcvhwm
        Per receiver (see :class:`~streams.protocols.native.receiver.Receiver`).
    timeout : float, optional
        Overall seconds; then open scans close as ``stopped`` and the job ends.
    close_wait : float
        Seconds rank 0 waits for the other receivers after the first closed a scan.
    allow_loss : float
        Fraction of frames a scan may lose and still count as served (exit 0).
    overwrite : bool
        A scan whose name has files in ``out`` replaces them; by default it is written
        under a new name, ``<scan>.2``, ... (:mod:`streams.job.names`).
    live_interval : float
        Seconds between live publications.
    spill : str, optional
        Node-local directory (``%n``) for spilled partitions.
    stream2 : str, optional
        Receive DECTRIS Stream V2 from this endpoint instead of the native protocol
        (the shorthand of ``protocol="stream2"`` and the endpoint it connects to).
    protocol : str, optional
        The stream protocol, a name of :data:`streams.protocols.ROWS` (default:
        ``stream2`` with ``stream2``, else ``native``).
    protocol_options : dict
        The chosen protocol's own options (its
        :attr:`~streams.protocols.StreamProtocol.options`: Stream V2's ``v2_grace``,
        ``v2_decode_threads``, ``v2_pixel_mask``), resolved like the others; given
        to :meth:`resolve` as keywords of their own.
    analysis : str, optional
        ``pkg.module:NAME`` or ``FILE.py[:NAME]`` (default: the per-frame sum).
    analysis_options : dict or list of dict
    udf_roi : str, optional
        ``udf:`` analyses: a boolean scan mask (``FILE.npy`` or ``FILE.h5:/dataset``);
        only frames where it is True reach the UDFs (:mod:`analyses.udf`).
    corrections : str
        ``udf:`` analyses: ``none`` (default), ``detector`` (the pixel mask of each
        scan's start, as LiberTEM's ``CorrectionSet`` excluded pixels) or a pixel-mask
        ``FILE.npy`` / ``FILE.h5:/dataset``.
    detector_pixel_mask : array, optional
        With ``corrections="detector"``: the mask the detector's control interface gave
        (``--control simplon://``), for a scan whose start carries none. Not a flag:
        the control sets it (:func:`streams.controls.job.prepare`).
    heartbeat, credit, outbox_bytes, batch
        Loop tuning: heartbeat period, partitions a worker may hold, the receiver's
        outbox bound in bytes, messages read per socket step.
    insecure : bool
        Plain ZeroMQ sockets (no CURVE, no ZAP): anyone who reaches a port may send.
    authorized_keys : str, optional
        Directory of public client certificates to accept instead of the job's own
        client certificate (:mod:`streams.security`).
    allow_from : str, optional
        Stream V2: comma-separated peer addresses ZAP accepts.
    rendezvous_mode : int
        File mode of the rendezvous file (default 0600).
    handshake_timeout : float
        Seconds a connection has to complete the ZeroMQ handshake before it is dropped.
    io_threads : int
        ZeroMQ I/O threads per receiving process: CURVE decrypts in them, one
        connection (producer) per thread at a time, so several producers decrypt in
        parallel with more threads (idle threads cost nothing).
    """

    rendezvous: str = option(None, required=True, metavar="FILE",
                             help="write the endpoints here (producers read it)")
    out: str = option(None, required=True, metavar="DIR",
                      help="shared output directory")
    local: str = option("", metavar="DIR", help="node-local directory for outputs before "
                        "the drain (%%n = node; default a new private "
                        "/tmp/mpistage-stream-UID-XXXXXXXX/%%n; given, it must be yours and "
                        "writable only by you)")
    scans: int = option(1, _INT1, metavar="K", help="scans to serve in a row (default 1)")
    bind_host: str = option(
        "*", flag="--bind", metavar="HOST",
        help="interface to bind (default all; 127.0.0.1 for loopback); with "
             "--stream2 also the address to connect to the detector from")
    advertise: Optional[str] = option(None, metavar="HOST", help="host name to publish")
    receivers_per_node: int = option(1, _INT1, metavar="M", help="default 1")
    partition_frames: Optional[int] = option(
        None, _INT1, metavar="K",
        help="frames per partition, the step of the live partial results "
             "(default: 100 ms at --rate, else 16 MiB, at most a 32nd of what a "
             "receiver gets of the scan)")
    rate: Optional[float] = option(None, _POSITIVE, metavar="HZ",
                                   help="expected detector frame rate")
    memory_bytes: int = option(
        256 << 20, parse_size, flag="--memory", dest="memory", type=float, metavar="MiB",
        help="what one open scan may cost a receiver: partitions, accounting, the "
             "analysis's state, live snapshot, output (default 256); a begin "
             "that costs more is refused too_large")
    max_open_scans: int = option(
        2, _INT1, metavar="N", help="scans open at once per receiver (default 2); a further "
        "begin is refused busy, the open ones go on")
    idle_timeout: float = option(
        30.0, _POSITIVE, metavar="S",
        help="close a scan after S seconds without any of its messages (default 30)")
    rcvhwm: int = option(
        100, _INT1, flag="--hwm", metavar="N",
        help="ZeroMQ receive high-water mark (messages per producer, default 100)")
    timeout: Optional[float] = option(None, _POSITIVE, metavar="S",
                                      help="end the job after S seconds")
    close_wait: float = option(
        30.0, _POSITIVE, unset=None, metavar="S",
        help="after one receiver closed a scan, wait S s for the others "
             "(default: the idle timeout)")
    allow_loss: float = option(
        0.0, parse_number(0), metavar="FRACTION",
        help="exit 0 even if up to FRACTION of a scan's frames are missing")
    overwrite: bool = option(
        False, parse_bool,
        help="a scan whose name has files in --out replaces them (default: it is "
             "written as <scan>.2, <scan>.3, ..., said on a line and in its report)")
    live_interval: float = option(1.0, _POSITIVE, metavar="S",
                                  help="seconds between live partial results (default 1)")
    spill: Optional[str] = option(None, metavar="DIR", help="also write partitions to "
                                  "node-local DIR (%%n = node), recorded for stager "
                                  "verify/clean/drain")
    stream2: Optional[str] = option(
        None, metavar="ENDPOINT", help="receive DECTRIS Stream V2 from this detector endpoint "
        "instead (short for --protocol stream2 and its endpoint)")
    protocol: Optional[str] = option(None, metavar="NAME")   # its help names the table
    protocol_options: Dict[str, Any] = field(default_factory=dict)
    analysis: Optional[str] = option(
        None, metavar="SPEC", help="pkg.module:NAME, FLOW.py[:NAME] or udf:MODULE:CLASS[,...] "
        "(LiberTEM UDFs, docs/udf.md); default: per-frame sum")
    analysis_options: Any = option({}, _mapping, env=False)   # --set, --analysis-params
    udf_roi: Optional[str] = option(None)           # flags of analyses.udfinputs
    corrections: str = option("none")
    detector_pixel_mask: Any = None
    heartbeat: float = option(0.25, _POSITIVE)
    credit: int = option(2, _INT1)
    outbox_bytes: int = option(
        64 << 20, parse_size, flag="--outbox", dest="outbox", type=float, metavar="MiB",
        help="partitions a receiver holds for its workers before it stops reading "
             "(default 64)")
    batch: int = option(200, _INT1)
    insecure: bool = option(
        False, parse_bool, default=False,
        help="plain ZeroMQ sockets: anyone who reaches a port may send frames "
             "(the report says so); default: CURVE with the job's keys")
    authorized_keys: Optional[str] = option(
        None, metavar="DIR",
        help="accept the producers whose public certificates (*.key) are in DIR, "
             "and the viewers (live socket only) whose certificates are in "
             "DIR/viewers/, instead of writing a certificate of each role beside "
             "the rendezvous")
    allow_from: Optional[str] = option(
        None, metavar="ADDR[,ADDR]",
        help="Stream V2: accept only the detector at these IP addresses (ZAP)")
    rendezvous_mode: int = option(
        0o600, _octal, type=lambda v: int(v, 8), default=0o600, metavar="OCTAL",
        help="file mode of the rendezvous file (default 600)")
    handshake_timeout: float = option(
        10.0, _POSITIVE, type=float, default=10.0, metavar="S",
        help="drop a connection that completes no ZeroMQ handshake in S seconds")
    io_threads: int = option(
        4, _INT1, type=int, default=4, metavar="N",
        help="ZeroMQ I/O threads per receiver (default 4; CURVE decrypts there, "
             "one producer's connection per thread: several decrypt in parallel)")

    @classmethod
    def resolve(cls, env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> SessionOptions:
        """Keyword > ``STAGER_STREAM_<NAME>`` > default, parsed strictly, then checked. Local.

        ``close_wait`` defaults to ``idle_timeout``. A keyword that is not an option of
        the job is one of the chosen protocol's (:attr:`protocol_options`). Raises
        ``ValueError`` (a value that does not parse, naming it; an option of another
        protocol) or ``TypeError`` (an unknown keyword).
        """
        own = {o.name for o in SESSION_OPTIONS}
        mask = kwargs.pop("detector_pixel_mask", None)      # an array, from the control
        values = resolve(SESSION_OPTIONS, {k: v for k, v in kwargs.items() if k in own}, env,
                         what="stream option")
        values["protocol_options"] = _protocol_options(
            values, {k: v for k, v in kwargs.items() if k not in own}, env)
        if values["close_wait"] is None:
            values["close_wait"] = values["idle_timeout"]
        values["analysis_options"] = _mapping(values["analysis_options"],  # a copy
                                              "analysis_options")
        values["local"] = values["local"] or ""
        opts = cls(detector_pixel_mask=mask, **values)
        opts.check()
        return opts

    def check(self) -> None:
        """Reject impossible values (pure; raises ValueError naming the option): each
        value as its parser of :data:`SESSION_OPTIONS` takes it (options made without
        :meth:`resolve` too), then what no one option's parser can tell."""
        if not self.rendezvous or not self.out:
            raise ValueError("a receiving job needs a rendezvous file and an output directory")
        for o in SESSION_OPTIONS:
            if getattr(self, o.name) is not None:
                o.parse(getattr(self, o.name), "--" + o.name.replace("_", "-"))
        if not 0 <= self.allow_loss < 1:
            raise ValueError(f"--allow-loss must be a fraction in [0, 1), got {self.allow_loss}")
        if self.spill is not None and not os.path.isabs(self.spill.replace("%n", "x")):
            raise ValueError(f"--spill {self.spill}: give an absolute directory")
        if self.insecure and self.authorized_keys:
            raise ValueError("--insecure and --authorized-keys contradict each other")
        if not 0 <= self.rendezvous_mode <= 0o777:
            raise ValueError(f"--rendezvous-mode {self.rendezvous_mode:o} is not a file mode")
        chosen(self.protocol, self.stream2).check(self)   # what the protocol cannot honour


#: The receiving job's options, each once: keyword > ``STAGER_STREAM_<NAME>`` > default
#: (``analysis_options`` only as a keyword).
SESSION_OPTIONS = options_of(SessionOptions, "STAGER_STREAM_")


def _protocol_options(values: Mapping[str, Any], given: Mapping[str, Any],
                      env: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    """The chosen protocol's options from ``given`` (keywords; None: not given), its
    ``STAGER_STREAM_<NAME>`` variables and its defaults. Local, pure.

    Raises ``ValueError`` for a given option of another protocol of the table, and
    ``TypeError`` for a keyword that no protocol declares."""
    proto = chosen(values["protocol"], values["stream2"])
    given = {k: v for k, v in given.items() if v is not None}
    mine = {o.name for o in proto.options}
    theirs = {o.name: o for o in protocols.options()}
    foreign = sorted(k for k in given if k not in mine and k in theirs)
    if foreign:
        raise ValueError(f"{', '.join(theirs[k].flag for k in foreign)}: not an option of "
                         f"the {proto.name} protocol")
    return resolve(proto.options, given, env, what=f"stream option ({proto.name} protocol)")


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


def _resolve(options: SessionOptions) -> SessionOptions:
    options.check()
    # made without resolve(): the protocol's options parsed, the missing ones defaulted
    options.protocol_options = _protocol_options(
        {"protocol": options.protocol, "stream2": options.stream2}, options.protocol_options, {})
    if options.authorized_keys:
        check_authorized_keys(options.authorized_keys)
    if not options.local:
        options.local = default_local()
    return options


def _security(o: SessionOptions) -> Any:
    """Rank 0: the job's :class:`~streams.security.StreamSecurity`.

    CURVE for the native protocol unless ``--insecure``; Stream V2 data is plain
    (the detector cannot do CURVE), restricted by ``--allow-from``, but the job's
    own live socket still uses CURVE.
    """
    allow = tuple(a.strip() for a in (o.allow_from or "").split(",") if a.strip())
    if o.insecure:
        return StreamSecurity.insecure(allow, o.handshake_timeout)
    d = os.path.dirname(os.path.abspath(o.rendezvous))
    os.makedirs(d, mode=0o700, exist_ok=True)
    return StreamSecurity.for_job(o.rendezvous, o.authorized_keys, allow, o.handshake_timeout)


def receive_scans(job: Any, options: SessionOptions, *,
                  on_written: Optional[Callable[[Any, str, str], None]] = None,
                  on_ready: Optional[Callable[[Dict[str, Any]], None]] = None,
                  on_rejections: Optional[Callable[[Dict[str, Any]], None]] = None
                  ) -> List[ScanOutcome]:
    """Collective over `job`: every rank must call. Receive ``options.scans`` scans.

    Parameters
    ----------
    job : core.job.Job or mpi4py.MPI.Comm
        The job's node layout, made once; a communicator is made a job here
        (:meth:`core.job.Job.of`).
    options : SessionOptions
        Rank 0's value is used (broadcast).
    on_written : callable(comm, scan, local_template, written), optional
        Collective: called on every rank after rank 0 wrote a scan's files into its
        node-local ``local_template`` (``%n`` = node): the command drains them to
        ``options.out`` here, only the files of ``written`` (node name -> relative
        paths: what this job wrote; ``stager.drain(..., written=written)``). The
        local files are removed afterwards.
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
    with Job.of(job) as j:
        return _receive_scans(j, options, on_written, on_ready, on_rejections)


def _receive_scans(job: Job, options: SessionOptions, on_written: Any, on_ready: Any,
                   on_rejections: Any) -> List[ScanOutcome]:
    """Collective over `job`: every rank must call. :func:`receive_scans` with the job."""
    import zmq
    from mpi4py import MPI

    comm = job.comm
    opts: SessionOptions = bcast_result(comm, _resolve, options)
    try:
        sec = bcast_result(comm, _security, opts)
    except BaseException:
        if comm.rank == 0 and os.path.basename(local_root(opts.local)).startswith(
                "mpistage-stream-"):
            with contextlib.suppress(OSError):
                os.rmdir(local_root(opts.local))      # the default directory, still empty
        raise
    # this process's ZeroMQ I/O threads: before its first socket (libzmq keeps those it started)
    zmq.Context.instance().set(zmq.IO_THREADS, opts.io_threads)
    layout = job           # only its names and ranks: collectives go over fcomm
    fcomm = comm.Dup()     # collectives of the finalize, apart from the loop's messages
    # The loop's own point-to-point traffic (partitions, live deltas, heartbeats, aborts)
    # on a communicator of this job alone: a message still in flight when a job ends
    # must never reach the next job run on the caller's communicator.
    lcomm = comm.Dup()
    # before the try: the finally below reads them whatever failed first
    loop: Any = None
    publisher: Any = None
    rv_written: List[Any] = []     # rank 0: (device, inode) of the rendezvous file it wrote
    try:
        node_of = list(job.node_of)
        with agreed(fcomm, "checking the node-local directory", default=StreamError,
                    node=layout.name):
            if comm.rank == 0 or layout.is_leader:      # only rank 0 writes there
                node_local_dir(opts.local, layout.name, create=comm.rank == 0)
                if opts.spill is not None:      # made at the first spill, refused now
                    node_local_dir(opts.spill, layout.name, create=False)
        roles = assign_roles(node_of, opts.receivers_per_node)
        index = roles.index(comm.rank)
        with agreed(fcomm, "loading the analysis", default=StreamError, node=layout.name):
            analysis = load_analysis(opts.analysis, opts.analysis_options, roi=opts.udf_roi,
                                     corrections=opts.corrections)
        proto = chosen(opts.protocol, opts.stream2)
        endpoint = None
        with agreed(fcomm, "binding the receivers", default=StreamError, node=layout.name):
            if comm.rank == 0:
                os.makedirs(opts.out, mode=0o700, exist_ok=True)
                publisher = LivePublisher(f"tcp://{opts.bind_host}:*", opts.out, opts.advertise,
                                          security=sec)
            loop = rank_loop(lcomm, roles, analysis, opts, proto.routing, publisher)
            if comm.rank == 0 and on_written is not None:   # each scan's output name
                loop.names = OutputNames(opts.out, opts.overwrite, loop.say)
                loop.coord.on_new = loop.names.name
            if opts.spill is not None and index is not None:
                loop.spill = Spill(opts.spill, layout.name, index,
                                   os.path.join(opts.out, SPEC_NAME))
            if index is not None:     # this receiver's socket, bound or connected
                count = len(roles.servers)

                def kfn(g: Any) -> int:     # frames per partition of a scan
                    return opts.partition_frames or partition_frames(
                        g.frame_bytes, count, rate=opts.rate, frames=g.frames)

                endpoint = proto.socket(loop, opts, index, count, kfn, sec)
        endpoints = fcomm.gather(endpoint, root=0)
        with agreed(fcomm, "writing the rendezvous file", default=StreamError):
            if comm.rank == 0:
                eps = [e for e in endpoints if e is not None]
                os.makedirs(os.path.dirname(os.path.abspath(opts.rendezvous)), exist_ok=True)
                proto.rendezvous(opts, eps, publisher.endpoint if publisher else None, sec)
                st = os.stat(opts.rendezvous)
                rv_written.append((st.st_dev, st.st_ino))
                if opts.spill is not None:
                    localfs.write_bytes_atomic(os.path.join(opts.out, SPEC_NAME),
                                               spill_spec_text(opts.spill).encode(), mode=0o644)
                if on_ready is not None:
                    on_ready({"receivers": eps, "live": publisher.endpoint if publisher else None,
                              "roles": roles.describe("receiver"), "security": sec.describe()})
        outcomes: List[ScanOutcome] = []
        deadline = None if opts.timeout is None else time.monotonic() + opts.timeout
        with (interrupted(loop, opts, layout.names, rv_written, sec, layout.name)
              if comm.rank == 0
              else contextlib.nullcontext()):
            err: Optional[BaseException] = None
            try:
                loop.run(lambda scan: outcomes.append(
                    _finalize(fcomm, layout, roles, loop, analysis, opts, scan, on_written,
                              sec, proto)),
                    deadline=deadline)
            except StreamError as e:
                err = e
                if not str(e).startswith("stop:"):
                    loop.abort_all(str(e))
            except Exception as e:   # every rank must hear of it, unless every rank raised it
                if getattr(e, "agreed_by", 0) == comm.size:
                    err = e
                else:
                    err = StreamError(f"rank {comm.rank} on node {layout.name}: {e!r}")
                    loop.abort_all(str(err))
            if err is not None:
                loop.drain_requests(2.0)
                raise err
            loop.drain_requests()
        agree(fcomm, None, "receiving")
        summary = job_rejections(fcomm, loop, opts, outcomes, publisher)
        if summary is not None and on_rejections is not None:
            on_rejections(summary)
        return outcomes
    finally:
        if comm.rank == 0 and rv_written:   # the job's rendezvous ends with it, however
            remove_rendezvous(opts.rendezvous, rv_written[0])
            sec.remove_certificates()       # and the certificates written beside it
        if comm.rank == 0:
            remove_empty_parents(os.path.join(expand_node(opts.local, layout.name), "-"),
                                 opts.local)
        for part in (getattr(loop, "socket", None), publisher, getattr(loop, "spill", None)):
            if part is not None:
                part.close()
        fcomm.Free()
        lcomm.Free()
        del MPI


def _finalize(comm: Any, layout: Any, roles: Any, loop: Any, analysis: Any,
              o: SessionOptions, scan: str, on_written: Optional[Callable],
              sec: Any, proto: Any) -> ScanOutcome:
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
    except TreeMergeError as e:
        err = StreamError(str(e))
    if layout.is_leader:
        try:
            merged = tree_reduce(comm, list(layout.leader_ranks),
                                 merged if err is None else analysis.empty(), analysis.merge)
        except TreeMergeError as e:
            err = err or StreamError(str(e))
    agree(comm, err, f"merging scan {scan}", default=StreamError, node=layout.name)
    t_merge = time.monotonic()
    mine = loop.closed_reports.pop(scan, None) if loop.is_receiver else None
    gathered = comm.gather((mine, _peak_rss_mib()), root=0)
    files: Dict[str, str] = {}
    timing: Dict[str, Any] = {}
    report: Any = None
    result: Any = None
    local_dir = os.path.join(expand_node(o.local, layout.name), scan)
    name = bcast_result(comm, lambda: loop.out_name(scan))
    with agreed(comm, f"writing scan {scan}", default=StreamError, node=layout.name):
        if comm.rank == 0:
            coord = loop.coord
            reports = [m for m, _ in gathered]
            rss = [r for _, r in gathered]
            memory = {"peak_rss_mib": rss,
                      "receiver_peak_rss_mib": max(rss[rk] for rk in roles.servers),
                      "assembler_bound_mib": round(o.memory_bytes / 2**20, 1),
                      "outbox_bound_mib": round(o.outbox_bytes / 2**20, 1)}
            recv_reports = [reports[rk] for rk in roles.servers]
            for r, rep in enumerate(recv_reports):
                if rep is not None:
                    coord.closed(r, rep, time.monotonic())
            report = coord.merged(scan, final=True)
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
            pub = loop.publisher
            first_live = pub.first_published.get(name) if pub is not None else None
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
    if loop.socket is not None:
        loop.socket.forget(scan)        # e.g. a Stream V2 start's arrays: written now
    problem, keep_local = "", False
    if on_written is not None:
        written = comm.bcast({layout.name: sorted(files.values())} if comm.rank == 0
                             else None, root=0)
        if comm.rank == 0 and loop.names is not None:
            loop.names.release(name)    # its "receiving" record, replaced by the drain
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


def _peak_rss_mib() -> float:
    """This process's peak resident set so far (MiB; Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
