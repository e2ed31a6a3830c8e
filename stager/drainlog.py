"""What a node drained into DEST, recorded as it goes: ``DEST/.stager-drain-NODE.{json,journal}``.

A drain writes the only copies of results, so one that fails part-way (a permission
error, a full quota, a time limit) must resume without overwriting anything blindly.
The leader journals each file just before its rename (``fsync``-ed, through the commit
hook the staging pipeline uses, :mod:`core.commit`), names its temporary files after
its run (a later drain of the node removes those its killed runs left, and only those),
and compacts the journal into the ``.json`` at the end. A re-run skips a target this
node's record names that still checks out (size, checksums); any other existing target
is a conflict (``--overwrite`` replaces it). The format: docs/staging-state.md, section 7.
"""
from __future__ import annotations

import itertools
import json
import os
import stat
from typing import Any, Dict, Iterable, List, Optional, Tuple

from stager.errors import TransferError
from core import checksum
from core.commit import TEMP_MARK
from stager.nodelocal.journal import Journal, read_events
from core.trusted import DIR_FLAGS, Untrusted, read_file, write_file

__all__ = ["RECORD_PREFIX", "DrainLog"]

#: ``DEST/.stager-drain-<node>.json`` records what each node drained.
RECORD_PREFIX = ".stager-drain-"


class DrainLog:
    """One node's drain record in DEST, and the commit session of its copies. Close it once.

    Parameters
    ----------
    dest : str
        The drain's destination directory (exists, checked by the caller).
    node : str
    run : str
        This drain's id (names its temporary files).
    """

    def __init__(self, dest: str, node: str, run: str) -> None:
        self.dest, self.node, self.run = dest, node, run
        self.fd = os.open(dest, DIR_FLAGS)
        self.files: Dict[str, Dict[str, Any]] = {}
        self.runs: List[str] = []
        self.sources: Dict[str, Tuple[str, int]] = {}
        self.journal: Optional[Journal] = None
        self._counter = itertools.count()
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    @property
    def record_name(self) -> str:
        return f"{RECORD_PREFIX}{self.node}.json"

    @property
    def journal_name(self) -> str:
        return f"{RECORD_PREFIX}{self.node}.journal"

    def _load(self) -> None:
        path = os.path.join(self.dest, self.record_name)
        try:
            d = json.loads(read_file(self.record_name, self.fd, path, "drain record"))
            if d.get("algorithm") == checksum.ALGORITHM:
                self.files.update(d.get("files", {}))
        except FileNotFoundError:
            pass
        except Untrusted as e:
            raise TransferError(f"{e}; remove it, or drain to another directory") from e
        except (ValueError, AttributeError):
            pass  # unreadable old record: this run's replaces it
        jpath = os.path.join(self.dest, self.journal_name)
        try:
            events = read_events(self.fd, self.journal_name, jpath)
        except Untrusted as e:
            raise TransferError(f"{e}; remove it, or drain to another directory") from e
        for ev in events:
            if ev.get("op") == "run":
                self.runs.append(str(ev.get("run")))
            elif ev.get("op") == "copy":
                self.files[str(ev["path"])] = {k: ev[k] for k in ("source", "size", "checksum")}

    # -- resume -----------------------------------------------------------------
    def remove_leftovers(self, dirs: Iterable[str]) -> int:
        """Remove, in ``dirs``, the temporary files of this node's earlier (killed) runs."""
        prefixes = tuple(f"{TEMP_MARK}{r}-" for r in self.runs if r and r != self.run)
        n = 0
        if not prefixes:
            return 0
        for d in dirs:
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                if not name.startswith(prefixes):
                    continue
                p = os.path.join(d, name)
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    os.unlink(p)
                    n += 1
        return n

    def already_drained(self, source: str, target: str, size: int, verify: bool) -> bool:
        """True if ``target`` holds this node's earlier drain of ``source``, unchanged."""
        rec = self.files.get(os.path.relpath(target, self.dest))
        if rec is None or rec.get("size") != size:
            return False
        try:
            st = os.lstat(target)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size != size:
            return False
        want = rec.get("checksum")
        if checksum.file_hexdigest(source) != want:
            return False  # the result changed since: a conflict, not a resume
        return not verify or checksum.file_hexdigest(target) == want

    # -- the commit session (core.commit) --------------------------------
    def begin(self) -> None:
        """Open the journal and write this run into it (before any temporary file)."""
        self.journal = Journal(self.fd, self.journal_name,
                               os.path.join(self.dest, self.journal_name), fsync=True)
        self.journal.append({"op": "run", "run": self.run, "node": self.node, "pid": os.getpid()})

    def temp_path(self, target: str) -> Optional[str]:
        return os.path.join(os.path.dirname(target), f"{TEMP_MARK}{self.run}-{next(self._counter)}")

    def before_rename(self, target: str, tmp: str, st: os.stat_result,
                      digest: Optional[str]) -> None:
        assert self.journal is not None
        source, size = self.sources.get(target, ("", st.st_size))
        rel = os.path.relpath(target, self.dest)
        entry = {"source": source, "size": st.st_size, "checksum": digest or ""}
        self.journal.append({"op": "copy", "path": rel, **entry})
        self.files[rel] = entry

    def after_rename(self, target: str) -> None:
        return None

    # -- the end ------------------------------------------------------------------------
    def compact(self) -> None:
        """Compact the journal into the record (atomically, flushed) and remove it."""
        record = {"version": 1, "algorithm": checksum.ALGORITHM, "node": self.node,
                  "files": self.files}
        data = json.dumps(record, indent=1, sort_keys=True).encode()
        write_file(self.record_name, self.fd, data, f"{self.record_name}.tmp-{self.run}",
                   fsync=True)
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        try:
            os.unlink(self.journal_name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
