"""The block kinds the spec language knows, and each kind's entry syntax: one table.

A kind's word is a reserved keyword of the grammar (``hooks/grammar.lark`` is
completed from this table when the parser is built). Each row maps the word to
the function that splits one entry into ``(file pattern, selection)`` and raises
:class:`~hooks.h5entry.EntryError` (with the offset of the problem) when the entry
is not valid; ``None`` for kinds whose entries are plain file patterns.

The stager's kinds (``stager.kinds``) register here through their own table, so
a kind is one module plus one row; the rows below are the built-in kinds, listed
here so that ``hooks`` parses specs on its own.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from hooks.h5entry import split_entry

__all__ = ["EntrySyntax", "register", "names", "entry_syntax"]

#: Splits an entry into (file pattern, selection); raises EntryError.
EntrySyntax = Callable[[str], Tuple[str, Any]]

_TABLE: Dict[str, Optional[EntrySyntax]] = {"files": None, "h5": split_entry}


def register(name: str, syntax: Optional[EntrySyntax] = None) -> None:
    """Add (or replace) the kind ``name``: a word of letters, digits and ``_``."""
    if not name.isidentifier() or name.lower() != name:
        raise ValueError(f"block kind {name!r}: use a lower-case word of letters, digits, '_'")
    _TABLE[name] = syntax


def names() -> Tuple[str, ...]:
    """The known kinds, in the order they were registered."""
    return tuple(_TABLE)


def entry_syntax(name: str) -> Optional[EntrySyntax]:
    """The entry syntax of kind ``name`` (``None``: plain file patterns)."""
    return _TABLE[name]
