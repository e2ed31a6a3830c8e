"""The name a scan's files get in ``OUT``, settled when the job first hears of the scan.

A detector repeats scan names (a DECTRIS ``series-1`` after every restart, the tour's
``sim-0001`` run twice into one ``--out``). A repeated name must never cost the scan:
rank 0 settles the output name of every scan when the first receiver reports it (its
``begin``, within a heartbeat), before its result exists, and not at the drain, after
the acquisition. Without ``--overwrite`` a name whose files are in ``OUT`` already
(``<name>.h5``, ``.json``, ``.live.h5``, ``.live.png``, an analysis's own
``<name>.*``; another job's, or this job's earlier scan) becomes ``<name>.2``,
``<name>.3``, ...; the name is taken by creating ``OUT/<name>.receiving`` exclusively (a
record saying the scan is being received, removed before its files are drained), so two jobs
writing into one ``OUT`` never pick the same. With ``--overwrite`` the scan keeps its
name and replaces what is there.
"""
from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
from typing import Callable, Dict, Optional, Tuple

from core.outputs import mark

__all__ = ["OutputNames"]

#: The record that holds a name while its scan is received (JSON, ``"state":
#: "receiving"``). Not ``<name>.json``: that file's appearing means the scan's report
#: is written (tools, and tests, wait for it), so it must not exist before.
RECORD = ".receiving"

#: ``<name>.<K>.<ext>`` is another scan's (a renamed one), not ``<name>``'s own file.
_RENAMED = re.compile(r"\d+\.")


class OutputNames:
    """Rank 0's output names of a job's scans (see the module docstring).

    Parameters
    ----------
    out : str
        The shared output directory.
    overwrite : bool
        Keep every scan's own name, replacing its files (``--overwrite``).
    say : callable(str), optional
        Where a renamed scan is announced (the job's lines).
    """

    def __init__(self, out: str, overwrite: bool = False,
                 say: Optional[Callable[[str], None]] = None) -> None:
        self.out, self.overwrite, self.say = out, overwrite, say
        self.of: Dict[str, str] = {}          # scan as sent -> its output name
        self._held: Dict[str, Tuple[int, ...]] = {}   # name -> identity of its record

    def name(self, scan: str) -> str:
        """The output name of ``scan`` (settled now if this is the first time)."""
        if scan not in self.of:
            self.of[scan] = self._settle(scan)
        return self.of[scan]

    def _taken(self, name: str) -> Optional[str]:
        """The file of ``OUT`` that makes ``name`` taken, or None."""
        if name in self.of.values():
            return f"this job's scan {name}"
        try:
            entries = os.listdir(self.out)
        except OSError:
            return None
        for e in sorted(entries):
            if e.startswith(name + ".") and not _RENAMED.match(e[len(name) + 1:]):
                return os.path.join(self.out, e)
        return None

    def _settle(self, scan: str) -> str:
        if self.overwrite:
            return scan
        first = None
        for k in range(1, 10000):
            name = scan if k == 1 else f"{scan}.{k}"
            why = self._taken(name)
            if why is None and self._hold(scan, name):
                break
            first = first or why or os.path.join(self.out, name + RECORD)
        else:
            raise OSError(f"{self.out}: no free name for scan {scan} ({scan}.2 .. .9999 taken)")
        if name != scan and self.say is not None:
            self.say(f"stager stream: scan {scan} is written as {name}: {first} exists "
                     "(--overwrite replaces it)")
        return name

    def _hold(self, scan: str, name: str) -> bool:
        """Create ``OUT/<name>.receiving`` exclusively: False if it exists (another
        job's)."""
        path = os.path.join(self.out, name + RECORD)
        record = {"scan": name, "scan_as_sent": scan, "state": "receiving",
                  "job": {"host": socket.gethostname(), "pid": os.getpid(),
                          "started": time.strftime("%Y-%m-%dT%H:%M:%S")}}
        mark(record)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=self.out)
        except OSError:     # OUT unwritable: the drain will say so and keep the results
            return True
        with os.fdopen(fd, "w") as f:
            try:    # written, then linked: exclusive, and never read empty (as it was)
                json.dump(record, f)
                f.flush()
                os.fchmod(f.fileno(), 0o644)
                os.link(tmp, path)      # no link followed: an existing path is EEXIST
            except FileExistsError:
                return False
            except OSError:
                return True
            finally:
                os.unlink(tmp)
            self._held[name] = _identity(os.fstat(f.fileno()))
        return True

    def release(self, name: str) -> None:
        """Remove ``name``'s record before its files are drained, if it is still the one
        made here (never a file someone put in its place)."""
        held = self._held.pop(name, None)
        path = os.path.join(self.out, name + RECORD)
        try:
            st = os.lstat(path)
        except OSError:
            return
        if held == _identity(st):
            os.unlink(path)


def _identity(st: os.stat_result) -> Tuple[int, ...]:
    """What tells the record made here from a file put in its place (an inode number is
    reused at once)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
