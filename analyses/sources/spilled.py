"""The ``spill`` source: the partition files a receiving job spilled (``--spill``), laid out
as :mod:`streams.job.spill` writes them (``docs/stream-protocol.md`` section 10, "Spill")."""
from __future__ import annotations

import glob
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from analyses.geometry import ScanGeometry
from analyses.sources import Frames, PartitionRef, Source

__all__ = ["Spilled", "read_partition_file", "spilled_partitions"]


class Spilled(Source):
    """One spilled partition file: its frames, their positions, which are complete."""

    ranged = False

    def read(self, ref: PartitionRef, files: Sequence[str]) -> Frames:
        data, index, complete, _ = read_partition_file(files[0])
        return data, index, complete

    def open(self, text: str, scan: Optional[str], scan_shape: Optional[Sequence[int]],
             k: int) -> Tuple[ScanGeometry, List[PartitionRef]]:
        """Scan ``scan`` spilled under the template ``text``: one ref per partition file
        (the job's partitions; ``scan_shape`` and ``k`` are its)."""
        if not scan:
            raise ValueError("--spilled needs --scan NAME")
        paths = spilled_partitions(text, scan)
        if not paths:
            raise ValueError(f"no spilled partitions of scan {scan} under {text}")
        data, _, _, attrs = read_partition_file(paths[0])
        g = ScanGeometry(scan, 1, int(attrs["frames"]), int(attrs["sectors"]),
                         (int(data.shape[1]), int(data.shape[2])), str(attrs["dtype"]),
                         (int(attrs["scan_shape"][0]), int(attrs["scan_shape"][1])))
        return g, [PartitionRef(p, kind="spill") for p in paths]


def read_partition_file(path: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
    """``(frames, frame_index, complete, attrs)`` of one spilled partition file."""
    import h5py

    with h5py.File(path, "r") as f:
        return (f["frames"][()], f["frame_index"][()], f["complete"][()],
                {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()})


def spilled_partitions(template: str, scan: str, nodes: Optional[List[str]] = None
                       ) -> List[str]:
    """Paths of the spilled partitions of ``scan`` under ``template``, sorted, looking
    under ``nodes`` (default: every directory ``%n`` matches)."""
    from core.nodes import expand_node

    if "%n" not in template:
        roots = [template]
    elif nodes is None:
        roots = sorted(glob.glob(template.replace("%n", "*")))
    else:
        roots = [expand_node(template, n) for n in nodes]
    return [p for r in roots for p in sorted(glob.glob(os.path.join(r, scan, "part-r*-*.h5")))]
