"""A receiving job: receivers on the nodes of one MPI job, analysis on arrival, outputs.

:func:`receive_scans` is what ``mpirun -n N stager stream receive`` runs on every
rank. Collective over `job`:

1. options from rank 0 (one broadcast; :mod:`streams.job.options`); the job's node layout
   (a communicator made a job by :meth:`core.job.Job.of`) and the roles
   (:func:`streams.job.roles.assign_roles`);
2. every receiver binds its PULL socket (or, with Stream V2, connects to the
   detector); rank 0 binds the live PUB socket, gathers the endpoints and writes
   the rendezvous file atomically -- each step agreed, so a failed bind on one
   node is the same error on every rank;
3. each rank's loop (:func:`rank_loop`, :mod:`streams.job.ranks`) until ``scans`` scans are
   finalized (or the overall ``timeout`` closed what was open);
4. per scan, collectively (:mod:`streams.job.finalize`): the partials merged per
   node, then across node leaders, each in the fixed tree
   (:func:`core.mpi.tree.merge_ranks`); the receivers' reports gathered and merged;
   rank 0 writes ``<name>.h5`` and ``<name>.json`` to its
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
import time
from typing import Any, Callable, Dict, List, Optional

from core.mpi.agree import agree, agreed, bcast_result
from core.job import Job
from core import localfs
from core.nodes import expand_node
from analyses.loading import load_analysis
from streams.errors import StreamError
from streams.job.ending import interrupted, job_rejections, remove_empty_parents
from streams.job.finalize import ScanOutcome, finalize, import_ahead
from streams.job.names import OutputNames
from streams.job.localdir import default_local, local_root, node_local_dir
from streams.job.options import SESSION_OPTIONS, SessionOptions, protocol_options
from streams.job.coordinator_loop import CoordinatorLoop
from streams.job.ranks import RankLoop, WorkerLoop
from streams.job.receiver_loop import ReceiverLoop
from streams.job.roles import assign_roles, partition_frames
from streams.job.live import LivePublisher
from streams.job.spill import SPEC_NAME, Spill, spill_spec_text
from streams.protocols import chosen
from streams.protocols.native.rendezvous import remove_rendezvous
from streams.security import StreamSecurity, check_authorized_keys

__all__ = ["SessionOptions", "SESSION_OPTIONS", "receive_scans", "ScanOutcome"]
# the options and a scan's finalize live beside this module, imported here by their users


def _resolve(options: SessionOptions) -> SessionOptions:
    options.check()
    # made without resolve(): the protocol's options parsed, the missing ones defaulted
    options.protocol_options = protocol_options(
        {"protocol": options.protocol, "stream2": options.stream2}, options.protocol_options, {})
    if options.authorized_keys:
        check_authorized_keys(options.authorized_keys)
    if not options.local:
        options.local = default_local()
    return options


def rank_loop(comm: Any, roles: Any, analysis: Any, options: SessionOptions,
              routing: str = "modulo", publisher: Any = None) -> RankLoop:
    """This rank's loop over ``comm`` (the loop's own communicator): rank 0 coordinates,
    the other receivers receive, the rest work. ``routing`` and ``publisher`` (the live
    socket): rank 0's. Local."""
    if comm.rank == 0:
        return CoordinatorLoop(comm, roles, analysis, options, routing, publisher)
    if roles.index(comm.rank) is None:
        return WorkerLoop(comm, roles, analysis, options)
    return ReceiverLoop(comm, roles, analysis, options)


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
            if comm.rank == 0:
                import_ahead()
        proto = chosen(opts.protocol, opts.stream2)
        endpoint = None
        with agreed(fcomm, "binding the receivers", default=StreamError, node=layout.name):
            if comm.rank == 0:
                os.makedirs(opts.out, mode=0o700, exist_ok=True)
                publisher = LivePublisher(f"tcp://{opts.bind_host}:*", opts.out, opts.advertise,
                                          security=sec)
            loop = rank_loop(lcomm, roles, analysis, opts, proto.routing, publisher)
            if comm.rank == 0 and on_written is not None:   # each scan's output name
                loop.use_names(OutputNames(opts.out, opts.overwrite, loop.say))
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
                    finalize(fcomm, layout, roles, loop, analysis, opts, scan, on_written,
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
            loop.drain_requests(together=True)
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
