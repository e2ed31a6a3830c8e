"""The ``h5`` kind: HDF5 selections copied into node-local HDF5 files, each byte read once.

Collective reading is :mod:`stager.staging.h5.read` (MPI-IO on the leader
communicator with the MPI build of h5py, independent read-only opens of
disjoint hyperslabs with the serial one); each leader writes its own copy with
:mod:`stager.staging.h5.write` (default driver), checks it by decoding
(:mod:`stager.nodelocal.h5check`) and renames it into place.
The record of each copy says where it came from (``source`` = the file and
its selections), so ``verify`` and ``clean`` handle it like any staged file.
"""
from __future__ import annotations

from typing import Any, Dict, List

from stager.errors import TransferError
from stager.staging.kind import Moved, Transfer

__all__ = ["H5Kind"]


class H5Kind:
    """HDF5 selections (``h5`` blocks)."""

    name = "h5"
    what = "the HDF5 selections"

    def check(self, node: str) -> None:
        """Raise if this leader has no h5py (any build: serial h5py reads independently)."""
        try:
            import h5py  # noqa: F401
        except ImportError as e:
            raise TransferError(f"node {node}: h5py is not installed ({e}); HDF5 staging "
                                "needs it on every node: pip install h5py (or the MPI "
                                "build, Debian: python3-h5py-mpi)") from e

    def transfer(self, t: Transfer) -> Moved:
        """Collective over ``t.comm``: stage each moved file; stop together on a failure.

        Broadcast outputs are staged over every leader. A frame range of a ``scatter
        ... h5`` block moves among its holders only: with several replicas over a
        communicator of the holders (:func:`stager.mpi.groups.holder_groups`), with
        one (``t.alone``) by the holder's leader by itself, after the collective part.
        Each byte is still read once, and nobody but the holders receives it. A
        failure in a group or alone is agreed by the pipeline after the kind returns.
        """
        # here, not at the top: it needs numpy, which only leaders staging HDF5 load
        import h5py
        from mpi4py import MPI

        from stager.mpi.groups import holder_groups

        stats: Dict[str, Any] = {"pieces": 0, "max_piece": 0, "read": set()}
        out = Moved()
        everyone, groups, local = t.by_holders()
        self._stage(t, t.comm, everyone, out, stats)
        # every leader walks every group to the end (members wait for each other)
        for hs, sub in holder_groups(t.comm, groups, lambda: out.error is not None):
            self._stage(t, sub, groups[hs], out, stats)
        if out.error is None:
            self._stage(t, MPI.COMM_SELF, local, out, stats)
        out.extra = {"files": len(t.moved), "datasets": stats.get("datasets", 0),
                     "pieces": stats["pieces"], "max_piece_bytes": stats["max_piece"],
                     "memory_cap": t.opts.h5_memory,
                     "read": "+".join(sorted(stats["read"])) or "none",
                     "h5py_mpi": bool(h5py.get_config().mpi)}
        if t.holders:
            out.extra["scatter_read_alone"] = len(local)
            out.extra["scatter_in_groups"] = sum(len(v) for hs, v in groups.items()
                                                 if t.comm.rank in hs)
        return out

    @staticmethod
    def _stage(t: Transfer, comm: Any, which: List[int], out: Moved,
               stats: Dict[str, Any]) -> None:
        """Collective over ``comm``: stage the outputs ``which``; stop at the first failure."""
        from stager.staging.h5.read import stage_file

        for k in which:
            if out.error is not None:
                return
            fp: Any = t.units[t.moved[k]]
            try:
                copy = stage_file(comm, fp, t.dests[k], t.opts.h5_memory, stats, t.node)
            except Exception as e:  # agreed inside: every leader of comm stops here
                out.error = e
                return
            stats["datasets"] = stats.get("datasets", 0) + len(fp.datasets)
            if copy is not None:
                out.done[k] = (copy.checksum, copy.size)
                out.bytes_written += copy.size
                t.progress.update(copy.size)
