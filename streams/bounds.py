"""What one scan costs a receiving job, checked at its ``begin``. Pure (no numpy arrays made).

A ``begin`` announces a geometry; before anything of the scan is allocated, a
receiver adds up what the scan will hold in memory on the busiest rank of the
job and refuses the scan (``too_large``) when that is more than ``--memory``:

``partitions``
    two partition buffers of K frames (the assembler's minimum; more slots are
    used only while they fit the bound, :mod:`streams.assemble`);
``accounting``
    per frame and sector: the ``got`` bit (1 byte) and the first copy's digest (8
    bytes, to tell a duplicate that disagrees); per frame: the sector count (2),
    ``expected`` (1);
``analysis``
    the analysis's state of the whole scan (:meth:`analyses.contract.Analysis.scan_bytes`)
    times :data:`STATE_COPIES`: the partial on the processing rank, the live delta
    waiting to be sent, rank 0's live copy, the merged result, its scan-shaped
    images, and the HDF5 file built in memory and copied out (``output``).

Together with ``--max-open-scans`` (``begin`` s beyond it are refused ``busy``) this
bounds a receiving rank at about ``max_open_scans x --memory`` plus the ZeroMQ
queues, whatever producers announce.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from streams.protocol import ScanGeometry

__all__ = ["ScanCost", "scan_cost", "STATE_COPIES", "DIGEST_BYTES"]

#: Copies of the analysis's state one scan may hold on rank 0 at once (see the docstring).
STATE_COPIES = 6
#: Bytes of one sector's digest (``xxh3_64``).
DIGEST_BYTES = 8


@dataclass(frozen=True)
class ScanCost:
    """Bytes one scan holds, by part (see the module docstring)."""

    partitions: int
    accounting: int
    analysis: int

    @property
    def total(self) -> int:
        return self.partitions + self.accounting + self.analysis

    def parts(self) -> Dict[str, int]:
        return {"partitions": self.partitions, "accounting": self.accounting,
                "analysis, live and output": self.analysis}

    def describe(self) -> str:
        """``"1234 bytes (partitions 10, accounting 24, ...)"``, for a refusal."""
        return f"{self.total} bytes (" + ", ".join(
            f"{k} {v}" for k, v in self.parts().items()) + ")"


def scan_cost(g: ScanGeometry, partition_frames: int, local_frames: int,
              analysis_bytes: int = 0) -> ScanCost:
    """The memory scan ``g`` costs one receiver (and rank 0), before it is accepted.

    Parameters
    ----------
    g : ScanGeometry
    partition_frames : int
        K, frames per partition.
    local_frames : int
        Frames of the scan this receiver holds (native: about ``frames / R``).
    analysis_bytes : int
        The analysis's state of the whole scan (``Analysis.scan_bytes(g)``).

    >>> g = ScanGeometry("s", 1, 4, 2, (8, 8), "<u2", (2, 2))
    >>> c = scan_cost(g, 2, 4, analysis_bytes=100)
    >>> (c.partitions, c.accounting, c.analysis, c.total)
    (512, 84, 600, 1196)
    """
    K = max(1, int(partition_frames))
    parts = min(2, max(1, -(-max(local_frames, 1) // K))) * K * g.frame_bytes
    accounting = g.frames * (g.sectors * (1 + DIGEST_BYTES) + 3)
    return ScanCost(int(parts), int(accounting), int(STATE_COPIES * max(0, analysis_bytes)))
