"""The ``staged`` source: a node's copy of a frame range of a scattered HDF5 dataset.

A ``scatter ... h5`` block spreads a dataset's frames over the nodes in ranges
(:meth:`stager.locality.Where.frame_ranges`), each copy's rows 0, 1, ... at the
same path. A ref's ``path`` is the copy, ``first`` the position of its row 0 and
``shared`` the source file, read by a task that runs where the copy is not.
"""
from __future__ import annotations

from typing import Any, List, Sequence

from analyses.errors import AnalysisError
from analyses.sources import Frames, PartitionRef, Source
from analyses.sources.dataset import frames_of

__all__ = ["StagedRange", "staged_partitions"]


class StagedRange(Source):
    """Positions ``start:stop`` of a node-local frame range copy (module docstring)."""

    def read(self, ref: PartitionRef, files: Sequence[str]) -> Frames:
        fell_back = bool(ref.shared) and files[0] == ref.shared[0]
        return frames_of(files[0], ref.dataset, ref.start, ref.stop,
                         0 if fell_back else ref.first)


def staged_partitions(where: Any, source: str, dataset: str, k: int) -> List[PartitionRef]:
    """Partitions of ``k`` positions inside each staged range of ``source``, each placed
    on the first node holding it; AnalysisError for a range with ``step`` > 1."""
    out: List[PartitionRef] = []
    for fr, holders in where.frame_ranges(source):
        if fr.step != 1:
            raise AnalysisError(f"{source}:{dataset} is staged every {fr.step}th frame: an "
                                "analysis needs every frame of its range (stage it whole)")
        copy = where.range_copy(source, fr.first, holders[0])
        out += [PartitionRef(copy, dataset, s, min(s + k, fr.stop), "staged", fr.first,
                             node=holders[0], shared=(source,))
                for s in range(fr.first, fr.stop, k)]
    return out
