"""A workflow file: finding it (a path, or an installed package's module), importing it,
the ``args`` its ``main`` is given, and driving that ``main`` on an executor.

A flow file defines ``main(args)``, which builds the task graph and returns its
final future(s) (or a list/dict of them), and optionally ``add_arguments(parser)``
for its own options (given after ``--``). ``args`` is an ``argparse.Namespace``
with the flow's options plus ``argv`` (flow arguments), ``out`` (absolute
output directory: ``--out``, else a new directory ``<folder>-<flow>-out-<date>-<time>`` made in
the current directory, never the current directory itself), ``overwrite``
(``--overwrite``: results may replace files this project did not write, see
:mod:`core.outputs`; never an input), ``executor`` (its
name), ``workers``, ``ranks``, ``stage_report`` (or ``None``) and ``flow``
(the flow file).

A flow may also define ``finalize(args, job)``, called on every rank after
all tasks finished (``job`` is the run's :class:`core.job.Job` over
``MPI.COMM_WORLD``, the node layout the stager used, or ``None`` without MPI):
the place for collective writes such as
:func:`workflows.results.write_collective` of rows kept on the worker ranks.

A flow whose options include ``results`` (a node-local results directory, ``%n``:
each node's) has them drained by the runner after ``finalize``, into ``out``
(:func:`workflows.run.drain_results`; not with ``drain`` false, ``--no-drain``), the drain added
to its ``RUN_RECORD`` (a JSON file in ``out``) if it names one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

from core.errors import MpistageError
from core.table import load_module

from .errors import FlowError, TaskFailure
from .executors import Executor
from .futures import exception_of, find_futures, wait_all

__all__ = ["load_flow", "flow_namespace", "flow_module_name", "drive"]

#: the runtime of the flow being driven (rank 0), for the line of an interrupted run
DRIVEN: Dict[str, Any] = {}


def flow_module_name(path: str) -> Optional[str]:
    """The dotted name under which ``path`` is importable from ``sys.path``, if any."""
    path = os.path.abspath(path)
    for entry in sys.path:
        root = os.path.abspath(entry or os.getcwd())
        if not path.startswith(root + os.sep):
            continue
        parts = os.path.relpath(path, root)[:-3].split(os.sep)
        pkgdir, ok = root, True
        for pkg in parts[:-1]:
            pkgdir = os.path.join(pkgdir, pkg)
            ok = ok and pkg.isidentifier() and os.path.isfile(os.path.join(pkgdir, "__init__.py"))
        if ok and all(p.isidentifier() for p in parts):
            return ".".join(parts)
    return None


def load_flow(path: str):
    """Import a workflow file (by its dotted name if importable, else by path).

    Raises
    ------
    FlowError
        Missing file, import failure, or no ``main``.
    """
    import importlib
    import importlib.util

    if not path.endswith(".py") and path.replace(".", "").replace("_", "").isalnum():
        # a dotted module name (``analyses.runner``): its file
        try:
            spec = importlib.util.find_spec(path)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            path = spec.origin
    if path.endswith(".py") and not os.path.isfile(path) and not os.path.isabs(path):
        path = _installed_flow(path) or path
    if not path.endswith(".py") or not os.path.isfile(path):
        raise FlowError(f"workflow file {path!r} not found in {os.getcwd()} (expected an "
                        "existing .py file, or the module name of an installed package's "
                        "flow, such as hedm.ff or analyses.runner)")
    name = flow_module_name(path)
    try:
        stem = os.path.splitext(os.path.basename(path))[0]
        module = load_module(name or path, f"workflows_flow_{stem}")
    except Exception as exc:
        raise FlowError(
            f"workflow file {path} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(module, "main", None)):
        raise FlowError(f"workflow file {path} defines no main(args) function")
    return module


def _installed_flow(path: str) -> Optional[str]:
    """The file of an installed package's flow written as a path relative to the clone
    (``hedm/ff.py``, as the docs write it) when no such file is in the current directory:
    the module ``hedm.ff``'s file, if it is that path; else None."""
    import importlib.util

    path = os.path.normpath(path)
    dotted = path[:-3].replace(os.sep, ".")
    if not all(p.isidentifier() for p in dotted.split(".")):
        return None
    try:
        spec = importlib.util.find_spec(dotted)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if origin and origin.endswith(os.sep + path) and os.path.isfile(origin):
        return origin
    return None


def flow_namespace(module: Any, flow: str, flow_argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"{os.path.basename(flow)} (flow arguments)")
    if callable(getattr(module, "add_arguments", None)):
        module.add_arguments(parser)
        ns = parser.parse_args(flow_argv)
    else:
        ns = argparse.Namespace()
    ns.argv = list(flow_argv)
    ns.flow = os.path.abspath(flow)
    return ns


def drive(module: Any, ns: argparse.Namespace, ex: Executor, opts: Any = None) -> Dict[str, Any]:
    """Run the flow's main on the active executor ``ex``; never raises.

    With ``--timeout`` every task carries the run's deadline (interrupted where
    it runs, see :mod:`workflows.limits`), and what is still pending a grace
    period later is settled as timed out (:meth:`Runtime.configure`), so
    waiting here is bounded; the executor is then shut down without waiting
    for workers still busy with expired tasks.
    """
    ns.workers = ex.workers
    t0 = time.perf_counter()
    error = None
    bad_input = False
    result = None
    rt = DRIVEN["runtime"] = ex.runtime
    limit = getattr(opts, "timeout", None)
    try:
        rt.configure(limit, getattr(opts, "task_timeout", None), getattr(opts, "isolate", False))
        result = module.main(ns)
        wait_all(result)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, (MpistageError, ValueError)):
            # A user-facing error (bad parameter, failed task): its message says it all;
            # raised by main before any task was launched, it is about the flow's input.
            error = f"{type(exc).__name__}: {exc}"
            bad_input = rt.launched == 0 and not isinstance(exc, TaskFailure)
        else:
            error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    rt.wait()
    rt.stop_clock()
    if rt.expired or (limit is not None and rt.past_deadline and rt.failures):
        error = error or (
            f"the run's time limit of {limit:g} s (--timeout) passed; unfinished tasks failed"
        )
    if rt.expired:
        ex.shutdown(wait=False)  # workers may still be busy with expired tasks
    failed_results = [f for f in find_futures(result) if exception_of(f) is not None]
    status = {
        "seconds": time.perf_counter() - t0,
        "tasks": {
            "launched": rt.launched,
            "succeeded": rt.succeeded,
            "failed": len(rt.failures),
            "not_run": len(rt.skipped),
        },
        "workers": ex.workers,
        "error": error,
        "summary": rt.summary(),
        "failed_results": [str(exception_of(f)) for f in failed_results[:10]],
        "result": short_result(result, failed_results),
    }
    status["ok"] = error is None and not rt.failures and not rt.skipped and not failed_results
    status["bad_input"] = bad_input
    return status


def short_result(result: Any, failed: List[Any]) -> str:
    """The flow's result for the run's summary line, at most 200 characters."""
    if result is None or failed:
        return ""
    futures = find_futures(result)
    if len(futures) == 1 and futures[0] is result:
        text = repr(result.result())
    else:
        text = f"{len(futures)} futures"
    return text if len(text) <= 200 else text[:197] + "..."
