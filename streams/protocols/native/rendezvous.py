"""The rendezvous file: how producers find the receivers of a running job.

The receiving job binds its sockets, then writes one small JSON file atomically
(``docs/stream-protocol.md``, section 2, gives its keys): the receivers'
endpoints (a producer sends frame f to ``receivers[f mod len]``), the ``live``
endpoint, the CURVE server key and the certificates of producers and viewers
(both ``null``: ``--insecure``), the job's ``token``, and the job that wrote it
(``host``, ``pid``, ``started``). The job removes it when it ends; a file whose job
is gone from this host (:func:`ended`) is refused (:class:`RendezvousEnded`).

Readers trust it only as :func:`core.trusted.read_trusted` does (their own user's
or ``trust_owner``'s regular file, not group/other writable, in a directory
nobody else can replace it in; a sticky world-writable one gives a
:class:`RendezvousWarning`), and ignore keys they do not know. No sockets here.
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Dict, Optional, Sequence, Tuple, Union

from core import localfs
from core.trusted import Untrusted, read_trusted
from streams.errors import RendezvousError
from streams.protocols.native.headers import PROTOCOL

__all__ = ["Rendezvous", "write_rendezvous", "read_rendezvous", "wait_for_rendezvous",
           "RendezvousEnded", "RendezvousWarning", "job_identity", "ended", "owner_uids",
           "remove_rendezvous", "read_rendezvous_json"]

_TOKEN = re.compile(r"[0-9a-f]{32}\Z")
_Z85_KEY = re.compile(r"[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}\Z")
_ENDPOINT = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})\Z")
PathLike = Union[str, "os.PathLike[str]"]


class RendezvousEnded(RendezvousError):
    """The rendezvous file names a job that is no longer running (its file outlived it)."""


class RendezvousWarning(UserWarning):
    """A rendezvous file that is used, but in a directory where another user could
    have planted one first (world-writable with the sticky bit, like ``/tmp``)."""


@dataclass(frozen=True)
class Rendezvous:
    """Parsed rendezvous file."""

    receivers: Tuple[str, ...]
    live: Optional[str] = None
    protocol: str = PROTOCOL
    server_key: Optional[str] = None
    client_certificate: Optional[str] = None
    viewer_certificate: Optional[str] = None
    token: Optional[str] = None
    host: Optional[str] = None
    pid: Optional[int] = None
    started: Optional[float] = None

    @property
    def curve(self) -> bool:
        """True when the job's sockets are CURVE servers (connect with keys)."""
        return self.server_key is not None


def _process_start(pid: int) -> Optional[float]:
    """When process ``pid`` of this host started (epoch seconds, from ``/proc``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            btime = next(int(ln.split()[1]) for ln in f if ln.startswith(b"btime"))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    # field 22 of stat (the 20th after the command's closing parenthesis): clock ticks
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def job_identity() -> Dict[str, Any]:
    """``host``, ``pid`` and ``started`` of this process, for the rendezvous file."""
    pid = os.getpid()
    started = _process_start(pid)
    return {"host": socket.gethostname(), "pid": pid,
            "started": round(started if started is not None else time.time(), 2)}


def ended(d: Union[Rendezvous, Dict[str, Any]]) -> Optional[str]:
    """Why the job that wrote a rendezvous has ended, or None: only a job of this host
    can be checked (its ``pid`` must run and have started when the file says)."""
    host, pid, started = (d.host, d.pid, d.started) if isinstance(d, Rendezvous) else \
        (d.get("host"), d.get("pid"), d.get("started"))
    if host != socket.gethostname() or not isinstance(pid, int) \
            or not isinstance(started, (int, float)):
        return None
    now = _process_start(pid)
    if now is not None and abs(now - started) < 2.0:
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    return (f"the job that wrote it (pid {pid} on {host}, started {when}) has ended: its "
            "file outlived it; start the receiving job again")


def owner_uids(trust_owner: Union[None, str, int, Collection[Union[str, int]]]) -> Tuple[int, ...]:
    """The uids of ``trust_owner`` (user names or uids), whose rendezvous files a
    reader trusts besides its own."""
    if trust_owner is None:
        return ()
    items = [trust_owner] if isinstance(trust_owner, (str, int)) else list(trust_owner)
    out = []
    for t in items:
        if isinstance(t, int) or str(t).isdigit():
            out.append(int(t))
            continue
        try:
            out.append(pwd.getpwnam(str(t)).pw_uid)
        except KeyError:
            raise ValueError(f"--trust-owner {t}: no such user") from None
    return tuple(out)


def _check_endpoint(ep: Any, what: str, where: str) -> str:
    m = _ENDPOINT.match(ep) if isinstance(ep, str) else None
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise RendezvousError(f"{where}: {what} {ep!r} is not 'tcp://HOST:PORT' with a "
                              "port in 1..65535 (bind first, then write the resolved endpoint)")
    return ep


def _validate(d: Any, where: str) -> Rendezvous:
    if not isinstance(d, dict):
        raise RendezvousError(f"{where}: not a JSON object")
    if d.get("protocol") != PROTOCOL:
        raise RendezvousError(f"{where}: protocol {d.get('protocol')!r}, this producer speaks "
                              f"{PROTOCOL!r}")
    recv = d.get("receivers")
    if not isinstance(recv, list) or not recv:
        raise RendezvousError(f"{where}: 'receivers' must be a non-empty list of endpoints")
    eps = tuple(_check_endpoint(e, f"receivers[{i}]", where) for i, e in enumerate(recv))
    if len(set(eps)) != len(eps):
        raise RendezvousError(f"{where}: a receiver endpoint is listed twice")
    live = d.get("live")
    if live is not None:
        _check_endpoint(live, "live", where)
    key = d.get("curve_serverkey")
    if key is not None and (not isinstance(key, str) or not _Z85_KEY.match(key)):
        raise RendezvousError(f"{where}: curve_serverkey {key!r} is not 40 characters of Z85")
    certs = []
    for name in ("client_certificate", "viewer_certificate"):
        cert = d.get(name)
        if cert is not None and (not isinstance(cert, str) or not os.path.isabs(cert)):
            raise RendezvousError(f"{where}: {name} {cert!r} is not an absolute path")
        certs.append(cert)
    token = d.get("token")
    if token is not None and (not isinstance(token, str) or not _TOKEN.match(token)):
        raise RendezvousError(f"{where}: token {token!r} is not 32 hex digits")
    host, pid, started = d.get("host"), d.get("pid"), d.get("started")
    return Rendezvous(eps, live, PROTOCOL, key, certs[0], certs[1], token,
                      host if isinstance(host, str) else None,
                      pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                      float(started) if isinstance(started, (int, float)) else None)


def write_rendezvous(path: PathLike, receivers: Sequence[str], live: Optional[str] = None,
                     server_key: Optional[str] = None, client_certificate: Optional[str] = None,
                     mode: int = 0o600, viewer_certificate: Optional[str] = None,
                     token: Optional[str] = None) -> Rendezvous:
    """Write the rendezvous file atomically, checked as a reader checks it; return it.

    ``receivers`` in receiver-index order; ``server_key`` None: plain sockets;
    ``mode`` 0600 by default (endpoints and token are the job's). Raises
    RendezvousError for a bad endpoint or an unwritable directory.
    """
    p = Path(path)
    doc = {"protocol": PROTOCOL, "receivers": list(receivers), "live": live,
           "curve_serverkey": server_key, "client_certificate": client_certificate,
           "viewer_certificate": viewer_certificate, "token": token, **job_identity()}
    rv = _validate(doc, str(p))
    text = json.dumps(doc, indent=1) + "\n"
    try:
        localfs.write_bytes_atomic(os.path.abspath(p), text.encode(), mode=mode, fsync=True)
    except OSError as e:
        raise RendezvousError(f"cannot write the rendezvous file {p}: {e}") from e
    return rv


def read_rendezvous(path: PathLike, trust_owner: Any = None) -> Rendezvous:
    """Read and check a rendezvous file, trusting also ``trust_owner``'s (user names
    or uids). Raises RendezvousError (missing, untrusted, invalid) or
    RendezvousEnded (its job has ended)."""
    return _validate(read_rendezvous_json(path, trust_owner), str(path))


def read_rendezvous_json(path: PathLike, trust_owner: Any = None) -> Dict[str, Any]:
    """The JSON object of a rendezvous file of any protocol (a Stream V2 job's too),
    read as a trusted file, its job still running (raises as :func:`read_rendezvous`)."""
    p = os.fspath(path)
    try:
        data, warns = read_trusted(p, owner_uids(trust_owner), "rendezvous file")
    except FileNotFoundError:
        raise RendezvousError(f"no rendezvous file {p}: is the receiving job running?") \
            from None
    except Untrusted as e:
        raise RendezvousError(f"{e}; a file someone else can write could send your frames "
                              "to them (--trust-owner USER trusts that user's files)") from None
    except OSError as e:
        raise RendezvousError(f"cannot read the rendezvous file {p}: {e}") from e
    for w in warns:
        warnings.warn(w, RendezvousWarning, stacklevel=3)
    try:
        d = json.loads(data)
    except ValueError as e:
        raise RendezvousError(f"cannot read the rendezvous file {p}: {e}") from e
    if not isinstance(d, dict):
        raise RendezvousError(f"{path}: not a JSON object")
    why = ended(d)
    if why is not None:
        raise RendezvousEnded(f"rendezvous file {path}: {why}")
    return d


def remove_rendezvous(path: PathLike, written: Optional[Tuple[int, int]]) -> None:
    """Remove the rendezvous file a job wrote (``written``: its device and inode), unless
    it has been replaced meanwhile (another job's file is left alone)."""
    if written is None:
        return
    p = os.fspath(path)
    with contextlib.suppress(OSError):
        st = os.lstat(p)
        if (st.st_dev, st.st_ino) == written:
            os.unlink(p)


def wait_for_rendezvous(path: PathLike, timeout: float = 600.0, poll: float = 0.2,
                        newer_than: Optional[float] = None, trust_owner: Any = None,
                        wait_ended: bool = False, reader: Any = None) -> Any:
    """Wait up to ``timeout`` s, one ``stat`` each ``poll`` s, for the rendezvous file
    (modified at or after ``newer_than``, a ``time.time()``), then read it with
    ``reader`` (default :func:`read_rendezvous`; :func:`read_rendezvous_json` for any
    protocol's). A file of an ended job raises RendezvousEnded at once, or with
    ``wait_ended`` is waited past until ``timeout``.
    """
    p = Path(path)
    deadline = time.monotonic() + timeout
    stale: Optional[RendezvousEnded] = None
    while True:
        try:
            if newer_than is None or p.stat().st_mtime >= newer_than:
                return (reader or read_rendezvous)(p, trust_owner)
        except FileNotFoundError:
            pass
        except RendezvousEnded as e:
            if not wait_ended:
                raise
            stale = e
        except RendezvousError:
            if p.exists():
                raise
        if time.monotonic() >= deadline:
            if stale is not None:
                raise RendezvousEnded(f"{stale}; no new one after {timeout:g} s")
            raise RendezvousError(f"no rendezvous file {p} after {timeout:g} s: start the "
                                  "receiving job first (or point to its --rendezvous file)")
        time.sleep(poll)
