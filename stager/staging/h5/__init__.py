"""The ``h5`` kind: HDF5 selections copied into node-local HDF5 files, each byte read once.

Collective reading is :mod:`stager.staging.h5.read` (parallel h5py on the
leader communicator); each leader writes its own copy with
:mod:`stager.staging.h5.write` (serial h5py), checked and renamed into place.
The record of each copy says where it came from (``source`` = the file and
its selections), so ``verify`` and ``clean`` handle it like any staged file.
"""
from __future__ import annotations

from typing import Any, Dict

from stager.errors import TransferError
from stager.staging.kind import Moved, Transfer

__all__ = ["H5Kind"]


class H5Kind:
    """HDF5 selections (``h5`` blocks)."""

    name = "h5"
    what = "the HDF5 selections"

    def check(self, node: str) -> None:
        """Raise if this leader's h5py cannot open files with MPI-IO."""
        import h5py

        if not h5py.get_config().mpi:
            raise TransferError(
                "h5py here has no MPI support (h5py.get_config().mpi is False), which HDF5 "
                "staging needs for driver='mpio': install the parallel h5py (Debian: "
                "python3-h5py-mpi) and run under mpirun (or set H5PY_ALWAYS_USE_MPI=1)")

    def transfer(self, t: Transfer) -> Moved:
        """Collective over ``t.comm``: stage each moved file; stop together on a failure."""
        # here, not at the top: it needs numpy, which only leaders staging HDF5 load
        from stager.staging.h5.read import stage_file

        stats: Dict[str, int] = {"pieces": 0, "max_piece": 0}
        out = Moved()
        datasets = 0
        for k, i in enumerate(t.moved):
            fp: Any = t.units[i]
            try:
                copy = stage_file(t.comm, fp, t.dests[k], t.opts.h5_memory, stats, t.node)
            except Exception as e:  # agreed inside: every leader stops at this file
                out.error = e
                break
            datasets += len(fp.datasets)
            if copy is not None:
                out.done[k] = (copy.checksum, copy.size)
                out.bytes_written += copy.size
                t.progress.update(copy.size)
        out.extra = {"files": len(t.moved), "datasets": datasets, "pieces": stats["pieces"],
                     "max_piece_bytes": stats["max_piece"], "memory_cap": t.opts.h5_memory,
                     "read": "mpio"}
        return out
