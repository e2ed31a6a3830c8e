"""``verify``: every leader re-checksums its node's staged copies against its records.

Collective over a communicator. Works from the per-spec records
(:mod:`stager.nodelocal.record`), not from the sources: it answers "are the copies
on the nodes still what was staged?". Each copy is opened without following a
symlink (its directories walked with ``O_NOFOLLOW`` descriptors) and must be the
recorded file (same device and inode), of the recorded size, with the recorded
checksum. Each copy is also checked by the block kind recorded with it
(``Kind.verify``, :mod:`stager.planning.kinds`): a staged HDF5 copy is decoded,
every dataset's values read back through its filter pipeline and compared with
the digest of the values read from the source (:mod:`stager.kinds.h5.check`),
so a copy that no longer decodes is named with its dataset. Each mismatch
(missing copy, a symlink or directory in its place, a replaced file, wrong size,
wrong checksum, nothing staged at a destination) is reported with its node and file, on every rank.
Only the spec's own records are read: other specs sharing a root are not
touched. The root's lock is taken, so a verify never reads a record a running
stage is writing.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from stager.errors import KEPT, StagerError, VerifyError
from core.mpi.agree import agreed
from core import checksum
from stager.nodelocal.roots import locked_roots
from stager.nodelocal.state import RootState
from core.trusted import Untrusted, is_missing, open_below
from stager.planning import kinds

__all__ = ["verify", "VerifyReport", "Mismatch"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Mismatch:
    """One copy that does not match what was staged."""

    node: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"node {self.node}: {self.path}: {self.reason}"


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of a successful ``verify`` (identical on every rank)."""

    nodes: Tuple[str, ...]
    files_checked: int
    bytes_checked: int


def _check_copy(node: str, state: RootState, rel: str, rec: Any) -> Tuple[int, Optional[Mismatch]]:
    path = os.path.join(state.root, rel)
    try:
        dfd = open_below(state.root_fd, os.path.dirname(rel), state.root)
    except Untrusted as e:
        return 0, Mismatch(node, path, f"its directory cannot be trusted: {e}")
    except OSError as e:
        if is_missing(e):
            return 0, Mismatch(node, path, "missing")
        raise
    try:
        try:
            fd = os.open(os.path.basename(rel), os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            return 0, Mismatch(node, path, "missing")
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.EISDIR):
                return 0, Mismatch(node, path, "not a regular file (symlink or directory)")
            raise
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return 0, Mismatch(node, path, "not a regular file")
        if (st.st_dev, st.st_ino) != (rec.dev, rec.ino):
            return 0, Mismatch(node, path, "replaced since it was staged (not the staged copy)")
        if st.st_size != rec.size:
            return 0, Mismatch(node, path, f"size {st.st_size}, staged {rec.size}")
        why = _decodes(f.fileno(), rec)
        if why is not None:
            return 0, Mismatch(node, path, why)
        if not rec.checksum:
            return 0, Mismatch(node, path, "no checksum recorded (its run ended before it "
                                           "was known): stage again to complete the record")
        if checksum.stream_hexdigest(f) != rec.checksum:
            return 0, Mismatch(node, path, "checksum differs from the staged copy")
    return st.st_size, None


def _decodes(fd: int, rec: Any) -> Optional[str]:
    """Why the copy (open as ``fd``) is not a good copy of its kind (``Kind.verify``:
    an HDF5 copy's datasets are decoded), or None. A record without its kind (written
    before kinds were recorded) is checked by its checksum only.

    The copy is named through ``/proc/self/fd``, so the file checked is the one
    opened without following symlinks (see :mod:`stager.kinds.h5.check`).
    """
    if not rec.kind:
        return None
    if rec.kind not in kinds.names():
        return (f"staged by the block kind {rec.kind!r}, which this stager does not know: "
                "verify with the stager that staged it")
    return kinds.kind(rec.kind).verify(f"/proc/self/fd/{fd}", rec.source)


def _check_node(node: str, key: str, held: List[Any]) -> Tuple[int, int, List[Mismatch]]:
    files = nbytes = 0
    bad: List[Mismatch] = []
    for root, state, why in held:
        if state is None:
            if why and why.startswith("shared with"):
                continue
            reason = ("nothing staged here (no record); run stager stage"
                      if why == "nothing staged here" else why or "")
            bad.append(Mismatch(node, root, reason))
            continue
        rec = state.load(key)
        if not rec.files:
            bad.append(Mismatch(node, root, "nothing staged here for this spec (no record); "
                                            "run stager stage"))
            continue
        if rec.algorithm != checksum.ALGORITHM:
            bad.append(Mismatch(node, root, f"record uses checksum {rec.algorithm}, expected "
                                            f"{checksum.ALGORITHM}; stage again with --force"))
            continue
        for rel, entry in sorted(rec.files.items()):
            n, m = _check_copy(node, state, rel, entry)
            files += 1
            nbytes += n
            if m is not None:
                bad.append(m)
    return files, nbytes, bad


def verify(spec: Any, job: Any = None, wait: Any = None) -> VerifyReport:
    """Collective over `job`: every rank must call. Re-checksum every node's copies.

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or Plan
        Only its destinations and record key are used (read on rank 0).
    job : core.job.Job or mpi4py.MPI.Comm, optional
        As for :func:`stager.stage`; its nodes must be those of the staging run so
        ``%n`` names the same directories.
    wait : float, optional
        Seconds to wait for a run that holds a root (default: fail at once, naming it).

    Returns
    -------
    VerifyReport

    Raises
    ------
    VerifyError
        On every rank if any copy mismatches; ``.mismatches`` lists them
        (``Mismatch(node, path, reason)``), the message names each.
    StagerError
        A record is unreadable, a run holds a root, or another failure (agreed on
        all ranks).
    """
    with locked_roots(spec, job, wait, "verify") as (staged, held):
        comm, layout = staged.job.comm, staged.job
        files = nbytes = 0
        bad: List[Mismatch] = []
        with agreed(comm, "verify", node=layout.name, quiet=True, base=KEPT, default=StagerError):
            if layout.is_leader:
                files, nbytes, bad = _check_node(layout.name, staged.key, held)
        gathered = comm.allgather((files, nbytes, bad))
    mismatches = [m for _, _, ms in gathered for m in ms]
    if mismatches:
        shown = "; ".join(str(m) for m in mismatches[:20])
        more = f"; and {len(mismatches) - 20} more" if len(mismatches) > 20 else ""
        error = VerifyError(f"{len(mismatches)} staged cop{'y' if len(mismatches) == 1 else 'ies'} "
                            f"differ: {shown}{more}; stage again with --force")
        error.mismatches = mismatches  # type: ignore[attr-defined]
        raise error
    return VerifyReport(nodes=layout.names, files_checked=sum(g[0] for g in gathered),
                        bytes_checked=sum(g[1] for g in gathered))
