"""The table of block kinds: what a kind brings, and the one row that registers it.

A block kind is one module (``stager/kinds/files.py``, ``stager/kinds/h5.py``)
implementing :class:`Kind` and one row of :data:`ROWS`. Everything generic --
planning a spec (:func:`stager.planning.build_plan`), scatter placement, the
staging pipeline, ``verify``, ``stager plan`` -- walks this table and asks each
kind; nothing else branches on a kind's name. Like
:class:`stager.nodelocal.commit.Session`, the protocol lives below the code that
uses it and the implementations above, chosen at run time: a row names its
class as ``"module:Class"`` and is imported the first time it is asked for, so
planning never imports the transfer code and no import runs back up the layers.

To add a kind: write a module with a class implementing :class:`Kind`, then add a
row here, or call :func:`register` (a kind from outside the package, a test's toy
kind). A kind with its own entry syntax gives it as ``entries``; :func:`register`
hands it to the spec language (:mod:`hooks.kinds`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Tuple, Union

from hooks import kinds as spec_kinds

__all__ = ["Kind", "PlanContext", "ROWS", "register", "kind", "kinds", "names", "split"]


@dataclass
class PlanContext:
    """What every block's planning shares (rank 0, serial).

    ``claimed``: destination -> (source, pattern) of every output planned so far
    (all blocks and kinds, so two outputs never land at one name); ``stat``:
    ``os.stat`` or a test's counter; ``trees``: directories copied whole, and
    ``skipped``: symbolic links not followed (both for the sources' area);
    ``options``: keyword arguments of ``build_plan`` meant for one kind
    (``h5_inline_bytes``).
    """

    stat: Any
    claimed: Dict[str, Any] = field(default_factory=dict)
    trees: List[Any] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    options: Dict[str, Any] = field(default_factory=dict)


class Kind(Protocol):
    """One block kind: its entries, its planning, its transfer, its checks, its words.

    Units are the kind's planned outputs (:class:`stager.planning.plan.Unit`).
    """

    name: str           # the word in the spec (``files``)
    what: str           # for messages: "the files"
    label: str          # in the report's summary: "HDF5 selections" ("" for plain files)
    whole_files: bool   # units are byte copies of whole sources (amplification,
                        # --verify-source re-reads them)
    entries: Any        # hooks.kinds.EntrySyntax, or None: plain file patterns

    def plan(self, block: Any, index: int, ctx: PlanContext) -> Tuple[Any, List[Any]]:
        """Plan one block: ``(BlockPlan, units)``; rank 0, serial; raise ``PlanError``."""

    def split(self, plan: Any, nodes: int) -> Any:
        """The plan with this kind's scatter units cut for ``nodes`` nodes (pure)."""

    def check(self, node: str) -> None:
        """Local check on a leader before anything is written (a missing capability)."""

    def transfer(self, t: Any) -> Any:
        """Collective over ``t.comm`` (:class:`stager.staging.kind.Transfer`): move
        ``t.moved``; never raise, return :class:`stager.staging.kind.Moved`."""

    def verify(self, path: str, source: str) -> Optional[str]:
        """Why the recorded copy at ``path`` (already checked for identity and size)
        is not a good copy, beyond its checksum; ``None`` when it is. ``source``: the
        unit's key recorded with the copy."""

    def describe_block(self, b: Any) -> str:
        """``stager plan``: what a block of this kind stages (after ``block N (LOC):``)."""

    def describe_unit(self, u: Any) -> str:
        """``stager plan``: one unit, one line."""

    def unit_dict(self, u: Any) -> Dict[str, Any]:
        """``stager plan --json``: one unit."""


#: name -> "module:Class" (or an instance), in the order kinds are planned and staged
ROWS: Dict[str, Union[str, Kind]] = {
    "files": "stager.kinds.files:FilesKind",
    "h5": "stager.kinds.h5:H5Kind",
}

_loaded: Dict[str, Kind] = {}


def register(k: Union[str, Kind]) -> None:
    """Add a kind (an instance, or ``"module:Class"``) after the built-in ones."""
    obj = _load(k)
    ROWS[obj.name] = k
    _loaded[obj.name] = obj
    spec_kinds.register(obj.name, obj.entries)


def _load(row: Union[str, Kind]) -> Kind:
    if not isinstance(row, str):
        return row
    module, _, cls = row.partition(":")
    return getattr(importlib.import_module(module), cls)()


def kind(name: str) -> Kind:
    """The kind called ``name``."""
    if name not in _loaded:
        if name not in ROWS:
            raise ValueError(f"unknown block kind {name!r}: use one of {', '.join(ROWS)}")
        _loaded[name] = _load(ROWS[name])
    return _loaded[name]


def kinds() -> Tuple[Kind, ...]:
    """Every kind, in table order."""
    return tuple(kind(n) for n in ROWS)


def names() -> Tuple[str, ...]:
    return tuple(ROWS)


def split(plan: Any, nodes: int) -> Any:
    """The plan with every kind's scatter units cut for ``nodes`` nodes. Pure.

    Every rank computes the same result from the broadcast plan and the node count;
    a plan already split is returned as it is.
    """
    for k in kinds():
        if plan.units(k.name):
            plan = k.split(plan, nodes)
    return plan
