"""``verify``: every leader re-checksums its node's staged copies against its records.

Collective over a communicator. Works from the per-destination records
(:mod:`stager.nodelocal.record`), not from the sources: it answers "are the copies on the
nodes still what was staged?". Each mismatch (missing copy, replaced by a
symlink, wrong size, wrong checksum, nothing staged at a destination) is
reported with its node and file, on every rank.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from stager.errors import VerifyError
from stager.mpi.agree import agreed
from stager.nodelocal import checksum
from stager.nodelocal import record as records
from stager.nodelocal.roots import open_roots

__all__ = ["verify", "VerifyReport", "Mismatch"]


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


def _check_root(node: str, root: str) -> Tuple[int, int, List[Mismatch]]:
    bad: List[Mismatch] = []
    st = records.load(root)
    if not os.path.exists(st.path):
        return 0, 0, [Mismatch(node, root, "nothing staged here (no record); run stager stage")]
    if st.algorithm != checksum.ALGORITHM:
        return 0, 0, [Mismatch(node, root, f"record uses checksum {st.algorithm}, expected "
                                           f"{checksum.ALGORITHM}; stage again with --force")]
    nbytes = 0
    for rel, rec in sorted(st.files.items()):
        path = os.path.join(root, rel)
        try:
            lst = os.lstat(path)
        except FileNotFoundError:
            bad.append(Mismatch(node, path, "missing"))
            continue
        if not stat.S_ISREG(lst.st_mode):
            bad.append(Mismatch(node, path, "not a regular file (symlink or directory)"))
            continue
        if lst.st_size != rec.size:
            bad.append(Mismatch(node, path, f"size {lst.st_size}, staged {rec.size}"))
            continue
        if checksum.file_hexdigest(path) != rec.checksum:
            bad.append(Mismatch(node, path, "checksum differs from the staged copy"))
        nbytes += lst.st_size
    return len(st.files), nbytes, bad


def verify(spec: Any, comm: Any = None, emulate_nodes: Optional[int] = None,
           node_id_env: Optional[str] = None) -> VerifyReport:
    """Collective over `comm`: every rank must call. Re-checksum every node's copies.

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or Plan
        Only its destinations are used (read on rank 0).
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    emulate_nodes, node_id_env
        As for :func:`stager.stage` (environment fallbacks ``STAGER_*``);
        must match the staging run so ``%n`` names the same directories.

    Returns
    -------
    VerifyReport

    Raises
    ------
    VerifyError
        On every rank if any copy mismatches; ``.mismatches`` lists them
        (``Mismatch(node, path, reason)``), the message names each.
    StagerError
        A record is unreadable, or another failure (agreed on all ranks).
    """
    comm, roots, layout = open_roots(spec, comm, emulate_nodes, node_id_env)
    try:
        files = nbytes = 0
        bad: List[Mismatch] = []
        with agreed(comm, "verify", node=layout.name):
            if layout.is_leader:
                for root in roots:
                    f, b, m = _check_root(layout.name, root)
                    files, nbytes, bad = files + f, nbytes + b, bad + m
        gathered = comm.allgather((files, nbytes, bad))
    finally:
        layout.free()
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
