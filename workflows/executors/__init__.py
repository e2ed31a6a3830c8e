"""Executors: one interface (``submit -> Future``, ``shutdown``, ``with``) over existing engines.

``make(name, **options)`` builds one by name, a row of :data:`ROWS` (``inline``,
``local``, ``mpi``, ``parsl``: name -> ``"module:Class"``, resolved with the
standard library's :func:`pkgutil.resolve_name` when first asked for). Each module
imports its engine lazily (Parsl takes a second).
"""

from __future__ import annotations

import pkgutil
from typing import Any, Dict

import lazy_loader

from ..errors import ExecutorError
from .base import Executor
from .inline import InlineExecutor
from .local import LocalExecutor

__all__ = [
    "Executor",
    "InlineExecutor",
    "LocalExecutor",
    "MPIExecutor",
    "ParslExecutor",
    "ROWS",
    "NAMES",
    "make",
]

#: executor name -> "module:Class", imported when first asked for (Parsl takes a second;
#: mpi4py only under MPI): adding an executor is one module and one row
ROWS: Dict[str, str] = {
    "inline": "workflows.executors.inline:InlineExecutor",
    "local": "workflows.executors.local:LocalExecutor",
    "mpi": "workflows.executors.mpi:MPIExecutor",
    "parsl": "workflows.executors.parsl:ParslExecutor",
}
NAMES = tuple(ROWS)


def make(name: str, **options: Any) -> Executor:
    """Build the executor called ``name`` (a row of :data:`ROWS`) with its keyword options.

    Raises
    ------
    ExecutorError
        For an unknown name.
    """
    row = ROWS.get(name)
    if row is None:
        raise ExecutorError(f"unknown executor {name!r}: expected one of {', '.join(ROWS)}")
    return pkgutil.resolve_name(row)(**options)


# MPIExecutor and ParslExecutor on first use (lazy_loader): without mpi4py or parsl up front
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "mpi": ["MPIExecutor"], "parsl": ["ParslExecutor"]})
