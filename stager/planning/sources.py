"""Sources on the shared filesystem: glob, stat, and where each match lands. Rank 0 only.

The only code that globs and stats the shared filesystem. It runs on ONE process: the
MPI layer plans on rank 0 and broadcasts the result, so N ranks do not put N times the
metadata load on a parallel filesystem. The rules every block kind shares -- where a
plain, ``**`` or directory match lands, symbolic links to directories never followed
below a ``**`` or inside a matched directory (so planning ends in bounded time whatever
links a tree holds), sources and destinations disjoint (:func:`overlap`) -- are
docs/hook-spec.md, "Where files land".
"""
from __future__ import annotations

import errno
import fnmatch
import glob as _glob
import os
import stat as _stat
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from hooks.spec import Block, Pattern
from stager.errors import PlanError

__all__ = ["StatFn", "has_magic", "static_prefix", "destination_for", "glob_matches",
           "checked_dest", "claim", "stat_source", "regular", "source_id", "changed", "SourceArea",
           "source_areas", "overlap", "check_disjoint", "real_dest"]

_MAGIC = frozenset("*?[")

StatFn = Callable[[str], os.stat_result]


def has_magic(component: str) -> bool:
    """True if a path component holds a glob character."""
    return any(c in _MAGIC for c in component)


def static_prefix(pattern: str) -> str:
    """The leading directories of ``pattern`` that hold no glob character.

    >>> static_prefix("/data/run1/**/*.tif")
    '/data/run1'
    """
    parts = pattern.split("/")
    keep = []
    for part in parts[:-1]:
        if has_magic(part):
            break
        keep.append(part)
    return "/".join(keep) or "/"


def destination_for(dest_dir: str, pattern: str, match: str, within: str = "") -> str:
    """Where ``match`` (found by ``pattern``) lands under ``dest_dir``. Pure.

    Parameters
    ----------
    dest_dir : str
        The block's destination directory (may hold ``%n``).
    pattern : str
        The absolute pattern that matched.
    match : str
        The matched path (a file, or a directory being walked).
    within : str
        For a file found by walking a matched directory: its path relative to that directory.
    """
    if "**" in pattern.split("/"):
        rel = os.path.relpath(match, static_prefix(pattern))
    else:
        rel = os.path.basename(match.rstrip("/"))
    if within:
        rel = os.path.join(rel, within)
    return os.path.normpath(os.path.join(dest_dir, rel))


def glob_matches(pattern: str, skipped: Optional[List[str]] = None) -> List[str]:
    """Sorted matches of an absolute pattern; a dangling literal path is returned as is,
    so stat can report it.

    A ``**`` pattern is walked by :func:`_walk_recursive`, which never follows a
    symbolic link to a directory below the static prefix (Python's recursive glob
    does, and two links to a parent make it run forever); such links are appended
    to ``skipped``. Hidden names match only a component written with a leading
    ``.``, as in :mod:`glob`.
    """
    if "**" in pattern.split("/"):
        return _walk_recursive(pattern, skipped if skipped is not None else [])
    matches = sorted(_glob.glob(pattern))
    if not matches and not has_magic(pattern) and os.path.lexists(pattern):
        matches = [pattern]
    return matches


def _is_dir_link(path: str) -> bool:
    try:
        return _stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False  # dangling or a loop: reported when the match is stat'ed


def _walk_recursive(pattern: str, skipped: List[str]) -> List[str]:
    prefix = static_prefix(pattern)
    parts = pattern.split("/")[len(prefix.rstrip("/").split("/")):] if prefix != "/" else \
        pattern.split("/")[1:]
    found: Set[str] = set()

    def entries(d: str) -> List[os.DirEntry]:
        try:
            with os.scandir(d) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError:
            return []  # unreadable or vanished: glob's rule too (nothing matches there)

    def descend(p: str, name: str, e: Optional[os.DirEntry], i: int) -> None:
        """Continue below ``p`` if it is a real directory; record it if it is a link to one."""
        is_link = e.is_symlink() if e is not None else os.path.islink(p)
        if is_link:
            if _is_dir_link(p):
                skipped.append(p)
            return
        is_dir = e.is_dir(follow_symlinks=False) if e is not None else os.path.isdir(p)
        if is_dir:
            visit(p, i)

    def visit(d: str, i: int) -> None:
        if i == len(parts):
            found.add(d)
            return
        comp = parts[i]
        last = i == len(parts) - 1
        if comp == "**":
            if last:
                found.add(d)  # as glob: "DIR/**" matches DIR itself and all below it
            else:
                visit(d, i + 1)  # "**" matching no directory
            for e in entries(d):
                if e.name.startswith("."):
                    continue
                p = os.path.join(d, e.name)
                if last and not e.is_dir(follow_symlinks=False) and not \
                        (e.is_symlink() and _is_dir_link(p)):
                    found.add(p)
                descend(p, e.name, e, i)
            return
        if not has_magic(comp):
            p = os.path.join(d, comp)
            if last:
                if os.path.lexists(p):
                    found.add(p)
            else:
                descend(p, comp, None, i + 1)
            return
        hidden_ok = comp.startswith(".")
        for e in entries(d):
            if (e.name.startswith(".") and not hidden_ok) or not fnmatch.fnmatchcase(e.name, comp):
                continue
            p = os.path.join(d, e.name)
            if last:
                if e.is_symlink() and _is_dir_link(p):
                    skipped.append(p)
                else:
                    found.add(p)
            else:
                descend(p, e.name, e, i + 1)

    visit(prefix, 0)
    return sorted(found)


def checked_dest(block: Block, dest: str) -> str:
    """``dest`` if it lies below the block's destination directory, else a PlanError."""
    if not dest.startswith(block.dest.rstrip("/") + "/"):
        raise PlanError(f"{block.dest_location}: {dest} would land outside "
                        f"{block.display_dest}; refusing")
    return dest


def claim(claimed: Dict[str, Tuple[str, Pattern]], dest: str, source: str,
          pattern: Pattern) -> bool:
    """Note that ``source``, matched by ``pattern``, lands at ``dest``: True if that is
    new, False if it does already (one file named twice). Every block and kind of a
    plan shares ``claimed``.

    Raises
    ------
    PlanError
        Another source lands at ``dest``.
    """
    owner = claimed.get(dest)
    if owner is None:
        claimed[dest] = (source, pattern)
        return True
    if owner[0] != source:
        raise PlanError(f"{pattern.location}: {source} and {owner[0]} (matched at "
                        f"{owner[1].location}) would both land at {dest.replace(chr(0), '%')}: "
                        "rename one, or use '**' to keep their directories")
    return False


def stat_source(stat: StatFn, source: str, pattern: Pattern) -> os.stat_result:
    try:
        return stat(source)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PlanError(f"{pattern.location}: {source} is a symbolic link loop (or a "
                            "chain of links too long to follow); remove or fix the link") from e
        raise PlanError(f"{pattern.location}: cannot stat {source}: {e.strerror}") from e


def regular(st: os.stat_result, source: str, pattern: Pattern) -> os.stat_result:
    if not _stat.S_ISREG(st.st_mode):
        raise PlanError(f"{pattern.location}: {source} is not a regular file or directory; "
                        "only files and directories can be staged")
    return st


# -- source identity --------------------------------------------------------------

def source_id(st: os.stat_result) -> Tuple[int, int, int, int]:
    """(size, mtime_ns, ctime_ns, inode): what must not change between planning and the
    end of a source's reading. ``ctime`` moves on any rewrite, even one that restores
    the size and the mtime (``os.utime`` cannot set it)."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def changed(planned: Tuple[int, int, int, int], st: os.stat_result) -> Optional[str]:
    """What differs between a planned identity and ``st`` ("size 10 -> 12"), or ``None``.

    A ``-1`` in ``planned`` (not recorded) is not compared.
    """
    names = ("size", "mtime_ns", "ctime_ns", "inode")
    diff = [f"{n} {a} -> {b}" for n, a, b in zip(names, planned, source_id(st))
            if a != -1 and a != b]
    return ", ".join(diff) or None


# -- disjoint sources and destinations -------------------------------------------------

@dataclass(frozen=True)
class SourceArea:
    """A part of the source side that a destination must stay out of. Plain data.

    ``kind`` is ``"tree"`` (a directory copied recursively: a matched directory, or
    the static prefix of a ``**`` pattern; a destination may be neither inside it,
    nor equal to it, nor contain it), ``"dir"`` (the directory of a matched file: a
    destination may not be it or contain it) or ``"pattern"`` (a pattern without
    ``**``: a destination may not be, or lie inside, a path it matches -- the next
    run would stage the copies as sources). ``path`` is real (symlinks resolved in
    its written part), ``location`` the pattern's ``FILE:LINE:COL``.
    """

    kind: str
    path: str
    location: str


def real_dest(path: str) -> str:
    """A destination's real path: symlinks resolved in the part that exists."""
    return os.path.realpath(path.replace("\x00", "%"))


def source_areas(blocks: Iterable[Block], sources: Iterable[str],
                 trees: Iterable[Tuple[str, Pattern]]) -> Tuple[SourceArea, ...]:
    """The areas of a plan: each pattern, each recursive tree, each matched file's directory.

    Resolves symlinks once per distinct directory (not per file); files inside a
    tree add nothing (the tree covers them).
    """
    out: List[SourceArea] = []
    tree_paths: List[str] = []
    for block in blocks:
        for pattern in block.patterns:
            prefix = static_prefix(pattern.text)
            if "**" in pattern.text.split("/"):
                tree_paths.append(prefix.rstrip("/") + "/")
                out.append(SourceArea("tree", os.path.realpath(prefix), str(pattern.location)))
            else:
                rest = pattern.text[len(prefix):].lstrip("/") if has_magic(pattern.text) \
                    else os.path.basename(pattern.text)
                base = prefix if has_magic(pattern.text) else os.path.dirname(pattern.text)
                out.append(SourceArea("pattern", os.path.join(os.path.realpath(base), rest),
                                      str(pattern.location)))
    for path, pattern in trees:
        tree_paths.append(path.rstrip("/") + "/")
        out.append(SourceArea("tree", os.path.realpath(path), str(pattern.location)))
    seen: Set[str] = set()
    for src in sources:
        d = os.path.dirname(src)
        if d in seen or any(src.startswith(t) for t in tree_paths):
            continue
        seen.add(d)
        out.append(SourceArea("dir", os.path.realpath(d), ""))
    return tuple(dict.fromkeys(out))


def _inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (normalised absolute paths). Pure."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _matches(pattern: str, path: str) -> bool:
    """``path`` or one of its ancestors is matched by glob ``pattern`` (no ``**``). Pure."""
    pp = pattern.strip("/").split("/")
    rp = path.strip("/").split("/")
    if len(rp) < len(pp):
        return False
    for p, r in zip(pp, rp):
        if r.startswith(".") and not p.startswith(".") and has_magic(p):
            return False
        if not (fnmatch.fnmatchcase(r, p) if has_magic(p) else r == p):
            return False
    return True


def overlap(dest: str, area: SourceArea) -> Optional[str]:
    """How real destination ``dest`` overlaps ``area`` ("is inside", ...), or ``None``. Pure."""
    if area.kind == "tree":
        if dest == area.path:
            return "is"
        if _inside(dest, area.path):
            return "is inside"
        if _inside(area.path, dest):
            return "contains"
    elif area.kind == "dir":
        if dest == area.path:
            return "is the directory of"
        if _inside(area.path, dest):
            return "contains"
    elif area.kind == "pattern" and _matches(area.path, dest):
        return "is inside a path matched by" if dest.count("/") > area.path.count("/") \
            else "is matched by"
    return None


def check_disjoint(dest: str, areas: Iterable[SourceArea], where: str,
                   shown: Optional[str] = None) -> None:
    """Raise PlanError naming both if real destination ``dest`` overlaps a source area.

    Parameters
    ----------
    dest : str
        The destination root's real path (:func:`real_dest`).
    where : str
        ``FILE:LINE:COL`` of the block, first in the message.
    shown : str, optional
        The destination as written (default ``dest``).
    """
    for a in areas:
        how = overlap(dest, a)
        if how is None:
            continue
        what = {"tree": "the source tree", "dir": "", "pattern": "the pattern"}[a.kind]
        at = f" ({a.location})" if a.location else ""
        src = f"{what} {a.path}".strip()
        if a.kind == "dir":
            src = f"sources in {a.path}"
            how = "contains" if how == "contains" else "is the directory holding"
        raise PlanError(
            f"{where}: destination {shown or dest} {how} {src}{at}: staging there would "
            "write over, or later re-stage, the sources, and 'stager clean' would then "
            "delete them; choose a destination outside every source")
