"""The record of one spec in one destination root: which copies a node holds, and of what.

The *plan* says what a run should put on every node; the *record* says what one node
actually holds: ``KEY.record`` in the root's state directory (one per spec, keyed by
:func:`stager.planning.spec_key`, so specs can share a root) as of the end of the last
run, then the events of ``KEY.journal`` (:mod:`stager.nodelocal.journal`) appended
since. A copy is journaled *before* it is renamed onto its final name, so after a kill
every complete copy is recorded and no copy exists under a final name without its
entry. Compacting replays the journal into a new record file, then removes it; a
replay over a record that already contains it changes nothing.

Events, entry fields and how resume, verify and clean use them: docs/staging-state.md,
sections 3 and 4. The device and inode are what make a file *ours*: ``clean`` removes a
file only if it is still the recorded copy; resume reuses a copy only if it is.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field, fields, replace
from typing import Any, Dict, List, Optional, Tuple

from stager.errors import StagerError
from core import checksum
from stager.nodelocal.journal import Journal, read_events
from core.trusted import read_file, write_file

__all__ = ["VERSION", "RECORD_SUFFIX", "JOURNAL_SUFFIX", "StagedFile", "SpecRecord",
           "SourceId", "record_name", "journal_name", "load", "compact", "remove",
           "SpecJournal", "copy_identity"]

VERSION = 3
RECORD_SUFFIX = ".record"
JOURNAL_SUFFIX = ".journal"

#: (size, mtime_ns, ctime_ns, inode) of a source when planned; -1 where unknown
SourceId = Tuple[int, int, int, int]


def record_name(key: str) -> str:
    return key + RECORD_SUFFIX


def journal_name(key: str) -> str:
    return key + JOURNAL_SUFFIX


def copy_identity(st: os.stat_result) -> Tuple[int, int, int, int]:
    """(device, inode, size, mtime_ns) of a copy: what makes it *the* recorded copy."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class StagedFile:
    """One staged copy (path relative to its destination root)."""

    source: str
    source_size: int
    source_mtime_ns: int
    source_ctime_ns: int
    source_ino: int
    size: int
    mtime_ns: int
    mode: int
    checksum: str
    dev: int
    ino: int
    #: the block kind that made the copy (``verify`` asks it); "" in older records
    kind: str = ""

    def source_id(self) -> SourceId:
        return (self.source_size, self.source_mtime_ns, self.source_ctime_ns, self.source_ino)

    def is_copy(self, st: os.stat_result) -> bool:
        """True if ``st`` (an ``lstat``) is this very copy, unmodified."""
        return stat.S_ISREG(st.st_mode) and copy_identity(st) == \
            (self.dev, self.ino, self.size, self.mtime_ns)

    def same_file(self, st: os.stat_result) -> bool:
        """True if ``st`` is the recorded file (same device and inode), modified or not."""
        return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (self.dev, self.ino)


_FIELDS = tuple(f.name for f in fields(StagedFile))
_OPTIONAL = ("kind",)  # absent from records written before it existed


def _entry(d: Dict[str, Any]) -> StagedFile:
    return StagedFile(**{k: d[k] for k in _FIELDS if k in d or k not in _OPTIONAL})


def _as_dict(f: StagedFile) -> Dict[str, Any]:
    """``dataclasses.asdict`` for a record entry, whose fields are all scalars: a shallow
    copy (``asdict`` recurses into every field: a third of the stager's own time when
    staging 2,000 small files)."""
    return {k: getattr(f, k) for k in _FIELDS}


@dataclass
class SpecRecord:
    """What one node holds in one root for one spec (mutable while a run updates it)."""

    key: str
    root: str
    spec: str = ""
    files: Dict[str, StagedFile] = field(default_factory=dict)
    algorithm: str = checksum.ALGORITHM

    def apply(self, ev: Dict[str, Any], where: str) -> None:
        """Apply one journal event."""
        op = ev.get("op")
        try:
            if op == "copy":
                self.files[str(ev["rel"])] = _entry(ev)
            elif op == "sum":
                old = self.files.get(str(ev["rel"]))
                if old is not None:
                    self.files[str(ev["rel"])] = replace(old, checksum=str(ev["checksum"]))
            elif op == "drop":
                self.files.pop(str(ev["rel"]), None)
            elif op == "run":
                self.spec = str(ev.get("spec", self.spec))
            else:
                raise ValueError(f"unknown op {op!r}")
        except (KeyError, TypeError, ValueError) as e:
            raise StagerError(f"{where}: bad journal event {ev!r} ({e}); remove the "
                              "destination's .stager directory and its files, then stage "
                              "again") from e

    def to_dict(self) -> Dict[str, Any]:
        return {"version": VERSION, "algorithm": self.algorithm, "key": self.key,
                "spec": self.spec, "root": self.root,
                "files": {rel: _as_dict(f) for rel, f in sorted(self.files.items())}}


def load(state_fd: int, state_path: str, key: str, root: str) -> SpecRecord:
    """The record of spec ``key`` in a root: its record file, then its journal.

    Raises
    ------
    StagerError
        A record or journal that is malformed, or not a regular file of ours.
    """
    rec = SpecRecord(key=key, root=root)
    path = f"{state_path}/{record_name(key)}"
    try:
        data = read_file(record_name(key), state_fd, path, "record")
    except FileNotFoundError:
        data = None
    if data is not None:
        try:
            d = json.loads(data)
            if d.get("version") != VERSION:
                raise ValueError(f"unknown version {d.get('version')!r}")
            rec.algorithm = str(d["algorithm"])
            rec.spec = str(d.get("spec", ""))
            rec.files = {str(rel): _entry(v) for rel, v in d["files"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StagerError(f"record {path} is malformed ({e}); remove the destination's "
                              ".stager directory and its files, then stage again") from e
    jpath = f"{state_path}/{journal_name(key)}"
    for ev in read_events(state_fd, journal_name(key), jpath):
        rec.apply(ev, jpath)
    return rec


def exists(state_fd: int, key: str) -> bool:
    """True if spec ``key`` has a record or a journal in this state directory."""
    for name in (record_name(key), journal_name(key)):
        try:
            os.stat(name, dir_fd=state_fd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            pass
    return False


def compact(state_fd: int, state_path: str, rec: SpecRecord, fsync: bool = False) -> None:
    """Write ``rec`` as the record file (atomically), then remove the journal it contains.

    An empty record leaves neither file behind.
    """
    if not rec.files:
        remove(state_fd, rec.key)
        return
    # one call of the C encoder (indent= would switch to the slow pure-Python one;
    # 10,000 entries cost ~20 ms this way)
    data = json.dumps(rec.to_dict(), sort_keys=True).encode()
    write_file(record_name(rec.key), state_fd, data, f"{record_name(rec.key)}.tmp-{os.getpid()}",
               fsync=fsync)
    try:
        os.unlink(journal_name(rec.key), dir_fd=state_fd)
    except FileNotFoundError:
        pass


def remove(state_fd: int, key: str) -> None:
    """Remove spec ``key``'s record and journal (if present)."""
    for name in (journal_name(key), record_name(key)):
        try:
            os.unlink(name, dir_fd=state_fd)
        except FileNotFoundError:
            pass


class SpecJournal:
    """The open journal of one spec in one root, appended to as copies commit."""

    def __init__(self, state_fd: int, state_path: str, key: str, fsync: bool = False) -> None:
        self.journal = Journal(state_fd, journal_name(key), f"{state_path}/{journal_name(key)}",
                               fsync=fsync)

    def run(self, **info: Any) -> None:
        self.journal.append({"op": "run", **info})

    def copy(self, rel: str, f: StagedFile) -> None:
        self.journal.append({"op": "copy", "rel": rel, **_as_dict(f)})

    def sum(self, rel: str, hexd: str) -> None:
        self.journal.append({"op": "sum", "rel": rel, "checksum": hexd})

    def drop(self, rel: str) -> None:
        self.journal.append({"op": "drop", "rel": rel})

    def close(self) -> None:
        self.journal.close()


def keys_in(names: List[str]) -> List[str]:
    """Spec keys that have a record or journal among directory entry ``names``. Pure."""
    out = set()
    for n in names:
        for suffix in (RECORD_SUFFIX, JOURNAL_SUFFIX):
            if n.endswith(suffix) and not n.startswith("."):
                out.add(n[:-len(suffix)])
    return sorted(out)


def is_source(rec: StagedFile, key: str, ident: SourceId) -> bool:
    """True if ``rec`` was staged from the planned source ``key`` with identity ``ident``.

    A ``-1`` in either identity (unknown) matches anything in that field.
    """
    if rec.source != key:
        return False
    return all(a == b or a == -1 or b == -1 for a, b in zip(rec.source_id(), ident))


def new_entry(key: str, ident: SourceId, st: os.stat_result, mode: int,
              digest: Optional[str], kind: str = "") -> StagedFile:
    """The entry of a copy whose finished temporary file has ``st``."""
    return StagedFile(source=key, source_size=ident[0], source_mtime_ns=ident[1],
                      source_ctime_ns=ident[2], source_ino=ident[3], size=st.st_size,
                      mtime_ns=st.st_mtime_ns, mode=mode, checksum=digest or "",
                      dev=st.st_dev, ino=st.st_ino, kind=kind)
