"""The table of block kinds: the order in which kinds are staged, and how to add one.

To add a kind: plan its units in :mod:`stager.planning` (``Plan.units(name)``),
implement :class:`~stager.staging.kind.Kind` (its transfer over the leader
communicator) and add an instance here. The pipeline runs the same phases for
every kind in this table, in this order.
"""
from __future__ import annotations

from typing import Tuple

from stager.staging.files import FilesKind
from stager.staging.h5 import H5Kind
from stager.staging.kind import Kind

__all__ = ["KINDS", "kind"]

KINDS: Tuple[Kind, ...] = (FilesKind(), H5Kind())


def kind(name: str) -> Kind:
    """The kind called ``name``."""
    for k in KINDS:
        if k.name == name:
            return k
    raise ValueError(f"unknown block kind {name!r}")
