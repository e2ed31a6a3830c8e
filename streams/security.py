"""Who may write into a receiving job: CURVE keys, ZAP, refusals counted.

Native sockets use ZeroMQ's CURVE (RFC 26) and ZAP (RFC 27: libzmq asks a handler on
``inproc://zeromq.zap.01`` about every connection). Rank 0 makes the server key pair
(memory only) and the job's **token** (every native ``begin`` carries it).
**Producers** may use the data and live sockets, **viewers** only the live one, so
whoever may watch cannot write frames; each role's certificate is written beside the
rendezvous file (mode 0600) unless ``--authorized-keys DIR`` (and ``DIR/viewers/``)
names the keys. Every refused attempt is counted by reason
(``docs/stream-protocol.md`` section 5, "Refused connections"): by
:class:`ZapHandler`, or :class:`HandshakeMonitor` for what fails before ZAP; refused
peers' messages never reach the assembler. Stream V2 detectors speak plain ZeroMQ: ZAP
accepts only ``--allow-from`` addresses. ``--insecure`` keeps plain sockets and the
report says so (``docs/stream-protocol.md``, section 2).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, FrozenSet, List, Optional, Tuple

from core.trusted import Untrusted, check_trusted, check_tree
from streams.errors import StreamError

__all__ = ["StreamSecurity", "ZapHandler", "HandshakeMonitor", "zap_handler",
           "client_certificate_path", "write_client_certificate", "load_client_certificate",
           "load_authorized_keys", "check_authorized_keys", "refusal_address",
           "refusals_line", "new_token", "DOMAIN_DATA", "DOMAIN_LIVE", "DOMAIN_STREAM2",
           "VIEWERS_DIR"]

_FROM = re.compile(r" from ([^\s,]+)")

#: ZAP domains of the job's sockets (each has its own policy in the handler).
DOMAIN_DATA = "mpistage-stream"
DOMAIN_LIVE = "mpistage-live"
DOMAIN_STREAM2 = "mpistage-stream2"

#: What refused a connection, in the job's summary line ("37 connections from ... refused by").
REFUSED_BY = {"address_not_allowed": "by --allow-from", "unauthorised_key": "(key not authorised)",
              "not_curve": "(not CURVE)", "bad_handshake": "(another server key)"}


def refusal_address(detail: str) -> Optional[str]:
    """The peer address a refusal's detail names (ZAP knows it; a failed handshake not)."""
    m = _FROM.search(detail)
    return m.group(1) if m else None


def refusals_line(by_reason_address: Dict[Tuple[str, str], int]) -> str:
    """``37 connections from 127.0.0.1 refused by --allow-from; ...`` (pure):
    refusals counted by (reason, address, "" when unknown)."""
    per: Dict[str, Counter] = defaultdict(Counter)
    for (reason, addr), n in by_reason_address.items():
        per[reason][addr] += n
    parts = []
    for reason, addrs in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(addrs.values())
        known = ", ".join(sorted(a for a in addrs if a))
        parts.append(f"{n} connection{'s' if n != 1 else ''}"
                     f"{f' from {known}' if known else ''} refused "
                     f"{REFUSED_BY.get(reason, f'({reason})')}")
    return "; ".join(parts)


#: Seconds a peer has to complete the ZeroMQ handshake (ZMQ_HANDSHAKE_IVL).
HANDSHAKE_S = 10.0

#: The subdirectory of ``--authorized-keys DIR`` that holds the viewers' public keys.
VIEWERS_DIR = "viewers"


def new_token() -> str:
    """A job's token: 128 random bits as 32 hex digits."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class StreamSecurity:
    """The security of one receiving job (picklable: rank 0 makes it, MPI broadcasts it).

    The CURVE pair (Z85, memory only); ``authorized`` producers' and ``viewers``' keys
    and the certificates the job wrote for them (None for ``authorized_keys``);
    ``token`` (never reported); ``allow_from``: Stream V2 peers ZAP accepts (empty:
    any); ``handshake_s``: ``ZMQ_HANDSHAKE_IVL`` (then ``handshake_timeout``).
    """

    mode: str = "curve"
    server_public: Optional[str] = None
    server_secret: Optional[str] = None
    authorized: Optional[FrozenSet[str]] = None
    client_certificate: Optional[str] = None
    authorized_keys: Optional[str] = None
    allow_from: Tuple[str, ...] = ()
    handshake_s: float = HANDSHAKE_S
    viewers: FrozenSet[str] = frozenset()
    viewer_certificate: Optional[str] = None
    token: Optional[str] = None

    @property
    def curve(self) -> bool:
        return self.mode == "curve"

    @classmethod
    def insecure(cls, allow_from: Tuple[str, ...] = (), handshake_s: float = HANDSHAKE_S
                 ) -> StreamSecurity:
        """Plain sockets (``--insecure``): anyone who reaches the port may send (a native
        ``begin`` still needs the job's token)."""
        return cls(mode="insecure", allow_from=tuple(allow_from), handshake_s=handshake_s,
                   token=new_token())

    @classmethod
    def for_job(cls, rendezvous: str, authorized_keys: Optional[str] = None,
                allow_from: Tuple[str, ...] = (), handshake_s: float = HANDSHAKE_S
                ) -> StreamSecurity:
        """A server key pair, a token, and per role either a certificate written
        beside ``rendezvous`` or the keys of ``authorized_keys`` (viewers:
        ``DIR/viewers/`` if it exists). Raises StreamError when a certificate cannot
        be written or a directory holds no key."""
        import zmq

        pub, sec = zmq.curve_keypair()
        cert: Optional[str] = None
        viewer_cert: Optional[str] = None
        if authorized_keys is not None:
            keys = frozenset(load_authorized_keys(authorized_keys))
            vdir = os.path.join(authorized_keys, VIEWERS_DIR)
            viewers = frozenset(load_authorized_keys(vdir)) if os.path.isdir(vdir) else None
        else:
            cert, client_pub = write_client_certificate(rendezvous)
            keys, viewers = frozenset({client_pub}), None
        if viewers is None:
            viewer_cert, viewer_pub = write_client_certificate(rendezvous, "viewer")
            viewers = frozenset({viewer_pub})
        if keys & viewers:
            raise StreamError(f"--authorized-keys {authorized_keys}: a key is both a "
                              f"producer's and a viewer's (in {VIEWERS_DIR}/): a viewer could "
                              "write frames; keep each key in one role")
        return cls("curve", pub.decode(), sec.decode(), keys, cert,
                   None if authorized_keys is None else os.path.abspath(authorized_keys),
                   tuple(allow_from), handshake_s, viewers, viewer_cert, new_token())

    def remove_certificates(self) -> None:
        """Remove the certificates :meth:`for_job` wrote, each only while it holds
        this job's key (a newer job's, written over it, is left alone)."""
        for secret in (self.client_certificate, self.viewer_certificate):
            if secret is None:
                continue
            with contextlib.suppress(OSError, ValueError, StreamError):
                public, _ = load_client_certificate(secret)
                mine = self.viewers if secret == self.viewer_certificate else self.authorized
                if public.decode() in (mine or ()):
                    for path in (secret[:-len("_secret")], secret):
                        os.unlink(path)

    def describe(self) -> Dict[str, Any]:
        """What the report says about the job's security (never a secret)."""
        if not self.curve:
            return {"mode": "insecure",
                    "warning": "--insecure: the receivers accepted plain ZeroMQ connections "
                               "from anyone who could reach their ports; frames were not "
                               "authenticated nor encrypted",
                    "allow_from": list(self.allow_from)}
        return {"mode": "curve", "server_key": self.server_public,
                "client_certificate": self.client_certificate,
                "viewer_certificate": self.viewer_certificate,
                "authorized_keys": self.authorized_keys,
                "authorized": len(self.authorized or ()),
                "viewers": len(self.viewers),
                "allow_from": list(self.allow_from)}

    # ---- sockets ----
    def keys_of(self, domain: str) -> FrozenSet[str]:
        """The keys ZAP admits on a socket of ``domain``: producers everywhere, viewers
        on the live socket only."""
        producers = self.authorized or frozenset()
        return producers | self.viewers if domain == DOMAIN_LIVE else producers

    def serve(self, sock: Any, domain: str) -> None:
        """Make ``sock`` (before bind) a CURVE server of ``domain``, or a plain one."""
        import zmq

        sock.setsockopt(zmq.HANDSHAKE_IVL, int(self.handshake_s * 1000))
        if self.curve:
            # keys decide here, the role's (keys_of); --allow-from is the Stream V2
            # detector's, not viewers'
            zap_handler(sock.context).policy(domain, dataclasses.replace(
                self, allow_from=(), authorized=self.keys_of(domain)))
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.server_secret.encode())  # type: ignore
            sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())

    def allow_list(self, sock: Any, domain: str = DOMAIN_STREAM2) -> None:
        """Plain socket (Stream V2): ZAP accepts only the peers of :attr:`allow_from`."""
        import zmq

        if self.allow_from:
            # the detector speaks plain ZeroMQ: only the address is checked, never a key
            plain = dataclasses.replace(self, mode="insecure")
            zap_handler(sock.context).policy(domain, plain)
            sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())


def client_keys(sock: Any, server_key: str, certificate: str) -> None:
    """Make ``sock`` (before connect) a CURVE client of ``server_key`` with ``certificate``."""
    import zmq

    pub, sec = load_client_certificate(certificate)
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, pub)
    sock.setsockopt(zmq.CURVE_SECRETKEY, sec)


# ---- certificate files ----
def client_certificate_path(rendezvous: str, role: str = "client") -> str:
    """``<rendezvous>.<role>.key_secret``: where the job writes a role's certificate
    (``client``: the producers', ``viewer``: the viewers')."""
    return os.path.abspath(rendezvous) + f".{role}.key_secret"


def write_client_certificate(rendezvous: str, role: str = "client") -> Tuple[str, str]:
    """Write a new certificate of ``role`` beside ``rendezvous``; returns (path, public key).
    Made in a private temporary directory, 0600, renamed over ``.key_secret``/``.key``
    (a symlink there is replaced, never followed)."""
    import zmq.auth

    secret_path = client_certificate_path(rendezvous, role)
    public_path = secret_path[:-len("_secret")]
    d = os.path.dirname(secret_path)
    try:
        tmp = tempfile.mkdtemp(prefix=".mpistage-cert-", dir=d)   # 0700
    except OSError as e:
        raise StreamError(f"cannot write the client certificate beside {rendezvous}: {e}") \
            from e
    try:
        pub_tmp, sec_tmp = zmq.auth.create_certificates(tmp, role)
        for p in (pub_tmp, sec_tmp):
            os.chmod(p, 0o600)
        public, _ = zmq.auth.load_certificate(sec_tmp)
        os.replace(pub_tmp, public_path)
        os.replace(sec_tmp, secret_path)
    except OSError as e:
        raise StreamError(f"cannot write the client certificate {secret_path}: {e}") from e
    finally:
        shutil.rmtree(tmp)       # this job's private directory: removes links, never follows
    return secret_path, public.decode()


def load_client_certificate(path: str) -> Tuple[bytes, bytes]:
    """(public, secret) Z85 keys of a client certificate with its secret half.

    Opened without following a symlink or blocking, it must be this user's regular
    file nobody else can read or write (:func:`core.trusted.check_trusted`: root could
    otherwise use a planted key), parsed from that open file; else StreamError.
    """
    import zmq.auth

    hint = "(the receiving job writes it beside its rendezvous file)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        why = "it is a symlink (possibly planted by another user)" \
            if e.errno == errno.ELOOP else e.strerror
        raise StreamError(f"cannot read the client certificate {path}: {why} {hint}") \
            from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StreamError(f"client certificate {path}: not a regular file")
        check_trusted(st, path, "client certificate")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise StreamError(f"{path} is readable by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 it; a secret "
                              "key others can read authorises them too")
        pub, sec = zmq.auth.load_certificate(f"/proc/self/fd/{fd}")
    except Untrusted as e:
        raise StreamError(f"{e}; use a certificate only you can read and write") from None
    except (OSError, ValueError) as e:
        raise StreamError(f"cannot read the client certificate {path}: {e} {hint}") from None
    finally:
        os.close(fd)
    if sec is None:
        raise StreamError(f"{path} holds a public key only: a producer needs the "
                          "certificate with its secret key (the .key_secret file)")
    return pub, sec


def check_authorized_keys(directory: str) -> None:
    """Refuse (ValueError) an ``--authorized-keys`` directory someone else could add a key
    to: it and its contents must be the user's or root's, not group/other writable, no
    symlink followed (:func:`core.trusted.check_tree`)."""
    if not os.path.isdir(directory):
        raise ValueError(f"--authorized-keys {directory}: not a directory")
    try:
        check_tree(os.path.abspath(directory), "--authorized-keys directory", owners={0})
    except Untrusted as e:
        raise ValueError(f"{e} (anyone who can write there could authorise a key of "
                         "their own)") from None


def load_authorized_keys(directory: str) -> List[str]:
    """Z85 public keys of the certificates (``*.key``, ``*.key_secret``) in ``directory``
    (checked first: :func:`check_authorized_keys`)."""
    import zmq.auth

    try:
        check_authorized_keys(directory)
    except ValueError as e:
        raise StreamError(str(e)) from None
    try:
        keys = zmq.auth.load_certificates(directory)
    except (OSError, ValueError) as e:
        raise StreamError(f"--authorized-keys {directory}: {e}") from None
    if not keys:
        raise StreamError(f"--authorized-keys {directory}: no certificate (*.key) in it; "
                          "make them with zmq.auth.create_certificates")
    return sorted(k.decode() for k in keys)


# ---- ZAP ----
class ZapHandler:
    """The ZAP handler of one ZeroMQ context: a thread answering on ``inproc://zeromq.zap.01``.

    Each ZAP domain has a policy (a :class:`StreamSecurity`); unknown domains are
    refused. Refusals wait per domain for :meth:`drain`, at most :attr:`KEEP` (never
    dropped from :attr:`totals`), so an undrained domain cannot grow memory.
    """

    KEEP = 10000
    ENDPOINT = "inproc://zeromq.zap.01"

    def __init__(self, context: Any) -> None:
        import zmq

        self._zmq = zmq
        self._lock = threading.Lock()
        self._policies: Dict[str, StreamSecurity] = {}
        self._refused: Dict[str, Deque[Tuple[str, str]]] = {}
        self.totals: Counter = Counter()
        self._stop = threading.Event()
        self._sock = context.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            self._sock.bind(self.ENDPOINT)
        except zmq.ZMQError as e:
            self._sock.close()
            raise StreamError(f"cannot start the ZAP handler: {e} (another ZAP handler "
                              "runs in this ZeroMQ context)") from e
        self._thread = threading.Thread(target=self._run, name="zap-handler", daemon=True)
        self._thread.start()

    def policy(self, domain: str, security: StreamSecurity) -> None:
        with self._lock:
            self._policies[domain] = security

    def drain(self, domain: str) -> List[Tuple[str, str]]:
        """The refusals of ``domain`` since the last call: ``[(reason, detail), ...]``."""
        with self._lock:
            return list(self._refused.pop(domain, ()))

    def _decide(self, domain: str, address: str, mechanism: str,
                credentials: List[bytes]) -> Optional[Tuple[str, str]]:
        with self._lock:
            pol = self._policies.get(domain)
        if pol is None:
            return "handshake_failed", f"ZAP request for unknown domain {domain!r}"
        if pol.allow_from and address not in pol.allow_from:
            return "address_not_allowed", (f"{mechanism} connection from {address}, allowed: "
                                           f"{', '.join(pol.allow_from)}")
        if pol.curve:
            if mechanism != "CURVE" or not credentials:
                return "not_curve", f"{mechanism} connection from {address}"
            from zmq.utils.z85 import encode

            key = encode(credentials[0]).decode()
            if key not in (pol.authorized or ()):
                return "unauthorised_key", (f"CURVE key {key[:10]}... from {address} is not "
                                            "authorised")
        return None

    def _run(self) -> None:
        zmq, sock = self._zmq, self._sock
        try:
            while not self._stop.is_set():
                if not sock.poll(200):
                    continue
                msg = sock.recv_multipart()
                if len(msg) < 6:
                    continue
                version, request_id = msg[0], msg[1]
                domain, address = msg[2].decode(errors="replace"), msg[3].decode(
                    errors="replace")
                mechanism = msg[5].decode(errors="replace")
                refusal = self._decide(domain, address, mechanism, msg[6:])
                if refusal is None:
                    sock.send_multipart([version, request_id, b"200", b"OK", b"", b""])
                    continue
                with self._lock:
                    self._refused.setdefault(domain, deque(maxlen=self.KEEP)).append(refusal)
                    self.totals[refusal[0]] += 1
                sock.send_multipart([version, request_id, b"400", refusal[0].encode(), b"",
                                     b""])
        except zmq.ZMQError:
            pass                # the context is terminating
        finally:
            sock.close(linger=0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


_HANDLERS: Dict[int, ZapHandler] = {}
_HLOCK = threading.Lock()


def zap_handler(context: Any) -> ZapHandler:
    """The :class:`ZapHandler` of ``context`` (started on first use, one per context)."""
    with _HLOCK:
        h = _HANDLERS.get(id(context))
        if h is None or not h._thread.is_alive():
            h = _HANDLERS[id(context)] = ZapHandler(context)
        return h


class HandshakeMonitor:
    """Counts the handshakes of one socket that fail before ZAP is asked (a socket
    monitor's ``HANDSHAKE_FAILED_PROTOCOL``/``_NO_DETAIL``: no CURVE, another
    server key, a timeout); ZAP's refusals are :class:`ZapHandler`'s."""

    def __init__(self, sock: Any) -> None:
        import zmq

        self._zmq = zmq
        self._mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        self._sock = sock

    def drain(self) -> List[Tuple[str, str]]:
        """The failures since the last call: ``[(reason, detail), ...]`` (non-blocking)."""
        from zmq.utils.monitor import recv_monitor_message

        zmq = self._zmq
        out: List[Tuple[str, str]] = []
        while True:
            try:
                ev = recv_monitor_message(self._mon, zmq.NOBLOCK)
            except zmq.Again:
                return out
            value, where = ev["value"], ev["endpoint"].decode(errors="replace")
            if ev["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                    out.append(("not_curve", f"a peer without CURVE connected to {where}"))
                elif value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
                    out.append(("bad_handshake", f"a CURVE handshake on {where} failed "
                                "(another server key?)"))
                else:
                    out.append(("handshake_failed", f"ZMTP protocol error {value:#x} on "
                                f"{where}"))
            elif value in (errno.EPIPE, errno.ECONNRESET):
                out.append(("handshake_aborted", f"a peer of {where} hung up during the "
                            f"handshake ({os.strerror(value)})"))
            elif value in (errno.EAGAIN, errno.ETIMEDOUT):
                out.append(("handshake_timeout", f"a connection to {where} completed no "
                            "ZeroMQ handshake in time (sent nothing?)"))
            else:
                out.append(("handshake_failed", f"handshake on {where} failed "
                            f"({os.strerror(value) if value < 200 else value})"))

    def close(self) -> None:
        with contextlib.suppress(self._zmq.ZMQError):
            self._sock.disable_monitor()
        self._mon.close(linger=0)
