"""The parsed hook spec as plain, frozen data (no I/O, no MPI)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from hooks.h5entry import H5Selection

__all__ = ["Location", "Pattern", "Block", "Spec"]


@dataclass(frozen=True)
class Location:
    """Where something was written: 1-based line and column in a spec file."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Pattern:
    """One entry of a block.

    Attributes
    ----------
    text : str
        The pattern after ``~``/``$VAR`` expansion, made absolute against the
        spec file's directory; may hold glob characters and ``**``. In an
        ``h5`` block, the file part of the entry.
    raw : str
        The entry as written (quotes removed).
    optional : bool
        Written with a leading ``?``: matching nothing is not an error.
    location : Location
    selection : H5Selection or None
        In an ``h5`` block, the internal path and slice (checked when parsed).
    """

    text: str
    raw: str
    optional: bool
    location: Location
    selection: Optional[H5Selection] = None


@dataclass(frozen=True)
class Block:
    """``broadcast to DEST KIND {...}`` or ``scatter to DEST KIND [replicas R] {...}``.

    Attributes
    ----------
    dest : str
        Absolute destination directory, with ``~``, ``$VAR``, ``%j``, ``%u``
        expanded. ``%n`` (node name) stays until the stager knows the node; a
        literal ``%`` written as ``%%`` is held as ``\\x00`` until then.
    kind : str
        ``files`` (whole files) or ``h5`` (HDF5 selections).
    patterns : tuple of Pattern
    location : Location
        Where the ``broadcast`` keyword is.
    dest_location : Location
        Where the destination is (for messages about it).
    mode : str
        ``broadcast`` (every node gets every output) or ``scatter`` (each output
        lands on ``replicas`` nodes).
    replicas : int
        For ``scatter``: how many nodes hold each output (default 1); 0 for ``broadcast``.
    """

    dest: str
    kind: str
    patterns: Tuple[Pattern, ...]
    location: Location
    dest_location: Location
    mode: str = "broadcast"
    replicas: int = 0

    @property
    def display_dest(self) -> str:
        """The destination as a user would write it (``%%`` shown as ``%``)."""
        return self.dest.replace("\x00", "%")


@dataclass(frozen=True)
class Spec:
    """A whole spec file: its blocks in the order written."""

    path: str
    blocks: Tuple[Block, ...]
