"""The ``h5`` kind: HDF5 selections copied into node-local HDF5 files, each byte read once.

Planning (rank 0, serial h5py): ``plan``, ``types`` (the plan's data), ``describe``,
``filters``, ``links``, ``frames`` (scatter outputs cut into frame ranges; pure). Moving:
``read`` (MPI-IO on the leader communicator with the MPI h5py, independent opens of
disjoint hyperslabs with the serial one), ``write`` (each leader's own copy), ``check``
(decoding, after writing and by ``verify``). Each copy's record names its source file and
selections, so ``verify`` and ``clean`` handle it like any staged file.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from core.options import Option, parse_size
from hooks.h5entry import split_entry
from stager.errors import TransferError
from stager.planning.kinds import PlanContext
from stager.planning.plan import FrameRange, describe_size
from stager.staging.kind import Moved, Transfer

__all__ = ["H5Kind", "OPTIONS"]

DEFAULT_H5_MEMORY, MIN_H5_MEMORY = 1 << 30, 64 << 10  # per rank for collective pieces


def _h5_memory(value: Any, name: str) -> int:
    cap = parse_size(value, f"h5 memory cap ({name})")
    if cap < MIN_H5_MEMORY:
        raise ValueError(f"h5 memory cap must be at least {MIN_H5_MEMORY} bytes, got {cap}")
    return cap


#: bytes per rank for collective pieces; datasets below ``h5_inline_bytes`` read at planning
OPTIONS = (Option("h5_memory", DEFAULT_H5_MEMORY, _h5_memory, "STAGER_H5_MEMORY"),
           Option("h5_inline_bytes", None, parse_size, "STAGER_H5_INLINE_BYTES"))


class H5Kind:
    """HDF5 selections (``h5`` blocks)."""

    name = "h5"
    what = "the HDF5 selections"
    label = "HDF5 selections"
    whole_files = False
    entries = staticmethod(split_entry)  # FILE:/path[slice]
    options = OPTIONS
    json_keys = ("h5_files", "h5")

    def plan(self, block: Any, index: int, ctx: PlanContext) -> Tuple[Any, List[Any]]:
        # numpy and h5py: only for a spec with h5 blocks, only on the planning rank
        from stager.kinds.h5.plan import INLINE_BYTES, plan_h5

        from stager.kinds.h5.frames import split_file

        inline = ctx.options.get("h5_inline_bytes")
        bp, outputs = plan_h5(block, index, ctx.claimed,
                              INLINE_BYTES if inline is None else int(inline))
        for fp in outputs if block.mode == "scatter" else ():
            split_file(fp, 2, str(block.location))  # refuse now what no node count splits
        return bp, outputs

    def split(self, plan: Any, nodes: int) -> Any:
        """Each output of a ``scatter ... h5`` block cut into frame ranges, one per node."""
        from stager.kinds.h5.frames import split

        return split(plan, nodes)

    def verify(self, path: str, source: str) -> Optional[str]:
        """Why the staged copy's datasets do not decode to the values read from the
        source (:mod:`stager.kinds.h5.check`), or ``None``."""
        from stager.kinds.h5 import check as h5check  # numpy and h5py: only for HDF5 copies

        if not h5check.is_staged_h5(path):
            return None
        bad = h5check.check_file(path)
        return "; ".join(f"HDF5 dataset {b.path} {b.reason}" for b in bad) or None

    def locate(self, fp: Any) -> Optional[Tuple[str, FrameRange, None]]:
        """A frame range's copy holds frames of ``fp.source``; a whole output is not it."""
        return (fp.source, FrameRange(*fp.frames), None) if fp.frames else None

    def describe_block(self, b: Any) -> str:
        how = f"scatter (frame ranges, each on {b.replicas} node(s)), " \
            if b.mode == "scatter" else ""
        return (f"h5, {how}{b.files} HDF5 file(s), {describe_size(b.data_bytes)} selected, "
                f"about {describe_size(b.bytes)} on disk")

    def describe_unit(self, fp: Any) -> str:
        frames = f"frames {fp.frames[0]}..{fp.frames[1] - 1} of " if fp.frames else ""
        return (f"{frames}{fp.source}:{','.join(fp.selections)} -> "
                f"{fp.dest.replace(chr(0), '%')}  {fp.nbytes} B selected, "
                f"~{fp.est_bytes} B on disk")

    def unit_dict(self, fp: Any) -> Dict[str, Any]:
        return fp.describe()

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

        Broadcast outputs over every leader; a frame range of a ``scatter ... h5`` block
        among its holders only (several: :func:`core.mpi.groups.holder_groups`; one, its
        leader alone, after the collective part; agreed by the pipeline afterwards).
        """
        # here, not at the top: it needs numpy, which only leaders staging HDF5 load
        import h5py
        from mpi4py import MPI

        from core.mpi.groups import holder_groups

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
                     "memory_cap": t.opts.kind_options["h5_memory"],
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
        from stager.kinds.h5.read import stage_file

        for k in which:
            if out.error is not None:
                return
            fp: Any = t.units[t.moved[k]]
            try:
                copy = stage_file(comm, fp, t.dests[k], t.opts.kind_options["h5_memory"],
                                  stats, t.node)
            except Exception as e:  # agreed inside: every leader of comm stops here
                out.error = e
                return
            stats["datasets"] = stats.get("datasets", 0) + len(fp.datasets)
            if copy is not None:
                out.done[k] = (copy.checksum, copy.size)
                out.bytes_written += copy.size
                t.progress.update(copy.size)
