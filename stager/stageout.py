"""Stage-out: every node's leader copies its node-local results to the shared filesystem.

``drain(src, dest, comm)`` is the reverse of staging. ``src`` is a node-local directory
(``%n``: each node's); each node's leader copies every regular file below it to
``DEST/<node>/<relative path>``, or with ``merge=True`` to ``DEST/<relative path>``
(every relative path must then come from exactly one node, checked on all nodes'
listings before a byte moves). Guarantees:

* **Atomic, checked files**: each written under a temporary name in its final directory
  and renamed (:func:`core.localfs.copy_file_atomic`, ``fsync`` on: these are the only
  copies of results); its checksum is computed during the copy and, with ``verify``
  (default), the shared copy is read back against it.
* **Resumable** (:mod:`stager.drainlog`): a drain that failed part-way is resumed by the
  same command once the cause is fixed.
* **No silent overwrite**: any other existing target fails every rank before anything is
  written (``overwrite=True`` replaces them). The check runs right before the copy; a
  file someone creates in between is still replaced: Python has no portable no-replace
  rename.
* **Agreement**: listing, conflict check and copy each run inside
  :func:`core.mpi.agree.agreed`; an error on one node is the same
  :class:`~stager.errors.TransferError` on all ranks, naming rank, host, node and file.
* **Only one's own results**: a file the caller does not own is reported, not copied
  (:attr:`NodeDrain.left`); with ``written`` only those files are copied, so another user
  who managed to put a file there cannot get it into DEST.

Directories made under DEST are ``0700`` and DEST must be the caller's
(:func:`core.localfs.ensure_dir`). Temporary names are short, so names up to NAME_MAX
drain. Symlinks in ``src`` are refused: results are copied as bytes or not at all.
"""
from __future__ import annotations

import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Collection, Mapping

from stager.drainlog import RECORD_PREFIX, DrainLog
from core import checksum, commit, localfs
from core.errors import MpistageError
from core.job import Job
from core.mpi.agree import agreed
from stager.errors import KEPT, TransferError
from core.outputs import check_outputs
from core.nodes import expand_node
from stager.planning.plan import count

__all__ = ["DrainFile", "NodeDrain", "DrainReport", "list_results", "targets",
           "merge_conflicts", "drain", "RECORD_PREFIX"]


@dataclass(frozen=True)
class DrainFile:
    """One drained file: path relative to SRC, size, checksum of its bytes."""

    rel: str
    size: int
    checksum: str = ""


@dataclass(frozen=True)
class NodeDrain:
    """What one node drained."""

    node: str
    src: str
    files: int
    bytes: int
    missing: bool = False  # SRC did not exist on this node
    skipped: int = 0       # already drained by an earlier run (same checksum), not copied
    left: tuple[str, ...] = ()  # found in SRC, not copied: "path: why" (not ours)


@dataclass(frozen=True)
class DrainReport:
    """Result of a drain, identical on every rank.

    ``seconds`` is the wall time from the first listing to the last rank's end
    (maximum over ranks); ``gbps`` is drained bytes over that time.
    """

    dest: str
    merge: bool
    nodes: tuple[NodeDrain, ...]
    seconds: float
    files_detail: dict[str, tuple[DrainFile, ...]] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return sum(n.files for n in self.nodes)

    @property
    def bytes(self) -> int:
        return sum(n.bytes for n in self.nodes)

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def summary(self) -> str:
        missing = [n.node for n in self.nodes if n.missing]
        extra = f"; no results on {', '.join(missing)}" if missing else ""
        skipped = sum(n.skipped for n in self.nodes)
        if skipped:
            extra += f"; {skipped} already drained (same checksum), skipped"
        left = [x for n in self.nodes for x in n.left]
        if left:
            extra += f"; {count(len(left), 'file')} left, not copied: {'; '.join(left[:3])}" + \
                (" ..." if len(left) > 3 else "")
        return (f"drained {count(self.files, 'file')}, {count(self.bytes, 'byte')} from "
                f"{count(len(self.nodes), 'node')} "
                f"to {self.dest}{' (merged)' if self.merge else ''} in {self.seconds:.2f} s "
                f"({self.bytes / max(self.seconds, 1e-9) / 1e6:.1f} MB/s){extra}")

    def to_dict(self) -> dict[str, Any]:
        return {"dest": self.dest, "merge": self.merge, "files": self.files, "bytes": self.bytes,
                "seconds": self.seconds, "gbps": self.gbps,
                "nodes": [asdict(n) for n in self.nodes],
                "checksum_algorithm": checksum.ALGORITHM,
                "checksums": {node: {f.rel: f.checksum for f in fs}
                              for node, fs in self.files_detail.items()}}


def list_results(src: str, only: Collection[str] | None = None,
                 left: list[str] | None = None) -> list[DrainFile]:
    """Regular files below ``src`` (relative paths, sorted); no symlink is followed.

    Temporary files of an interrupted atomic write (``localfs.TEMP_MARK``) are
    not results and are left out. A file of another user, or (``only`` given) one
    whose relative path is not in ``only``, is left out too and reported in
    ``left`` (``"path: why"``).

    Raises
    ------
    TransferError
        A symlink or a special file below ``src``, naming it.
    FileNotFoundError
        ``src`` does not exist.
    """
    st = os.lstat(src)
    if not stat.S_ISDIR(st.st_mode):
        raise TransferError(f"drain source {src} is not a directory")
    out = []
    # os.walk skips a directory it cannot list unless told otherwise: its results
    # would silently stay on the node
    for dirpath, dirnames, filenames in os.walk(src, onerror=_unlistable, followlinks=False):
        for name in sorted(dirnames):
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                raise TransferError(f"{p} is a symlink; drain copies results as files, "
                                    "not links: replace it by the file or remove it")
        for name in filenames:
            p = os.path.join(dirpath, name)
            if localfs.TEMP_MARK in name:
                continue
            s = os.lstat(p)
            if not stat.S_ISREG(s.st_mode):
                kind = "a symlink" if stat.S_ISLNK(s.st_mode) else "not a regular file"
                raise TransferError(f"{p} is {kind}; drain copies regular files only: "
                                    "replace it by the file or remove it")
            rel = os.path.relpath(p, src)
            why = None
            if s.st_uid != os.geteuid():
                why = f"owned by uid {s.st_uid}, not by you (uid {os.geteuid()})"
            elif only is not None and rel not in only:
                why = "not written by this job"
            if why is not None:
                if left is not None:
                    left.append(f"{p}: {why}")
                continue
            out.append(DrainFile(rel, s.st_size))
    if left is not None:
        left.sort()
    return sorted(out, key=lambda f: f.rel)


def _unlistable(e: OSError) -> None:
    raise TransferError(f"cannot list results in {e.filename}: {e.strerror}; the files below "
                        "it would not be drained: fix its permissions or move them out") from e


def targets(dest: str, node: str, files: list[DrainFile], merge: bool) -> list[str]:
    """Absolute destination of each file (pure): ``DEST/<node>/rel`` or ``DEST/rel``."""
    root = dest if merge else os.path.join(dest, node)
    return [localfs.inside(dest, os.path.join(root, f.rel)) for f in files]


def merge_conflicts(listings: dict[str, list[DrainFile]]) -> dict[str, list[str]]:
    """Relative paths produced by more than one node (pure), with those nodes."""
    owners: dict[str, list[str]] = {}
    for node, files in listings.items():
        for f in files:
            owners.setdefault(f.rel, []).append(node)
    return {rel: nodes for rel, nodes in sorted(owners.items()) if len(nodes) > 1}


def _fail(message: str, items: list[str], hint: str) -> TransferError:
    shown = ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
    return TransferError(f"{message}: {shown}; {hint}")


def drain(src: str, dest: str, job: Any = None, *, merge: bool = False,
          overwrite: bool = False, verify: bool = True,
          written: Mapping[str, Collection[str]] | None = None) -> DrainReport:
    """Collective over `job`: every rank must call. Copy each node's results to ``dest``.

    Parameters
    ----------
    src : str
        Node-local results directory; ``%n`` is replaced by each node's name.
    dest : str
        Directory on the shared filesystem (created if missing, must be ours).
    job : core.job.Job or mpi4py.MPI.Comm, optional
        The job's node layout, made once; a communicator (default ``MPI.COMM_WORLD``)
        is made a job here (:meth:`core.job.Job.of`).
    merge : bool
        Put every node's files directly under ``dest``; relative paths must be
        unique across nodes.
    overwrite : bool
        Replace files already at their destination (atomically).
    verify : bool
        Read every shared copy back and compare checksums.
    written : mapping of node name to relative paths, optional
        What the calling job wrote below ``src`` on each node: only those are
        copied, anything else found is reported (:attr:`NodeDrain.left`).

    Returns
    -------
    DrainReport
        The same on every rank.

    Raises
    ------
    ValueError
        Bad arguments (before any collective, identically on every rank).
    TransferError
        On every rank: unreadable results, symlinks, name conflicts under
        ``merge``, existing files without ``overwrite``, a copy or checksum failure.
    """
    for name, path in (("src", src), ("dest", dest)):
        if not isinstance(path, str) or not path:
            raise ValueError(f"{name} must be a non-empty path, got {path!r}")
    if "%n" in dest:
        raise ValueError(f"dest {dest!r} contains %n: dest is one shared directory; "
                         "per-node subdirectories are made unless merge=True")
    src, dest = os.path.abspath(src), os.path.abspath(dest)
    t0 = time.perf_counter()
    with Job.of(job) as j:
        return _drain(j.comm, j, src, dest, merge, overwrite, verify, t0, written)


def _drain(comm: Any, layout: Any, src: str, dest: str, merge: bool, overwrite: bool,
           verify: bool, t0: float,
           written: Mapping[str, Collection[str]] | None = None) -> DrainReport:
    """Collective over `comm`: every rank must call. List, check and copy (see :func:`drain`)."""
    from mpi4py import MPI

    node_src = expand_node(src, layout.name)
    node = layout.name
    # Phase 1: every leader lists its node's results.
    listing: list[DrainFile] | None = None
    missing = False
    left: list[str] = []
    with agreed(comm, "drain (listing results)", base=KEPT, default=TransferError,
                node=node):
        if layout.is_leader:
            only = None if written is None else set(written.get(node, ()))
            try:
                listing = list_results(node_src, only, left)
            except FileNotFoundError:
                listing, missing = [], True
            except OSError as e:
                raise TransferError(f"cannot list results in {node_src}: {e.strerror}") from e
    mine_listed = (layout.name, node_src, listing, missing) if layout.is_leader else None
    gathered = comm.allgather(mine_listed)
    nodes = [g for g in gathered if g is not None]
    listings = {name: files for name, _, files, _ in nodes}
    if all(m for *_, m in nodes):
        raise TransferError(f"nothing to drain: {src} does not exist on any node "
                            f"({', '.join(n for n, *_ in nodes)}); check the results path")

    # Phase 2: conflicts, decided from the same data on every rank, then
    # existing targets, checked by each leader for its own files.
    if merge:
        clash = merge_conflicts(listings)
        if clash:
            raise _fail(f"drain --merge: {len(clash)} result name(s) come from more than one node",
                        [f"{rel} ({'/'.join(ns)})" for rel, ns in clash.items()],
                        "drain without --merge (files go to DEST/<node>/)")
    mine = listings.get(layout.name, []) if layout.is_leader else []
    dests: list[str] = []
    log: DrainLog | None = None
    skip: set[int] = set()
    try:
        with agreed(comm, "drain (checking destination)", base=KEPT, default=TransferError,
                    node=node):
            if layout.is_leader:
                dests = targets(dest, layout.name, mine, merge)
                # a target inside SRC (DEST in SRC, or SRC = DEST/<node>) is a result itself
                check_outputs(dests or [dest], [node_src + "/"], overwrite=True,
                              what="drain target", hint="drain to a directory outside SRC")
                log = _open_log(dest, layout.name, dests)
                existing = []
                for i, (f, target) in enumerate(zip(mine, dests)):
                    if not os.path.lexists(target):
                        continue
                    source = os.path.join(node_src, f.rel)
                    if log is not None and log.already_drained(source, target, f.size, verify):
                        skip.add(i)  # drained by an earlier run that stopped later on
                    elif not overwrite:
                        existing.append(target)
                if existing:
                    raise _fail(f"drain would overwrite {len(existing)} existing file(s)",
                                existing, "pass --overwrite to replace them, or drain to an "
                                "empty directory")

        # Phase 3: copy, checksum, verify; each file journaled as it commits.
        done: list[DrainFile] = []
        with agreed(comm, "drain (copying)", base=KEPT, default=TransferError, node=node):
            if layout.is_leader and not missing:
                todo = [i for i in range(len(mine)) if i not in skip]
                if todo or log is not None:
                    localfs.ensure_dir(dest, dest, strict=False)
                    log = log or DrainLog(dest, layout.name, secrets.token_hex(6))
                    log.begin()
                    try:
                        with commit.session(log):
                            _copy_all(dest, node_src, [mine[i] for i in todo],
                                      [dests[i] for i in todo], verify, done, log)
                    finally:
                        try:
                            log.compact()
                        except OSError:
                            pass  # the journal stays: it holds every drained file
    finally:
        if log is not None:
            log.close()

    seconds = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    per_node = comm.allgather((layout.name, tuple(done), len(skip), tuple(left))
                              if layout.is_leader else None)
    detail = {name: files for name, files, _, _ in (p for p in per_node if p is not None)}
    skipped = {name: n for name, _, n, _ in (p for p in per_node if p is not None)}
    lefts = {name: lf for name, _, _, lf in (p for p in per_node if p is not None)}
    node_reports = tuple(
        NodeDrain(node=name, src=nsrc, files=len(detail[name]),
                  bytes=sum(f.size for f in detail[name]), missing=miss,
                  skipped=skipped[name], left=lefts[name])
        for name, nsrc, _, miss in nodes)
    return DrainReport(dest=dest, merge=merge, nodes=node_reports, seconds=seconds,
                       files_detail=detail)


def _open_log(dest: str, node: str, dests: list[str]) -> DrainLog | None:
    """This node's drain record in DEST (``None`` if DEST does not exist yet); the
    temporary files its killed runs left next to the targets are removed."""
    if not os.path.isdir(dest):
        return None
    localfs.ensure_dir(dest, dest, strict=False)  # a symlink or someone else's: refused
    log = DrainLog(dest, node, secrets.token_hex(6))
    try:
        log.remove_leftovers({os.path.dirname(t) for t in dests})
    except BaseException:
        log.close()
        raise
    return log


def _copy_all(dest: str, node_src: str, files: list[DrainFile], dests: list[str],
              verify: bool, done: list[DrainFile], log: DrainLog) -> None:
    """Copy one node's results (local; raises TransferError naming the file)."""
    current = ""
    ready: set[str] = set()  # directories checked once, not per file: DEST is shared
    try:
        for f, target in zip(files, dests):
            current = os.path.join(node_src, f.rel)
            parent = os.path.dirname(target)
            if parent not in ready:
                localfs.ensure_dir(dest, parent, strict=False)
                ready.add(parent)
            log.sources[target] = (current, f.size)
            digest = localfs.copy_file_atomic(current, target, fsync=True)
            if verify:
                back = checksum.file_hexdigest(target)
                if back != digest:
                    raise TransferError(
                        f"checksum mismatch after draining {current} to {target} "
                        f"({back} != {digest}); drain again with --overwrite")
            done.append(DrainFile(f.rel, f.size, digest))
    except MpistageError:
        raise
    except OSError as e:
        where = f" {current}" if current else ""
        raise TransferError(f"drain of{where} to {dest} failed: {e.strerror or e}; every "
                            "file drained before it is recorded: once the cause is fixed, "
                            "the same command drains only the rest") from e
