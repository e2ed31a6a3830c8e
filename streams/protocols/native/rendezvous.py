"""The rendezvous file: how producers find the receivers of a running job.

The receiving job binds its sockets first, then writes one small JSON file,
atomically (a temporary file in the same directory, flushed to disk, then
renamed over the final name), so a producer polling for it never reads half a
file::

    {"protocol": "mpistage-stream/1",
     "receivers": ["tcp://HOST:PORT", ...],
     "live": "tcp://HOST:PORT",
     "curve_serverkey": "<40 characters of Z85>",
     "client_certificate": "/path/rv.json.client.key_secret"}

``receivers[r]`` is receiver r: a producer sends every sector of frame f to
``receivers[f mod len(receivers)]``. ``live`` is the PUB endpoint of live results
(``null`` when the job publishes none). ``curve_serverkey`` is the receivers' (and
the live socket's) CURVE public key: connect as a CURVE client with it and the
key pair of ``client_certificate`` (a :mod:`zmq.auth` certificate file; ``null``
when the job accepts ``--authorized-keys`` instead: use your own certificate).
Both keys absent or ``null``: plain ZeroMQ (``--insecure``). The file is mode 0600
by default (``mode``). Readers ignore keys they do not know. No sockets here.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union

from streams.errors import RendezvousError
from streams.protocols.native.headers import PROTOCOL

__all__ = ["Rendezvous", "write_rendezvous", "read_rendezvous", "wait_for_rendezvous"]

_Z85_KEY = re.compile(r"[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}\Z")
_ENDPOINT = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})\Z")
PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Rendezvous:
    """Parsed rendezvous file."""

    receivers: Tuple[str, ...]
    live: Optional[str] = None
    protocol: str = PROTOCOL
    server_key: Optional[str] = None
    client_certificate: Optional[str] = None

    @property
    def curve(self) -> bool:
        """True when the job's sockets are CURVE servers (connect with keys)."""
        return self.server_key is not None

    def to_dict(self) -> dict:
        return {"protocol": self.protocol, "receivers": list(self.receivers), "live": self.live,
                "curve_serverkey": self.server_key,
                "client_certificate": self.client_certificate}


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
    cert = d.get("client_certificate")
    if cert is not None and (not isinstance(cert, str) or not os.path.isabs(cert)):
        raise RendezvousError(f"{where}: client_certificate {cert!r} is not an absolute path")
    return Rendezvous(eps, live, PROTOCOL, key, cert)


def write_rendezvous(path: PathLike, receivers: Sequence[str], live: Optional[str] = None,
                     server_key: Optional[str] = None, client_certificate: Optional[str] = None,
                     mode: int = 0o600) -> Rendezvous:
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
        public, but endpoints need not be).

    Raises
    ------
    RendezvousError
        An endpoint is not ``tcp://HOST:PORT``; the directory is not writable.
    """
    p = Path(path)
    rv = _validate({"protocol": PROTOCOL, "receivers": list(receivers), "live": live,
                    "curve_serverkey": server_key, "client_certificate": client_certificate},
                   str(p))
    from core import localfs

    text = json.dumps(rv.to_dict(), indent=1) + "\n"
    try:
        localfs.write_bytes_atomic(os.path.abspath(p), text.encode(), mode=mode, fsync=True)
    except OSError as e:
        raise RendezvousError(f"cannot write the rendezvous file {p}: {e}") from e
    return rv


def read_rendezvous(path: PathLike) -> Rendezvous:
    """Read and check a rendezvous file.

    Raises
    ------
    RendezvousError
        Missing, not JSON, not ``mpistage-stream/1``, or a bad endpoint.
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise RendezvousError(f"no rendezvous file {p}: is the receiving job running?") \
            from None
    except (OSError, ValueError) as e:
        raise RendezvousError(f"cannot read the rendezvous file {p}: {e}") from e
    return _validate(d, str(p))


def wait_for_rendezvous(path: PathLike, timeout: float = 600.0, poll: float = 0.2,
                        newer_than: Optional[float] = None) -> Rendezvous:
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

    Raises
    ------
    RendezvousError
        Not there after ``timeout`` seconds, or invalid.
    """
    p = Path(path)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if newer_than is None or p.stat().st_mtime >= newer_than:
                return read_rendezvous(p)
        except FileNotFoundError:
            pass
        except RendezvousError:
            if p.exists():
                raise
        if time.monotonic() >= deadline:
            raise RendezvousError(f"no rendezvous file {p} after {timeout:g} s: start the "
                                  "receiving job first (or point to its --rendezvous file)")
        time.sleep(poll)
