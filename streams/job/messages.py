"""The messages between the ranks of a receiving job (:mod:`streams.job.ranks`), one
frozen dataclass per kind, matched by type. Each travels under one tag of
:data:`streams.job.ranks.TAGS`, named in its docstring."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

import numpy as np

from streams.accounting import ScanReport
from streams.protocol import ScanGeometry


@dataclass(frozen=True)
class Part:
    """WORK, receiver -> worker: a partition's copy (its arrays out of band)."""
    geometry: ScanGeometry
    index: int
    frames: np.ndarray
    complete: np.ndarray
    data: np.ndarray

    @property
    def scan(self) -> str:
        return self.geometry.scan

    @property
    def nbytes(self) -> int:
        """What it holds in the receiver's outbox (``--outbox``)."""
        return int(self.data.nbytes)


@dataclass(frozen=True)
class Finish:
    """WORK, receiver -> every worker: no more of ``scan`` comes."""
    scan: str


@dataclass(frozen=True)
class Detector:
    """WORK, receiver -> every worker: ``scan``'s pixel mask, before its partitions."""
    scan: str
    mask: Any


@dataclass(frozen=True)
class Ack:
    """ACK, worker -> receiver: one partition of ``scan`` processed."""
    scan: str


@dataclass(frozen=True)
class Live:
    """LIVE, any rank -> rank 0: a live delta of ``scan``."""
    geometry: ScanGeometry
    live: Any


@dataclass(frozen=True)
class Heartbeat:
    """CTRL, receiver -> rank 0: snapshots of its open scans ``(report, idle seconds)``
    and its rejections ``(counts, examples, held)`` (None: a worker has none)."""
    index: Any              # the receiver's index (None: a worker)
    snapshots: List[Any]
    rejections: Any


@dataclass(frozen=True)
class Closed:
    """CTRL, receiver ``index`` -> rank 0: it closed a scan, with its report."""
    index: Any
    report: ScanReport


@dataclass(frozen=True)
class Shared:
    """SHARE, receiver -> the other receivers: a scan's start or end (``kind``) that
    reached one receiver only (their sockets' ``apply_shared``)."""
    kind: str
    msg: Any


@dataclass(frozen=True)
class Abort:
    """ABORT, any rank -> every rank: stop with ``message``."""
    message: str


@dataclass(frozen=True)
class Finalize:
    """FIN, rank 0 -> every rank: finalize ``scan`` (collectively)."""
    scan: str


@dataclass(frozen=True)
class Stop:
    """FIN, rank 0 -> every rank: end the loop (``reason``: ``scans`` or ``deadline``)."""
    reason: str


@dataclass(frozen=True)
class CloseAll:
    """FIN, rank 0 -> every rank: the deadline passed; receivers close what is open."""


@dataclass(frozen=True)
class Enough:
    """FIN, rank 0 -> every rank: the last finalize is announced; receivers open no
    new scan (``reason`` is what a refused one is told)."""
    reason: str


@dataclass(frozen=True)
class FrameGet:
    """FRAME, rank 0 -> receivers: viewer request ``n`` for a frame of ``scan``."""
    n: Any
    scan: str
    frame: int
    max_bytes: int


@dataclass(frozen=True)
class FrameGot:
    """FRAME, receiver ``rank`` -> rank 0: what it keeps of request ``n`` (or None)."""
    n: int
    rank: int
    found: Any
