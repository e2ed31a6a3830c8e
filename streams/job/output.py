"""What a receiving job leaves per scan beside ``<scan>.h5`` (:mod:`analyses.output`):
``<scan>.json``, the merged :class:`~streams.accounting.ScanReport` (``to_dict``) plus
``outputs``, ``timing`` and ``lost_receivers`` when ranks were lost; and
:func:`exit_status`, the job's verdict over all scans.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import numpy as np

from core import localfs
from stager.outputs import mark
from streams.accounting import ScanReport

__all__ = ["write_report", "scan_ok", "exit_status"]


def write_report(path: str, report: Optional[ScanReport], extra: Dict[str, Any]) -> None:
    """Write ``<scan>.json`` atomically: the report's dict updated with ``extra``."""
    d: Dict[str, Any] = report.to_dict() if report is not None else {}
    d.update(extra)
    mark(d)
    localfs.write_bytes_atomic(path, (json.dumps(d, indent=1, default=_plain) + "\n").encode(),
                               mode=0o644)


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def scan_ok(report: ScanReport, allow_loss: float = 0.0) -> bool:
    """True when the scan lost at most ``allow_loss`` of its frames (0: nothing missing)
    and its result is not invalid (:attr:`ScanReport.result_invalid`)."""
    if report.result_invalid:
        return False
    if allow_loss <= 0:
        return report.ok
    return report.loss_fraction() <= allow_loss


def exit_status(reports: List[ScanReport], wanted: int, allow_loss: float = 0.0) -> int:
    """0 when ``wanted`` scans were served and each is :func:`scan_ok`; else 1."""
    return 0 if len(reports) >= wanted and all(scan_ok(r, allow_loss) for r in reports) else 1
