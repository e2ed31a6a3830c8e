"""The rendezvous file: how producers find the receivers of a running job.

The receiving job binds its sockets first, then writes one small JSON file,
atomically (a temporary file in the same directory, flushed to disk, then
renamed over the final name), so a producer polling for it never reads half a
file::

    {"protocol": "mpistage-stream/1",
     "receivers": ["tcp://HOST:PORT", ...],
     "live": "tcp://HOST:PORT",
     "curve_serverkey": "<40 characters of Z85>",
     "client_certificate": "/path/rv.json.client.key_secret",
     "viewer_certificate": "/path/rv.json.viewer.key_secret",
     "token": "<32 hex digits>"}

``receivers[r]`` is receiver r: a producer sends every sector of frame f to
``receivers[f mod len(receivers)]``. ``live`` is the PUB endpoint of live results
(``null`` when the job publishes none). ``curve_serverkey`` is the receivers' (and
the live socket's) CURVE public key: connect as a CURVE client with it and the
key pair of ``client_certificate`` (producers) or ``viewer_certificate`` (viewers:
the live socket only) -- :mod:`zmq.auth` certificate files; ``null`` when the job
accepts ``--authorized-keys`` instead: use your own certificate. Both keys absent
or ``null``: plain ZeroMQ (``--insecure``); a producer refuses that unless it was
given ``insecure`` itself. ``token`` is the job's: every ``begin`` carries it (a
stream of another job is refused). The file is mode 0600 by default (``mode``). It
also names the job that wrote it -- ``"host"``, ``"pid"`` (of rank 0) and
``"started"`` (that process's start, seconds since the epoch) -- and the job
removes it when it ends; a file whose job is no longer running on this host
(:func:`ended`) is refused as such (:class:`RendezvousEnded`).

Readers trust it only as :func:`core.trusted.read_trusted` does: a
regular file (no symlink followed) of their own user, or of ``trust_owner``, not
writable by group or others, in a directory that does not let anyone replace it
(world-writable without the sticky bit: refused; with it: a
:class:`RendezvousWarning`). Readers ignore keys they do not know. No sockets here.
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
    """When process ``pid`` of this host started (seconds since the epoch), or None
    when there is no such process (Linux ``/proc``)."""
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
    """Why the job that wrote a rendezvous is known to have ended, or None.

    Only a job of this host can be checked: its rank 0 (``pid``) must still run and
    have started when the file says (a pid reused since is another process).
    """
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
    """Write the rendezvous file atomically; return what was written.

    Parameters
    ----------
    path : path
        Where producers will look (a filesystem they can read).
    receivers : list of str
        Bound endpoints ``tcp://HOST:PORT``, in receiver-index order.
    live : str, optional
        PUB endpoint of live results.
    server_key : str, optional
        The job's CURVE public key (Z85); None: plain sockets.
    client_certificate : str, optional
        Absolute path of the client certificate producers use.
    mode : int
        File mode (0600: only this user's producers read it; the key it names is
        public, but endpoints need not be; the token is the job's).
    viewer_certificate : str, optional
        Absolute path of the certificate viewers use (the live socket only).
    token : str, optional
        The job's token (32 hex digits) every ``begin`` must carry.

    Raises
    ------
    RendezvousError
        An endpoint is not ``tcp://HOST:PORT``; the directory is not writable.
    """
    p = Path(path)
    doc = {"protocol": PROTOCOL, "receivers": list(receivers), "live": live,
           "curve_serverkey": server_key, "client_certificate": client_certificate,
           "viewer_certificate": viewer_certificate, "token": token, **job_identity()}
    rv = _validate(doc, str(p))     # what is written is checked as a reader checks it
    text = json.dumps(doc, indent=1) + "\n"
    try:
        localfs.write_bytes_atomic(os.path.abspath(p), text.encode(), mode=mode, fsync=True)
    except OSError as e:
        raise RendezvousError(f"cannot write the rendezvous file {p}: {e}") from e
    return rv


def read_rendezvous(path: PathLike, trust_owner: Any = None) -> Rendezvous:
    """Read and check a rendezvous file (see the module for what is trusted).

    Parameters
    ----------
    trust_owner : str or int or list, optional
        Users (names or uids) whose rendezvous files are trusted besides one's own.

    Raises
    ------
    RendezvousError
        Missing, not trusted (naming the file and why), not JSON, not
        ``mpistage-stream/1``, or a bad endpoint.
    RendezvousEnded
        The job that wrote it has ended.
    """
    return _validate(read_rendezvous_json(path, trust_owner), str(path))


def read_rendezvous_json(path: PathLike, trust_owner: Any = None) -> Dict[str, Any]:
    """The JSON object of a rendezvous file of any protocol (a Stream V2 job's too),
    read as a trusted file, its job still running (raises as :func:`read_rendezvous`)."""
    d = _read_json(path, trust_owner)
    if not isinstance(d, dict):
        raise RendezvousError(f"{path}: not a JSON object")
    why = ended(d)
    if why is not None:
        raise RendezvousEnded(f"rendezvous file {path}: {why}")
    return d


def _read_json(path: PathLike, trust_owner: Any = None) -> Any:
    """The JSON of a rendezvous file, read as a trusted file."""
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
        return json.loads(data)
    except ValueError as e:
        raise RendezvousError(f"cannot read the rendezvous file {p}: {e}") from e


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
    """Wait until the rendezvous file exists (and is newer than ``newer_than``), then read it.

    Parameters
    ----------
    timeout : float
        Seconds to wait before giving up.
    poll : float
        Seconds between looks (each is one ``stat`` on the shared filesystem).
    newer_than : float, optional
        Ignore a file whose modification time is older (a stale file of an
        earlier job): a time from ``time.time()``.
    trust_owner
        As for :func:`read_rendezvous`.
    wait_ended : bool
        A file of a job that has ended: wait for a new job's (else raise at once).
    reader : callable(path, trust_owner), optional
        What reads the file (default :func:`read_rendezvous`, a native producer's
        :class:`Rendezvous`; :func:`read_rendezvous_json`: any protocol's, a dict).

    Raises
    ------
    RendezvousError
        Not there after ``timeout`` seconds, or invalid, or not trusted.
    RendezvousEnded
        The file names a job that has ended (without ``wait_ended``; with it, after
        ``timeout``).
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
