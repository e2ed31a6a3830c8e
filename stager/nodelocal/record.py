"""The per-destination record: what a node holds in one destination directory.

The *plan* says what a run should put on every node; the *record* says what
one node actually holds. Each destination root (a spec block's directory with
``%n`` expanded) holds ``.stager-record.json``, written atomically by the
node's leader after a transfer (also a failed one, for the copies completed)::

    {"version": 2, "algorithm": "xxh3_128", "root": "/local/run/node0",
     "created_dirs": ["/local/run", "/local/run/node0", ...],
     "files": {"a/b.tif": {"source": "/shared/a/b.tif", "source_size": 123,
                           "size": 123, "mtime_ns": ..., "mode": 420, "checksum": "..."}}}

``source`` is the unit's key (the source path; for an HDF5 copy the path and
its selections), ``source_size`` the source's size when planned, ``size`` the
copy's size and ``mtime_ns`` the copy's mtime (the source's). It drives three
things:

* resume — ``stage`` skips an output whose record matches the planned source
  (key, size, mtime) and whose copy is still a regular file of the recorded
  size and mtime;
* ``verify`` — re-checksums every recorded copy;
* ``clean`` — removes exactly the recorded files, then the recorded
  directories the stager created, deepest first, if they are empty.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from typing import Dict, List

from stager.errors import StagerError
from stager.nodelocal import checksum, localfs

__all__ = ["RECORD_NAME", "StagedFile", "DestRecord", "load", "save", "is_current"]

RECORD_NAME = ".stager-record.json"
VERSION = 2


@dataclass(frozen=True)
class StagedFile:
    """One staged copy (path relative to its destination root)."""

    source: str
    size: int
    mtime_ns: int
    mode: int
    checksum: str
    source_size: int = -1


@dataclass
class DestRecord:
    """Everything staged under one destination root (mutable while a run updates it)."""

    root: str
    files: Dict[str, StagedFile] = field(default_factory=dict)
    created_dirs: List[str] = field(default_factory=list)
    algorithm: str = checksum.ALGORITHM

    @property
    def path(self) -> str:
        return os.path.join(self.root, RECORD_NAME)

    def to_dict(self) -> dict:
        return {"version": VERSION, "algorithm": self.algorithm, "root": self.root,
                "created_dirs": list(self.created_dirs),
                "files": {rel: {"source": f.source, "source_size": f.source_size,
                                "size": f.size, "mtime_ns": f.mtime_ns, "mode": f.mode,
                                "checksum": f.checksum}
                          for rel, f in sorted(self.files.items())}}


def load(root: str) -> DestRecord:
    """The state of ``root``; empty if it has none.

    Raises
    ------
    StagerError
        The state file exists but is a symlink, unreadable or malformed.
    """
    st = DestRecord(root=root)
    try:
        fd = os.open(st.path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return st
    except OSError as e:
        raise StagerError(f"cannot read staging record {st.path}: {e.strerror}; "
                          "remove it (and the staged files) or run `stager clean`") from e
    try:
        with os.fdopen(fd, "r") as f:
            d = json.load(f)
        if d.get("version") != VERSION:
            raise ValueError(f"unknown version {d.get('version')!r}")
        st.algorithm = d["algorithm"]
        st.created_dirs = [str(x) for x in d.get("created_dirs", [])]
        st.files = {str(rel): StagedFile(**v) for rel, v in d["files"].items()}
    except (ValueError, KeyError, TypeError) as e:
        raise StagerError(f"staging record {st.path} is malformed ({e}); remove it and stage "
                          "again with --force") from e
    return st


def save(st: DestRecord) -> None:
    """Write ``st`` atomically into its root (mode 0600)."""
    # one call of the C encoder (indent= would switch to the slow pure-Python one;
    # 10,000 entries cost ~10 ms this way)
    data = json.dumps(st.to_dict(), sort_keys=True).encode()
    localfs.write_bytes_atomic(st.path, data, mode=0o600)


def is_current(rec: StagedFile, key: str, size: int, mtime_ns: int, dest: str) -> bool:
    """True if ``rec`` describes the planned source and the copy at ``dest`` still matches.

    Parameters
    ----------
    rec : StagedFile
    key, size, mtime_ns
        The planned unit's source key, source size and source mtime.
    dest : str
        The copy's path.

    Cheap by design (no re-checksum): ``verify`` is the thorough check.
    """
    if (rec.source, rec.source_size, rec.mtime_ns) != (key, size, mtime_ns):
        return False
    try:
        st = os.lstat(dest)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == rec.size and st.st_mtime_ns == mtime_ns
