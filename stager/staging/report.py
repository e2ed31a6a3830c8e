"""The staging report, the source-read meter and the progress display.

Source bytes are measured, not assumed: the kernel's per-process ``rchar``
counter (``/proc/self/io``: bytes returned by ``read``-family syscalls,
including those MPI-IO issues on this rank's behalf) is sampled immediately
before and after each *source* read call only and the deltas are summed. Reads
the stager does for other purposes (its own state files, ``verify``
re-checksums) therefore never count. The sampling read of ``/proc/self/io``
itself adds its own length to ``rchar``; that length is subtracted. Summed
over ranks and divided by the dataset's bytes this is the *amplification*
(1.00: every source byte read once in the whole job; N: each of N leaders read
everything).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Optional, Tuple

from core.localfs import write_bytes_atomic
from stager.planning.plan import count, describe_size

__all__ = ["Report", "SourceMeter", "Progress"]


def _read_rchar(fd: int) -> Tuple[int, int]:
    text = os.pread(fd, 4096, 0)
    for line in text.split(b"\n"):
        if line.startswith(b"rchar:"):
            return int(line.split()[1]), len(text)
    raise OSError("no rchar in /proc/self/io")


class SourceMeter:
    """Counts bytes this process reads from the source filesystem.

    Use ``with meter:`` around each source read (nesting is not supported). If
    ``/proc/self/io`` is unavailable the meter reports ``None`` and the report
    says so rather than guessing.
    """

    def __init__(self) -> None:
        self.bytes = 0
        self._start = 0
        self._start_len = 0
        try:
            self._fd: Optional[int] = os.open("/proc/self/io", os.O_RDONLY)
            _read_rchar(self._fd)
        except OSError:
            self._fd = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> SourceMeter:
        if self._fd is not None:
            self._start, self._start_len = _read_rchar(self._fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            end, _ = _read_rchar(self._fd)
            # the sample taken at __enter__ was itself a read of _start_len bytes
            self.bytes += max(0, end - self._start - self._start_len)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class Report:
    """What one ``stage`` run did (identical on every rank).

    Attributes
    ----------
    method : str
    nodes : tuple of str
        Node names, by node index.
    ranks : int
    files : int
        Outputs in the plan: whole files and HDF5 copies (one per source file of
        an ``h5`` block).
    files_transferred : int
        Outputs moved by the transfer (on at least one node).
    files_skipped : int
        Outputs already staged and unchanged on every node (resume).
    bytes_per_node : int
        Bytes each node holds (every node holds a full replica; HDF5 copies
        counted at their estimated size).
    bytes_written : int
        Bytes written summed over all nodes in this run.
    transferred_bytes : int
        Bytes of the whole files moved (the denominator of the amplification).
    seconds : float
        Wall time of the transfer phase (after planning, on rank 0's clock,
        between two barriers).
    delivered_gbps : float
        ``bytes_written / seconds / 1e9``.
    source_bytes_read : int or None
        Bytes read from the sources, summed over ranks (``None``: not measurable).
    amplification : float or None
        ``source_bytes_read / transferred_bytes``.
    chunk_size, small_file_threshold : int
    plan_seconds : float
        Time of the planning + broadcast step.
    extra : dict
        Per block kind, what its transfer reports (``Moved.extra``; for ``h5``:
        files, datasets, collective pieces, largest piece, memory cap, read path),
        with its ``outputs`` and the kind's ``label`` (``Kind.label``).
    plan : Plan or None
        The plan this run staged (what every rank received), so what runs next finds
        where each output went without planning the spec again (``stager.where``).
        Not part of the JSON report.
    """

    method: str
    nodes: Tuple[str, ...]
    ranks: int
    files: int
    files_transferred: int
    files_skipped: int
    bytes_per_node: int
    bytes_written: int
    transferred_bytes: int
    seconds: float
    delivered_gbps: float
    source_bytes_read: Optional[int]
    amplification: Optional[float]
    chunk_size: int
    small_file_threshold: int
    plan_seconds: float = 0.0
    extra: Dict[str, Any] = field(default_factory=dict)
    plan: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(replace(self, plan=None))
        del d["plan"]
        d["nodes"] = list(self.nodes)
        d["n_nodes"] = len(self.nodes)
        return d

    def write_json(self, path: str) -> None:
        """Write the report to ``path`` (atomically, via an unpredictable temporary name)."""
        data = json.dumps(self.to_dict(), indent=2) + "\n"
        write_bytes_atomic(os.path.abspath(path), data.encode(), mode=0o644)

    def summary(self) -> str:
        """One line for logs and non-terminal output."""
        amp = "n/a" if self.amplification is None else f"{self.amplification:.2f}"
        kinds = "".join(f", {v['outputs']} of them {v['label']}"
                        for v in (self.extra or {}).values()
                        if isinstance(v, dict) and v.get("label") and v.get("outputs"))
        return (f"staged {count(self.files, 'file')}{kinds} "
                f"({describe_size(self.bytes_per_node)}) "
                f"to {count(len(self.nodes), 'node')} with {self.method}: "
                f"{self.files_transferred} transferred, {self.files_skipped} skipped, "
                f"{describe_size(self.bytes_written)} written in {self.seconds:.2f} s "
                f"({self.delivered_gbps:.2f} GB/s delivered), amplification {amp}")


class Progress:
    """Bytes written on this node, shown on rank 0 only.

    A tqdm bar (bytes, rate, ETA) when ``enabled`` and stderr is a terminal;
    otherwise nothing until the summary line printed by the caller.
    """

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        if enabled and total > 0 and sys.stderr.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                             desc="staging", file=sys.stderr, leave=False)

    def update(self, n: int) -> None:
        if self._bar is not None and n:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
