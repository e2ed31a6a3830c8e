"""What a receiving job leaves per scan beside ``<scan>.h5`` (:mod:`analyses.output`):
``<scan>.json``, the merged :class:`~streams.accounting.ScanReport` (``to_dict``) plus
``outputs``, ``timing`` and ``lost_receivers`` when ranks were lost;
:func:`drained`, the drain of a scan's files that never loses them; and
:func:`exit_status`, the job's verdict over all scans.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from core import localfs
from core.errors import MpistageError
from core.mpi.agree import bcast_result
from core.outputs import mark
from streams.accounting import ScanReport

__all__ = ["write_report", "drained", "scan_ok", "exit_status"]


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


def drained(comm: Any, drain: Callable[..., Any], name: str, template: str,
            written: Any, local_dir: str, out: str) -> Tuple[str, bool]:
    """Collective over `comm`: every rank must call. ``drain(comm, name, template,
    written)`` (the command's: :func:`stager.drain` and ``--then``); when it fails (the
    drain raises the same error on every rank), rank 0 copies the scan's node-local
    ``local_dir`` into a new directory ``OUT/<name>.undrained-XXXXXXXX`` (a name nothing
    else has), or, if that fails too, leaves it where it is. The job goes on: data that
    arrived is never discarded, and no rank is aborted.

    Returns
    -------
    (str, bool)
        The sentence saying where the results are ("" when drained), and whether they
        are only in ``local_dir`` (to be kept).
    """
    err = None
    try:
        drain(comm, name, template, written)
    except (MpistageError, OSError) as e:
        err = str(e)
    why = next((e for e in comm.allgather(err) if e), None)
    if why is None:
        return "", False
    return bcast_result(comm, _keep, name, local_dir, out, why)


def _keep(name: str, local_dir: str, out: str, why: str) -> Tuple[str, bool]:
    """Rank 0: the undrained results of scan ``name`` copied into a new directory of
    ``out`` (see :func:`drained`)."""
    try:
        kept = tempfile.mkdtemp(prefix=f"{name}.undrained-", dir=out)
        shutil.copytree(local_dir, kept, dirs_exist_ok=True)
    except OSError as e:
        return (f"scan {name}: not drained ({why}); keeping it in {out} failed too ({e}): "
                f"its results are in {local_dir} on this node (rank 0's)", True)
    return f"scan {name}: not drained ({why}); its results are kept in {kept}", False
