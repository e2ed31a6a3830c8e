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
    defaults (:data:`SESSION_OPTIONS`, the shared resolver of ``core.options``). Each
    field declares its option once (:func:`core.options.option`): parser, default,
    and the help of its ``stager stream receive`` flag, which says what it does. The
    fields without a flag of their own:

    Attributes
    ----------
    protocol : str, optional
        The stream protocol, a name of :data:`streams.protocols.ROWS` (default:
        ``stream2`` with ``stream2``, else ``native``); its flag's help lists the table.
    protocol_options : dict
        The chosen protocol's own options (its
        :attr:`~streams.protocols.StreamProtocol.options`: Stream V2's ``v2_grace``, ...),
        resolved like the others; given to :meth:`resolve` as keywords of their own.
    analysis_options : dict or list of dict
        The analysis's keywords (``--set``, ``--analysis-params``; one per UDF of
        ``udf:A,B``).
    udf_roi, corrections : str
        ``udf:`` analyses' scan mask and corrections (:mod:`analyses.udfinputs`'s flags).
    detector_pixel_mask : array, optional
        With ``corrections="detector"``: the mask the detector's control interface gave
        (``--control simplon://``), for a scan whose start carries none. Not a flag:
        the control sets it (:func:`streams.controls.job.prepare`).
    heartbeat, credit, batch
        Loop tuning: heartbeat period, partitions a worker may hold, messages read per
        socket step.
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
