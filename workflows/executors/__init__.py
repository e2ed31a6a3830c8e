"""Executors: one interface (``submit -> Future``, ``shutdown``, ``with``) over existing engines.

``make(name, **options)`` builds one by name: ``inline``, ``local``, ``mpi``,
``parsl``. Each module imports its engine lazily (Parsl takes a second).
"""

from __future__ import annotations

from typing import Any

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
    "NAMES",
    "make",
]

NAMES = ("inline", "local", "mpi", "parsl")


def make(name: str, **options: Any) -> Executor:
    """Build the executor called ``name`` with its keyword options.

    Raises
    ------
    ExecutorError
        For an unknown name.
    """
    if name == "inline":
        return InlineExecutor(**options)
    if name == "local":
        return LocalExecutor(**options)
    if name == "mpi":
        from .mpi import MPIExecutor

        return MPIExecutor(**options)
    if name == "parsl":
        from .parsl import ParslExecutor

        return ParslExecutor(**options)
    raise ExecutorError(f"unknown executor {name!r}: expected one of {', '.join(NAMES)}")


# MPIExecutor and ParslExecutor on first use (lazy_loader): without mpi4py or parsl up front
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "mpi": ["MPIExecutor"], "parsl": ["ParslExecutor"]})
