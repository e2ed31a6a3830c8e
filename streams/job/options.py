"""The receiving job's options (:class:`SessionOptions`), each declared once in its
field -- parser, ``STAGER_STREAM_<NAME>``, default, flag and help (:func:`core.options.option`)
-- from which the resolver's table (:data:`SESSION_OPTIONS`) and ``stager stream
receive``'s flags (:func:`core.options.add_flags`) are made."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from core.options import (
    option, options_of, parse_bool, parse_int, parse_number, parse_size, resolve)
from streams import protocols
from streams.protocols import chosen

__all__ = ["SessionOptions", "SESSION_OPTIONS", "protocol_options"]


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
        values["protocol_options"] = protocol_options(
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


def protocol_options(values: Mapping[str, Any], given: Mapping[str, Any],
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
