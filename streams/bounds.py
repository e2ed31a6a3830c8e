"""What one scan costs a receiving job, checked at its ``begin`` before anything is allocated
(``too_large`` above ``--memory``; ``docs/stream-protocol.md`` section 5 gives the sum).
Pure (no numpy arrays made)."""
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
    """The memory scan ``g`` costs one receiver (and rank 0), before it is accepted:
    K = ``partition_frames``, ``local_frames`` of it here (native: about
    ``frames / R``), ``analysis_bytes`` the analysis's state of the scan.

    >>> g = ScanGeometry("s", 1, 4, 2, (8, 8), "<u2", (2, 2))
    >>> c = scan_cost(g, 2, 4, analysis_bytes=100)
    >>> (c.partitions, c.accounting, c.analysis, c.total)
    (512, 84, 600, 1196)
    """
    K = max(1, int(partition_frames))
    parts = min(2, max(1, -(-max(local_frames, 1) // K))) * K * g.frame_bytes
    accounting = g.frames * (g.sectors * (1 + DIGEST_BYTES) + 3)
    return ScanCost(int(parts), int(accounting), int(STATE_COPIES * max(0, analysis_bytes)))
