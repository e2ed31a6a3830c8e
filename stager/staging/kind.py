"""What a block kind's transfer is given, and what it returns, on one leader.

Every kind plans its outputs as *units* (:class:`stager.planning.plan.Unit`:
destination, block, source key, size, mtime, mode, bytes on disk) and moves
them with its own ``transfer`` (:class:`stager.planning.kinds.Kind`). Everything
else -- resume, capacity, directories, records, agreement, the report -- is
written once, in :mod:`stager.staging.pipeline`, for all kinds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from stager.staging.options import StageOptions
from stager.staging.report import Progress, SourceMeter

__all__ = ["Transfer", "Moved"]


@dataclass
class Transfer:
    """What a kind's transfer is given, on one leader.

    Attributes
    ----------
    comm : mpi4py.MPI.Comm
        The leader communicator (one rank per node); the transfer is collective over it.
    units : sequence
        The kind's planned units, in plan order (identical on every leader).
    moved : list of int
        Indices into ``units`` that at least one node needs (identical everywhere).
    dests : list of str or None
        For each of ``moved``: this node's destination, or ``None`` if this node
        already holds it (resume) -- it still takes part in the collective reads.
    node : str
        This node's name (for messages).
    opts : StageOptions
    meter : SourceMeter
        Counts source bytes read (the amplification of the report).
    progress : Progress
    job : core.job.Job
    alone : list of bool
        For each of ``moved``: held by one node only (a ``scatter`` output with one
        replica), which reads it itself -- no other leader takes part in moving it.
        Empty: none is.
    holders : list of tuple of int or None
        For each of ``moved``: the node indices (ranks of ``comm``) holding it, for a
        ``scatter`` output; ``None`` for a broadcast one (every node). Outputs with
        several holders move among their holders only
        (:func:`core.mpi.groups.holder_groups`). Empty: every output is broadcast.
    """

    comm: Any
    units: Sequence[Any]
    moved: List[int]
    dests: List[Optional[str]]
    node: str
    opts: StageOptions
    meter: SourceMeter
    progress: Progress
    job: Any
    alone: List[bool] = field(default_factory=list)
    holders: List[Optional[Tuple[int, ...]]] = field(default_factory=list)

    def by_holders(self) -> Tuple[List[int], Dict[Tuple[int, ...], List[int]], List[int]]:
        """Indices of ``moved`` by who moves them: ``(everyone, groups, mine_alone)``.

        ``everyone``: broadcast outputs (every leader); ``groups``: holder set -> the
        outputs with several holders (moved over a communicator of the holders,
        :func:`core.mpi.groups.holder_groups`); ``mine_alone``: one-holder outputs
        this node holds and still needs, read by this leader by itself. Identical
        on every leader but the last.
        """
        alone = self.alone or [False] * len(self.moved)
        held = self.holders or [None] * len(self.moved)
        everyone = [k for k in range(len(self.moved)) if held[k] is None]
        groups: Dict[Tuple[int, ...], List[int]] = {}
        for k, hs in enumerate(held):
            if hs is not None and not alone[k]:
                groups.setdefault(hs, []).append(k)
        mine = [k for k in range(len(self.moved)) if alone[k] and self.dests[k] is not None]
        return everyone, groups, mine


@dataclass
class Moved:
    """What a kind's transfer did on one leader.

    ``done`` maps an index of ``moved`` to ``(checksum, size of the copy)`` for
    every copy this node committed; ``error`` is this leader's own failure
    (every leader stopped at the same point when any failed); ``extra`` goes
    into the report under the kind's name.
    """

    done: Dict[int, Tuple[str, int]] = field(default_factory=dict)
    error: Optional[BaseException] = None
    bytes_written: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)
