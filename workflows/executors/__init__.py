"""Executors: one interface (``submit -> Future``, ``shutdown``, ``with``) over existing engines.

``make(name, **options)`` builds one by name, a row of :data:`ROWS` (``inline``,
``local``, ``mpi``, ``parsl``: name -> ``"module:Class"``, a :class:`core.table.Table`,
imported when first asked for). Each module imports its engine lazily (Parsl takes
a second).
"""

from __future__ import annotations

from typing import Any

import lazy_loader

from core.table import Table

from .base import Executor
from .inline import InlineExecutor
from .local import LocalExecutor

__all__ = ["Executor", "InlineExecutor", "LocalExecutor", "MPIExecutor", "ParslExecutor", "ROWS",
           "NAMES", "make"]

#: executor name -> "module:Class", imported when first asked for (Parsl takes a second;
#: mpi4py only under MPI): adding an executor is one module and one row
ROWS: Table[Any] = Table("executor", {
    "inline": "workflows.executors.inline:InlineExecutor",
    "local": "workflows.executors.local:LocalExecutor",
    "mpi": "workflows.executors.mpi:MPIExecutor",
    "parsl": "workflows.executors.parsl:ParslExecutor",
})
NAMES = ROWS.names()


def make(name: str, **options: Any) -> Executor:
    """Build the executor called ``name`` (a row of :data:`ROWS`) with its keyword options.

    Raises
    ------
    core.errors.UnknownName
        For an unknown name.
    """
    return ROWS.load(name)(**options)


# MPIExecutor and ParslExecutor on first use (lazy_loader): without mpi4py or parsl up front
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "mpi": ["MPIExecutor"], "parsl": ["ParslExecutor"]})
