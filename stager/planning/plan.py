"""The plan of a staging run as plain, picklable data: every output, where it lands.

Rank 0 builds it (:func:`stager.planning.build_plan`), one broadcast hands it
to every rank, and the staging pipeline executes it. It covers every block
kind: whole files (:class:`FileEntry`) and HDF5 selections
(:class:`~stager.kinds.h5.types.H5FilePlan`). Every planned output -- a
*unit* -- answers the same few questions the pipeline asks (:class:`Unit`):
where it lands, which block it came from, what identifies its source for
resume, and how many bytes it will occupy. Nothing here touches MPI or the
filesystem, so it is tested serially.

Naming: the *plan* is what rank 0 decided for the whole run; the per-destination
*record* (:mod:`stager.nodelocal.record`) is what a node actually holds.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional, Protocol, Tuple

from core.nodes import expand_node
from stager.planning.sources import SourceArea

__all__ = ["Unit", "FileEntry", "FrameRange", "BlockPlan", "Plan", "expand_dest",
           "unit_source_id", "describe_size"]


def expand_dest(dest: str, template: str, node: str) -> str:
    """A planned destination on ``node``: only its block's ``template`` part is expanded.

    The rest of ``dest`` comes from a matched source name and is kept exactly: a
    source called ``run%n.dat`` lands as ``run%n.dat``, never ``runnode0.dat``.
    """
    head = template.rstrip("/") + "/"
    if not dest.startswith(head):
        raise ValueError(f"destination {dest!r} is not below its block's directory {template!r}")
    return os.path.join(expand_node(template, node), dest[len(head):])


def unit_source_id(u: Any) -> Tuple[int, int, int, int]:
    """(size, mtime_ns, ctime_ns, inode) of a unit's source when planned (-1: not known)."""
    return (u.size, u.mtime_ns, getattr(u, "ctime_ns", -1), getattr(u, "ino", -1))


@dataclass(frozen=True)
class FrameRange:
    """Source frames ``range(first, stop, step)`` of an output's frame dataset."""

    first: int
    stop: int
    step: int = 1

    def __contains__(self, frame: object) -> bool:
        return isinstance(frame, int) and frame in range(self.first, self.stop, self.step)

    def __len__(self) -> int:
        return len(range(self.first, self.stop, self.step))

    def row(self, frame: int) -> int:
        """The row of source frame ``frame`` in this range's copy."""
        return (frame - self.first) // self.step


class Unit(Protocol):
    """What the pipeline needs of one planned output (a file, or an HDF5 copy)."""

    @property
    def dest(self) -> str: ...          # destination template (may hold %n)
    @property
    def block(self) -> int: ...         # index of the spec block
    @property
    def key(self) -> str: ...           # source identity recorded for resume
    @property
    def size(self) -> int: ...          # source size when planned
    @property
    def mtime_ns(self) -> int: ...      # source mtime when planned (the copy gets it)
    @property
    def mode(self) -> int: ...          # permission bits for the copy
    @property
    def out_bytes(self) -> int: ...     # bytes the copy occupies (capacity check)


@dataclass(frozen=True)
class FileEntry:
    """One source file and where it lands (a ``files`` block).

    Attributes
    ----------
    source : str
        Absolute path on the shared filesystem.
    dest : str
        Absolute destination path; may contain ``%n`` (node name).
    size, mode, mtime_ns : int
        ``st_size``, permission bits and ``st_mtime_ns`` of the source when planned.
    block : int
        Index of the spec block that produced the entry.
    ctime_ns, ino : int
        ``st_ctime_ns`` and ``st_ino`` of the source when planned (``-1``: not known):
        with size and mtime, the identity checked before and after the source is read.
    """

    source: str
    dest: str
    size: int
    mode: int
    mtime_ns: int
    block: int = 0
    ctime_ns: int = -1
    ino: int = -1

    @property
    def key(self) -> str:
        return self.source

    @property
    def out_bytes(self) -> int:
        return self.size


@dataclass(frozen=True)
class BlockPlan:
    """A spec block after expansion.

    Attributes
    ----------
    dest : str
        Destination template (may hold ``%n``).
    kind : str
        The block kind (a row of :mod:`stager.planning.kinds`).
    location : str
        ``FILE:LINE:COL`` of the block, for messages.
    files : int
        Outputs the block produces on each node.
    bytes : int
        Bytes each node receives from it (for ``h5``: the estimated size of the
        output files, compressed as the sources are).
    data_bytes : int
        For ``h5``: the selected bytes, uncompressed; for ``files``: ``bytes``.
    mode : str
        ``broadcast`` (every node gets every output) or ``scatter`` (each output on
        ``replicas`` nodes, placed by :mod:`stager.planning.scatter`).
    replicas : int
        For ``scatter``: nodes holding each output; 0 for ``broadcast``.
    """

    dest: str
    kind: str
    location: str
    files: int = 0
    bytes: int = 0
    data_bytes: int = 0
    mode: str = "broadcast"
    replicas: int = 0


@dataclass(frozen=True)
class Plan:
    """Every output of a run, in a deterministic order (block, then destination).

    ``outputs`` holds each block kind's units under its name
    (:mod:`stager.planning.kinds`), in the table's order; a kind without units is
    absent.
    """

    spec_path: str
    blocks: Tuple[BlockPlan, ...]
    outputs: Dict[str, Tuple[Any, ...]] = field(default_factory=dict)
    #: key of the spec's records in every destination root (stager.planning.spec_key)
    spec_key: str = ""
    #: the sources' side, which no destination may overlap (planning.sources.SourceArea)
    areas: Tuple[SourceArea, ...] = field(default_factory=tuple)
    #: symbolic links to directories that were not followed (below ``**`` or in a tree)
    skipped_links: Tuple[str, ...] = field(default_factory=tuple)

    def units(self, kind: str) -> Tuple[Any, ...]:
        """The planned outputs of one block kind (none: ``()``)."""
        return self.outputs.get(kind, ())

    @property
    def n_outputs(self) -> int:
        return sum(len(v) for v in self.outputs.values())

    @property
    def total_bytes(self) -> int:
        """Bytes of all blocks: what one node receives when every block is a broadcast
        (with scatter blocks: :func:`stager.planning.scatter.node_bytes`)."""
        return sum(b.bytes for b in self.blocks)

    @property
    def scatters(self) -> bool:
        """The plan has scatter blocks (outputs that only some nodes hold)."""
        return any(b.mode == "scatter" for b in self.blocks)

    def to_dict(self) -> Dict[str, Any]:
        """The plan as JSON data: each kind's units under the keys it names
        (``json_keys``: its count and its list), any other kind's under ``outputs``."""
        from stager.planning.kinds import kinds

        doc: Dict[str, Any] = {"spec": self.spec_path,
                               "blocks": [asdict(b) for b in self.blocks],
                               "bytes": self.total_bytes, "outputs": {}}
        for k in kinds():
            units = [k.unit_dict(u) for u in self.units(k.name)]
            keys = getattr(k, "json_keys", None)
            if keys:
                doc[keys[0]], doc[keys[1]] = len(units), units
            elif units:
                doc["outputs"][k.name] = units
        doc.update(spec_key=self.spec_key, areas=[asdict(a) for a in self.areas],
                   skipped_links=list(self.skipped_links))
        return doc


def count(n: int, word: str) -> str:
    """``1 file``, ``2 files``: a count and its noun, for humans."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def describe_size(n: Optional[int]) -> str:
    """Bytes in binary units, for humans (``1.5 MiB``)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
