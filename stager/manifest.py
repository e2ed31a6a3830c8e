"""The manifest: the plan of a staging run as plain, picklable data.

Rank 0 builds it (``stager.plan.build_manifest``), one broadcast hands it to
every rank, and the transfer layer executes it. Nothing here touches MPI or
the filesystem, so it is tested serially.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Tuple

__all__ = ["Entry", "BlockPlan", "Manifest", "expand_node"]


def expand_node(template: str, node: str) -> str:
    """Replace the ``%n`` placeholder of a destination template with a node name.

    ``%j`` and ``%u`` were already expanded when the spec was read; ``%%``
    became a literal ``%`` there too, and is kept as ``\\x00`` until here so a
    literal ``%n`` written as ``%%n`` survives.
    """
    return template.replace("%n", node).replace("\x00", "%")


@dataclass(frozen=True)
class Entry:
    """One source file and where it lands.

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
    """

    source: str
    dest: str
    size: int
    mode: int
    mtime_ns: int
    block: int = 0


@dataclass(frozen=True)
class BlockPlan:
    """A spec block after expansion: its destination template and where it was written."""

    dest: str
    kind: str
    location: str  # "FILE:LINE:COL" of the block, for messages
    files: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Manifest:
    """Every file to stage, in a deterministic order (block, then destination)."""

    spec_path: str
    blocks: Tuple[BlockPlan, ...]
    entries: Tuple[Entry, ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        """Bytes one node receives (every node gets a full replica)."""
        return sum(e.size for e in self.entries)

    @property
    def largest(self) -> Entry | None:
        return max(self.entries, key=lambda e: e.size, default=None)

    def for_node(self, node: str) -> List[Tuple[Entry, str]]:
        """Pairs ``(entry, concrete destination)`` for one node."""
        return [(e, expand_node(e.dest, node)) for e in self.entries]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "spec": self.spec_path,
            "blocks": [asdict(b) for b in self.blocks],
            "files": len(self.entries),
            "bytes": self.total_bytes,
            "entries": [asdict(e) for e in self.entries],
        }

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> Manifest:
        return cls(
            spec_path=d["spec"],
            blocks=tuple(BlockPlan(**b) for b in d["blocks"]),
            entries=tuple(Entry(**e) for e in d["entries"]),
        )

    @classmethod
    def from_entries(cls, spec_path: str, blocks: Iterable[BlockPlan],
                     entries: Iterable[Entry]) -> Manifest:
        return cls(spec_path=spec_path, blocks=tuple(blocks), entries=tuple(entries))
