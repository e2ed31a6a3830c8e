"""The block kinds the spec language knows, and each kind's entry syntax.

A kind's word is a reserved keyword of the grammar (``hooks/grammar.lark`` is
completed from this table when the parser is built). Each row maps the word to
the function that splits one entry into ``(file pattern, selection)`` and raises
:class:`~hooks.h5entry.EntryError` (with the offset of the problem) when the entry
is not valid; ``None`` for kinds whose entries are plain file patterns; or a
``"module:Attr"`` naming either, resolved when an entry of the kind is first read.

The list of kinds is the stager's (``stager.planning.kinds``, one table): it
registers each of its kinds here when imported, so a spec is parsed with the kinds
of the stager that will plan it. This package lists none of its own.
"""
from __future__ import annotations

import pkgutil
from typing import Any, Callable, Dict, Optional, Tuple

__all__ = ["EntrySyntax", "register", "names", "entry_syntax"]

#: Splits an entry into (file pattern, selection); raises EntryError.
EntrySyntax = Callable[[str], Tuple[str, Any]]

_TABLE: Dict[str, Any] = {}


def register(name: str, syntax: Any = None) -> None:
    """Add (or replace) the kind ``name``: a word of letters, digits and ``_``; its
    ``syntax`` an :data:`EntrySyntax`, ``None`` or ``"module:Attr"`` naming one."""
    if not name.isidentifier() or name.lower() != name:
        raise ValueError(f"block kind {name!r}: use a lower-case word of letters, digits, '_'")
    _TABLE[name] = syntax


def names() -> Tuple[str, ...]:
    """The known kinds, in the order they were registered."""
    return tuple(_TABLE)


def entry_syntax(name: str) -> Optional[EntrySyntax]:
    """The entry syntax of kind ``name`` (``None``: plain file patterns)."""
    syntax = _TABLE[name]
    if isinstance(syntax, str):
        syntax = _TABLE[name] = pkgutil.resolve_name(syntax)
    return syntax
