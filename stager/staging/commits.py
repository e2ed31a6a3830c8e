"""One leader's records during a staging run: locked roots, resume, and a journal entry per commit.

Written once for every block kind: a kind's writer names its temporary files and
renames them through :mod:`core.commit`, and :class:`NodeRecords` is the
session behind those calls on a leader. For each destination root of its node it

* creates the root and its state directory and takes the root's lock
  (:mod:`stager.nodelocal.lock`), or learns that another node of *this* run holds
  it -- the root is one shared directory (a destination without ``%n`` on a shared
  filesystem, or nodes sharing one host), written once, by that node;
* removes the temporary files dead runs left in ``ROOT/.stager/tmp`` (the lock
  says none of them is alive) and loads the spec's record;
* decides, per planned output, whether the copy there is current (:meth:`decide`),
  refusing to replace a file that is not this spec's recorded copy;
* journals every copy just before its rename (:meth:`before_rename`), and its
  checksum when it becomes known later (:meth:`set_checksum`);
* at the end compacts each record, removes a state directory that holds nothing,
  and releases the locks (:meth:`close`).
"""
from __future__ import annotations

import itertools
import os
import stat as _stat
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from stager.errors import StagerError
from core import checksum, localfs
from stager.nodelocal import record as records
from stager.nodelocal.lock import Holder
from stager.nodelocal.state import RootState
from stager.planning.plan import unit_source_id
from core import interrupt

__all__ = ["NodeRecords", "LEGACY_RECORD"]

#: The record file of mpistage before records were keyed by spec and journaled.
LEGACY_RECORD = ".stager-record.json"


class NodeRecords:
    """A leader's view of its destination roots for one run (see the module docstring).

    Parameters
    ----------
    units : sequence
        Every planned unit (all kinds), indexed like ``dests``.
    dests, roots, rels : sequence of str
        Each unit's destination on this node, its root, and its path below the root.
    key, spec : str
        The spec's record key and its path (for records and the lock holder).
    run, node : str
        This run's id (the same on every rank) and this node's name.
    fsync : bool
        Flush each journal line (and the compacted records).
    """

    def __init__(self, units: Sequence[Any], dests: Sequence[str], roots: Sequence[str],
                 rels: Sequence[str], key: str, spec: str, run: str, node: str,
                 fsync: bool = False, kinds: Sequence[str] = ()) -> None:
        self.units, self.dests, self.roots, self.rels = units, dests, roots, rels
        self.kinds = kinds  # each unit's block kind, recorded with its copy
        self.key, self.spec, self.run, self.node, self.fsync = key, spec, run, node, fsync
        self.states: Dict[str, RootState] = {}
        self.shared: Dict[str, str] = {}        # root -> node of this run that writes it
        self.recs: Dict[str, records.SpecRecord] = {}
        self.journals: Dict[str, records.SpecJournal] = {}
        self.taken_over: List[str] = []          # locks of dead runs we took over
        self.leftovers = 0                       # temporary files of dead runs removed
        self.by_dest = {d: g for g, d in enumerate(dests)}
        self.ancestors_left: List[str] = []     # parents of an emptied root still there
        self.done: Set[int] = set()              # units whose copy is here and recorded
        self.committed: Set[int] = set()         # ... of them, committed by this run
        self._counter = itertools.count()

    # -- opening --------------------------------------------------------------
    def open(self, wait: float = 0.0) -> None:
        """Create, trust-check and lock every root of this node (sorted: no deadlock
        between two runs locking the same roots); load the records."""
        holder = Holder.here(self.run, self.node, self.spec)
        for root in sorted(set(self.roots)):
            for attempt in range(3):
                state = RootState.create(root)
                try:
                    same_run = state.take_lock(holder, wait, interrupt.check)
                    break
                except FileNotFoundError:
                    # a clean removed the state directory while we waited: make it again
                    state.close()
                    if attempt == 2:
                        raise
                except BaseException:
                    state.close()
                    raise
            if same_run is not None:
                self.shared[root] = same_run.node
                state.close()
                continue
            self.states[root] = state
            assert state.lock is not None
            if state.lock.previous is not None:
                self.taken_over.append(f"{root}: {state.lock.previous.describe()}")
            self.leftovers += state.clear_tmp()
            rec = state.load(self.key)
            if rec.algorithm != checksum.ALGORITHM:
                rec.files.clear()  # another checksum: nothing can be resumed from it
            self.recs[root] = rec

    def writes(self, g: int) -> bool:
        """True if this node writes unit ``g`` (its root is not written by another node)."""
        return self.roots[g] in self.states

    # -- resume ------------------------------------------------------------------
    def decide(self, g: int, force: bool) -> bool:
        """Does unit ``g`` need a new copy here? Raises if its destination is not ours.

        Current: the record names the planned source (key, size, mtime, ctime,
        inode) and the file there is still the recorded copy (device, inode, size,
        mtime). A copy recorded without its checksum (the run ended before another
        leader sent it) gets it here from the local copy.

        Raises
        ------
        localfs.UnsafePathError
            A symlink or directory at the destination, or a file that is not this
            spec's recorded copy (staged by another spec, or not by the stager).
        """
        root, rel, dest = self.roots[g], self.rels[g], self.dests[g]
        u = self.units[g]
        rec = self.recs[root]
        entry = rec.files.get(rel)
        try:
            st: Optional[os.stat_result] = os.lstat(dest)
        except FileNotFoundError:
            st = None
        except NotADirectoryError:
            raise localfs.UnsafePathError(f"cannot write {dest}: a parent of it is not a "
                                          "directory; remove it") from None
        if st is None:
            if entry is not None:
                self._drop(root, rel)  # the copy is gone: the record says so from now on
            return True
        if _stat.S_ISLNK(st.st_mode) or _stat.S_ISDIR(st.st_mode):
            localfs.check_dest(dest)  # raises, naming the link or directory
        if entry is not None and entry.same_file(st):
            if (not force and records.is_source(entry, u.key, unit_source_id(u))
                    and entry.is_copy(st)):
                if not entry.checksum:
                    self.set_checksum(g, checksum.file_hexdigest(dest))
                self.done.add(g)
                return False
            return True
        raise localfs.UnsafePathError(self._foreign(root, rel, dest, st))

    def _foreign(self, root: str, rel: str, dest: str, st: os.stat_result) -> str:
        state = self.states[root]
        for key in state.spec_keys():
            if key == self.key:
                continue
            other = state.load(key)
            f = other.files.get(rel)
            if f is not None and f.same_file(st):
                return (f"{dest} was staged there by another spec ({other.spec or key}); "
                        "one file has one owner: stage this spec to another destination, or "
                        "'stager clean' the other spec first")
        legacy = os.path.lexists(os.path.join(root, LEGACY_RECORD))
        hint = (f" (it may come from an older mpistage, which kept {LEGACY_RECORD}: "
                "remove those copies by hand)") if legacy else ""
        return (f"refusing to replace {dest}: it exists and is not a copy this spec staged"
                f"{hint}; the stager never overwrites files it does not own: remove it, or "
                "stage to another destination")

    # -- the commit session (core.commit) --------------------------------
    def temp_path(self, dest: str) -> Optional[str]:
        g = self.by_dest.get(dest)
        if g is None or self.roots[g] not in self.states:
            return None
        return os.path.join(self.states[self.roots[g]].tmp_path,
                            f"{localfs.TEMP_MARK}{self.run}-{next(self._counter)}")

    def before_rename(self, dest: str, tmp: str, st: os.stat_result,
                      digest: Optional[str]) -> None:
        g = self.by_dest.get(dest)
        if g is None or self.roots[g] not in self.states:
            return
        u = self.units[g]
        entry = records.new_entry(u.key, unit_source_id(u), st, _stat.S_IMODE(st.st_mode),
                                  digest, self.kinds[g] if self.kinds else "")
        root, rel = self.roots[g], self.rels[g]
        self._journal(root).copy(rel, entry)  # before the rename: no unrecorded final copy
        self.recs[root].files[rel] = entry
        self.done.add(g)
        self.committed.add(g)

    def after_rename(self, dest: str) -> None:
        interrupt.check()  # the copy is complete and recorded: a good place to stop

    def _journal(self, root: str) -> records.SpecJournal:
        j = self.journals.get(root)
        if j is None:
            state = self.states[root]
            j = records.SpecJournal(state.fd, state.path, self.key, fsync=self.fsync)
            j.run(run=self.run, spec=self.spec, node=self.node, host=os.uname().nodename,
                  pid=os.getpid())
            self.recs[root].spec = self.spec
            self.journals[root] = j
        return j

    def set_checksum(self, g: int, hexd: str) -> None:
        """Record unit ``g``'s checksum, learnt after its commit (idempotent)."""
        root, rel = self.roots[g], self.rels[g]
        entry = self.recs[root].files.get(rel)
        if entry is None or entry.checksum == hexd:
            return
        self._journal(root).sum(rel, hexd)
        self.recs[root].apply({"op": "sum", "rel": rel, "checksum": hexd}, "")

    def _drop(self, root: str, rel: str) -> None:
        self._journal(root).drop(rel)
        self.recs[root].files.pop(rel, None)

    def discard(self, g: int) -> None:
        """Forget unit ``g``'s copy and remove it (its source changed under it)."""
        root, rel = self.roots[g], self.rels[g]
        if rel in self.recs[root].files:
            self._drop(root, rel)
        try:
            os.unlink(self.dests[g])
        except FileNotFoundError:
            pass
        self.done.discard(g)

    def checksum_of(self, g: int) -> Optional[str]:
        entry = self.recs[self.roots[g]].files.get(self.rels[g])
        return entry.checksum if entry is not None and entry.checksum else None

    # -- directories --------------------------------------------------------------
    def announce_dir(self, root: str):
        """The ``announce`` callback of ``localfs.ensure_dir`` for ``root``: journal each
        directory before it is made."""
        return self.states[root].add_dir

    def remove_temps(self) -> None:
        """Remove this run's temporary files (the emergency path of an interrupt)."""
        prefix = f"{localfs.TEMP_MARK}{self.run}-"
        for state in self.states.values():
            try:
                for name in os.listdir(state.tmp_path):
                    if name.startswith(prefix):
                        os.unlink(os.path.join(state.tmp_path, name))
            except OSError:
                pass

    # -- the end --------------------------------------------------------------------
    def close(self) -> None:
        """Compact every record, drop state directories that hold nothing, release locks.

        Local (no collective): runs in ``finally``. The first failure is raised after
        every root was handled.
        """
        error: Optional[BaseException] = None
        for root, state in self.states.items():
            try:
                j = self.journals.pop(root, None)
                if j is not None:
                    j.close()
                    try:
                        records.compact(state.fd, state.path, self.recs[root], fsync=self.fsync)
                    except OSError:
                        pass  # no room for the new record (ENOSPC): the journal stays the
                        # record, complete, until a run with room compacts it
                if not state.spec_keys():  # nothing staged here: leave no trace
                    self.ancestors_left += state.remove_dirs(final=True)[1]
            except BaseException as e:
                error = error or e
            finally:
                state.close()
        self.states.clear()
        if error is not None:
            raise StagerError(f"finishing the records failed: {error}") from error

    def progress(self) -> Tuple[int, int, int, int]:
        """(copies here and recorded, copies this node must hold, their bytes done, total)."""
        mine = [g for g in range(len(self.units)) if self.writes(g)]
        done = [g for g in mine if g in self.done]
        return (len(done), len(mine), sum(self.units[g].out_bytes for g in done),
                sum(self.units[g].out_bytes for g in mine))
