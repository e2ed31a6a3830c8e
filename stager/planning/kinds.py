"""The table of block kinds: what a kind brings, and the one row that registers it.

A block kind is one module (``stager/kinds/files.py``, ``stager/kinds/h5.py``)
implementing :class:`Kind`, plus one row of :data:`ROWS`. Planning, scatter
placement, the staging pipeline, ``verify`` and ``stager plan`` ask the kind
through this table; nothing else branches on a kind's name. As with
:class:`core.commit.Session`, the protocol lives below the code that
uses it and the implementations above: a row names its class ``"module:Class"``,
imported when first asked for, so planning never imports transfer code.

To add a kind: a module with a class implementing :class:`Kind`, and a row here
(or :func:`register`, for a kind from outside the package: the toy kind of
``tests/toykind.py``). Its ``entries`` (entry syntax) go to :mod:`hooks.kinds`, which
lists no kinds of its own: this table is the one list.
The table is a :class:`core.table.Table`, as every plug-in table of the project.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Tuple

from core.table import Table
from hooks import kinds as spec_kinds

__all__ = ["Kind", "PlanContext", "ROWS", "register", "kind", "kinds", "names", "options",
           "split"]


@dataclass
class PlanContext:
    """What the planning of every block shares (rank 0): ``claimed`` destination ->
    (source, pattern) of every output so far, all kinds; ``stat``; ``trees`` copied
    whole and ``skipped`` links (the sources' area); ``options``: the kinds' own
    options given to ``build_plan`` (see :func:`options`)."""

    stat: Any
    claimed: Dict[str, Any] = field(default_factory=dict)
    trees: List[Any] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    options: Dict[str, Any] = field(default_factory=dict)


class Kind(Protocol):
    """One block kind. Its units are :class:`stager.planning.plan.Unit`."""

    name: str           # the word in the spec (``files``)
    what: str           # for messages: "the files"
    label: str          # in the report's summary: "HDF5 selections" ("": plain files)
    whole_files: bool   # units are byte copies of whole sources (amplification,
                        # --verify-source re-reads them)
    entries: Any        # hooks.kinds.EntrySyntax, or None: plain file patterns
    options: Tuple[Any, ...]  # its own core.options.Option rows (STAGER_<NAME>)

    def plan(self, block: Any, index: int, ctx: PlanContext) -> Tuple[Any, List[Any]]:
        """``(BlockPlan, units)`` of one block; rank 0, serial; raises ``PlanError``."""

    def split(self, plan: Any, nodes: int) -> Any:
        """The plan with this kind's scatter units cut for ``nodes`` nodes (pure)."""

    def check(self, node: str) -> None:
        """Local check on a leader before anything is written (a missing capability)."""

    def transfer(self, t: Any) -> Any:
        """Collective over ``t.comm`` (:class:`stager.staging.kind.Transfer`): move
        ``t.moved``; never raise, return :class:`stager.staging.kind.Moved`."""

    def verify(self, path: str, source: str) -> Optional[str]:
        """Why the recorded copy at ``path`` (identity and size checked, of the unit
        keyed ``source``) is not good beyond its checksum; ``None`` when it is."""

    def locate(self, u: Any) -> Optional[Tuple[str, Any, Optional[int]]]:
        """Optional, for :mod:`stager.locality`: ``(source, FrameRange or None for a
        whole copy, size to check or None)``, or ``None``: not read in place of a source."""

    def describe_block(self, b: Any) -> str:
        """``stager plan``: what a block of this kind stages."""

    def describe_unit(self, u: Any) -> str:
        """``stager plan``: one unit, one line."""

    def unit_dict(self, u: Any) -> Dict[str, Any]:
        """``stager plan --json``: one unit (optional ``json_keys``: the keys of the
        count and list)."""


#: name -> "module:Class" (or an instance), in the order kinds are planned and staged
ROWS: Table[Kind] = Table("block kind", {
    "files": "stager.kinds.files:FilesKind",
    "h5": "stager.kinds.h5:H5Kind",
}, make=lambda cls: cls())
for _name, _row in ROWS.items():  # the spec language's kinds (syntax read when used)
    spec_kinds.register(_name, f"{_row}.entries")


def register(k: Kind) -> None:
    """Add a kind after the built-in ones (and its entry syntax to the spec language)."""
    ROWS.register(k.name, k)
    spec_kinds.register(k.name, k.entries)


def kind(name: str) -> Kind:
    """The kind called ``name`` (``core.errors.UnknownName``, a ``ValueError``, if none)."""
    return ROWS.load(name)


def kinds() -> Tuple[Kind, ...]:
    """Every kind, in table order."""
    return ROWS.loaded()


def names() -> Tuple[str, ...]:
    return ROWS.names()


def options() -> Tuple[Any, ...]:
    """Every kind's own option rows (``StageOptions.kind_options``)."""
    return tuple(o for k in kinds() for o in getattr(k, "options", ()))


def split(plan: Any, nodes: int) -> Any:
    """The plan with every kind's scatter units cut for ``nodes`` nodes. Pure: every
    rank computes the same from the broadcast plan; a split plan is returned as it is."""
    for k in kinds():
        if plan.units(k.name):
            plan = k.split(plan, nodes)
    return plan
