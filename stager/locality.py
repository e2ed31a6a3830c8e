"""Where staged data lives: which nodes hold a source file, and the path of its copy there.

A workflow places a task on the node that holds its input (``app.on(node)``) and,
inside the task, opens the node-local copy. :class:`Where` answers both from the plan
and the node names with the stager's own pure placement (:mod:`stager.planning.scatter`),
so no node's records are read from another node (docs/hook-spec.md, end of "Scatter
blocks"). :meth:`Where.local` returns the copy when it is there; else ``hard=True``
raises :class:`StagedCopyMissing` naming node, copy and source, and soft (the default)
returns the shared source, counted in :attr:`Where.fell_back` of the calling process.
"""
from __future__ import annotations

import os
import stat as _stat
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from stager.errors import StagerError
from stager.planning.kinds import kinds, split
from stager.planning.plan import FrameRange, Plan, expand_dest
from stager.planning.scatter import placement

__all__ = ["Where", "StagedCopyMissing", "FramesAt", "where", "read_path"]

Key = Tuple[str, int]  # (kind, index of the unit in the plan's outputs of that kind)


class StagedCopyMissing(StagerError):
    """A task placed with ``hard=True`` found no staged copy of its input on its node."""


@dataclass(frozen=True)
class FramesAt:
    """Where a task reads source frames of a ``scatter ... h5`` output (:meth:`Where.frames_at`).

    Read rows ``row, row + 1, ...`` of the dataset (same internal path) in ``path``:
    the node-local range file, or -- ``fell_back`` -- the source file itself (rows
    are then source frame numbers, read with the selection's ``step``).
    """

    path: str
    row: int
    frames: FrameRange
    fell_back: bool


class Where:
    """The placement of a plan's files on named nodes. Pure except :meth:`local`.

    Parameters
    ----------
    plan : Plan
        The staged plan (``stager.plan(spec)``).
    nodes : sequence of str
        Node names in the stager's node order (``node0``, ``node1``, ... when emulating).
    """

    def __init__(self, plan: Plan, nodes: Sequence[str]) -> None:
        self.names: Tuple[str, ...] = tuple(nodes)
        self.plan = plan = split(plan, len(self.names))  # scatter h5: frame ranges
        self._holders = placement(plan, len(self.names)) if plan.scatters else {}
        # each kind says where a task finds source data in its units (Kind.locate)
        self._whole: List[Tuple[Key, Any, Optional[int]]] = []   # whole copies, plan order
        self._index: Dict[str, int] = {}                         # source -> first of _whole
        self._ranges: Dict[str, List[Tuple[FrameRange, Key, Any]]] = {}
        for k in kinds():
            locate: Any = getattr(k, "locate", lambda u: None)
            for i, u in enumerate(plan.units(k.name)):
                at: Any = locate(u)
                if at is not None and at[1] is None:  # a whole copy
                    self._index.setdefault(os.path.normpath(at[0]), len(self._whole))
                    self._whole.append(((k.name, i), u, at[2]))
                elif at is not None:
                    self._ranges.setdefault(os.path.normpath(at[0]), []).append(
                        (at[1], (k.name, i), u))
        for v in self._ranges.values():
            v.sort(key=lambda t: t[0].first)
        self.fell_back = 0

    def source_at(self, dest: str) -> Optional[str]:
        """The source file whose copy lands at ``dest`` (a template with ``%n``), or ``None``."""
        if not hasattr(self, "_by_dest"):
            self._by_dest = {os.path.normpath(u.dest.replace("\x00", "%")): u.source
                             for _, u, _ in self._whole}
        return self._by_dest.get(os.path.normpath(dest))

    def _entry(self, source: str) -> Tuple[Key, Any, Optional[int]]:
        try:
            return self._whole[self._index[os.path.normpath(os.fspath(source))]]
        except KeyError:
            raise KeyError(f"{source} is not a file of the staged plan "
                           f"({self.plan.spec_path})") from None

    def _held(self, key: Key) -> Tuple[str, ...]:
        held = self._holders.get(key)
        return self.names if held is None else tuple(self.names[k] for k in held)

    def nodes(self, source: str) -> Tuple[str, ...]:
        """Names of the nodes holding ``source``'s copy (every node for a broadcast file)."""
        return self._held(self._entry(source)[0])

    def node(self, source: str) -> str:
        """The first node holding ``source`` (where to place a task reading it)."""
        return self.nodes(source)[0]

    def copy(self, source: str, node: str) -> str:
        """The path of ``source``'s copy on ``node`` (whether or not it holds one)."""
        e = self._entry(source)[1]
        return expand_dest(e.dest, self.plan.blocks[e.block].dest, node)

    def local(self, source: str, node: str, hard: bool = False) -> str:
        """The path a task on ``node`` should read for ``source`` (see the module docstring).

        Raises
        ------
        StagedCopyMissing
            ``hard=True`` and ``node`` holds no intact copy (missing, not a regular
            file, or of another size than planned).
        """
        _, e, size = self._entry(source)
        if node not in self.nodes(source):
            if hard:
                raise StagedCopyMissing(
                    f"node {node} holds no copy of {e.source} (its copies are on "
                    f"{', '.join(self.nodes(source))}): place the task there, or softly")
            self.fell_back += 1
            return e.source
        path, fell = read_path(self.copy(source, node), e.source, node, hard, size)
        self.fell_back += fell
        return path

    # -- frame ranges of scatter h5 blocks ------------------------------------------

    def frame_ranges(self, source: str) -> List[Tuple[FrameRange, Tuple[str, ...]]]:
        """The frame ranges of ``source``'s scatter h5 output and the nodes holding each."""
        rs = self._ranges.get(os.path.normpath(os.fspath(source)))
        if not rs:
            raise KeyError(f"{source} has no frame ranges in the staged plan "
                           f"({self.plan.spec_path}): is it in a 'scatter ... h5' block?")
        return [(fr, self._held(key)) for fr, key, _ in rs]

    def _range_of(self, source: str, frame: int) -> Tuple[FrameRange, Key, Any]:
        for fr, key, u in self._ranges.get(os.path.normpath(os.fspath(source)), ()):
            if frame in fr:
                return fr, key, u
        raise KeyError(f"frame {frame} of {source} is in no staged frame range "
                       f"({self.plan.spec_path})")

    def range_copy(self, source: str, frame: int, node: str) -> str:
        """The path on ``node`` of the copy of ``source``'s frame range holding ``frame``
        (whether or not ``node`` holds it)."""
        _, _, fp = self._range_of(source, frame)
        return expand_dest(fp.dest, self.plan.blocks[fp.block].dest, node)

    def frames_at(self, source: str, frame: int, node: str, hard: bool = False) -> FramesAt:
        """Where a task on ``node`` reads source frame ``frame`` (and the rest of its range).

        The range's node-local copy when ``node`` holds it intact; else (soft) the
        source file, counted in :attr:`fell_back`.

        Raises
        ------
        StagedCopyMissing
            ``hard=True`` and ``node`` holds no intact copy of the range (names the
            node, the frames and the copy).
        KeyError
            ``frame`` is in no staged range of ``source``.
        """
        fr, key, fp = self._range_of(source, frame)
        holders = self._held(key)
        if node not in holders:
            if hard:
                raise StagedCopyMissing(
                    f"node {node} holds no copy of frames {fr.first}..{fr.stop - 1} of "
                    f"{fp.source} (they are on {', '.join(holders)}): place the task "
                    "there, or softly")
            self.fell_back += 1
            return FramesAt(fp.source, frame, fr, True)
        path, fell = read_path(self.range_copy(source, frame, node), fp.source, node, hard)
        self.fell_back += fell
        return FramesAt(path, frame if fell else fr.row(frame), fr, fell)



def read_path(copy: str, source: str, node: str, hard: bool = False,
              size: Optional[int] = None) -> Tuple[str, bool]:
    """The path a task on ``node`` reads: its staged ``copy``, else (soft) the ``source``.

    Returns ``(path, fell_back)``. For flows that pass each task only its two paths
    (not the whole :class:`Where`). ``size``: the planned size, checked when given.

    Raises
    ------
    StagedCopyMissing
        ``hard`` and the copy is missing, not a regular file or of another size.
    """
    why = ""
    try:
        st = os.lstat(copy)
        if not _stat.S_ISREG(st.st_mode):
            why = f"node {node}: {copy} is not a regular file"
        elif size is not None and st.st_size != size:
            why = f"node {node}: {copy} has {st.st_size} bytes, {size} were staged"
    except FileNotFoundError:
        why = f"node {node}: the staged copy {copy} is missing"
    if not why:
        return copy, False
    if hard:
        raise StagedCopyMissing(f"{why} (source {source}); stage again, or place the task "
                                "softly to read the shared copy")
    return source, True


def where(spec: Any, nodes: Sequence[str]) -> Where:
    """Plan ``spec`` (on this one process) and place it on ``nodes``: see :class:`Where`."""
    from stager.planning.api import plan as plan_spec

    return Where(plan_spec(spec), nodes)  # a Plan is taken as it is
