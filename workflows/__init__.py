"""Dataflow workflows on staged data: apps, futures, foreach, tree reductions, executors.

A workflow file defines ``main(args)`` and builds its task graph with ``@app``,
``foreach`` and ``reduce_tree`` (an example: docs/guide/workflows.md); it runs with
``python -m workflows run FLOW.py --executor mpi|local|inline|parsl`` (under ``mpirun``
for ``mpi``), or in Python inside ``with executors.make("local"):``. See
docs/ARCHITECTURE.md, section 4.
"""

from __future__ import annotations

from . import executors
from .apps import App, CommandApp, app, command
from .command import CommandResult
from .dataflow import foreach, reduce_tree
from .errors import (CommandFailure, DependencyFailure, ExecutorError, FlowError, HookError,
                     NoExecutorError, ResultsError, TaskCrashed, TaskFailure, TaskTimeout,
                     WorkflowError)
from .futures import AppFuture, phase_spans, wait_all
from .node import on_this_node, this_node, worker_name

__all__ = ["App", "AppFuture", "CommandApp", "CommandFailure", "CommandResult", "DependencyFailure",
           "ExecutorError", "FlowError", "HookError", "NoExecutorError", "ResultsError",
           "TaskCrashed", "TaskFailure", "TaskTimeout", "WorkflowError", "app", "command",
           "executors", "foreach", "on_this_node", "phase_spans", "reduce_tree", "this_node",
           "wait_all", "worker_name"]
