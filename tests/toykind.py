"""A toy block kind, ``text``: one module plus one row, to prove a kind is a plug-in.

``broadcast to DIR text { notes/*.txt  old/*.txt@latin-1 }`` stages whole files
after checking that each decodes in its encoding (``@ENCODING`` after the
pattern, UTF-8 by default); ``verify`` decodes each recorded copy again. It is
registered with :func:`stager.planning.kinds.register` and nothing else of the
stager is touched. Each leader reads the file itself (like ``naive``): the toy
proves the plug-in seams, not a transfer method.
"""
from __future__ import annotations

import codecs
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from hooks.h5entry import EntryError
from stager.errors import TransferError
from core.localfs import AtomicFile
from stager.planning.files import plan_files
from stager.planning.kinds import PlanContext, register
from stager.planning.plan import FileEntry
from stager.staging.kind import Moved, Transfer


@dataclass(frozen=True)
class TextEntry(FileEntry):
    """A file of a ``text`` block and its encoding."""

    encoding: str = "utf-8"

    @property
    def key(self) -> str:  # recorded as the copy's source: verify reads the encoding there
        return f"{self.source}@{self.encoding}"


def split_entry(text: str) -> Tuple[str, Any]:
    """``PATTERN[@ENCODING]`` -> (pattern, encoding); an unknown encoding is refused."""
    pattern, at, enc = text.rpartition("@")
    if not at:
        return text, "utf-8"
    try:
        return pattern, codecs.lookup(enc).name
    except LookupError:
        raise EntryError(f"unknown encoding {enc!r}", len(pattern) + 1) from None


def _decode_error(path: str, encoding: str) -> Optional[str]:
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode(encoding)
    except UnicodeDecodeError as e:
        return f"not {encoding} text (byte {e.start})"
    return None


class TextKind:
    name = "text"
    what = "the text files"
    label = "text files"
    whole_files = False   # the toy reads on every node: no amplification figure
    entries = staticmethod(split_entry)

    def plan(self, block: Any, index: int, ctx: PlanContext) -> Tuple[Any, List[Any]]:
        units: List[Any] = []
        bp = None
        for p in block.patterns:  # one pattern at a time: each has its encoding
            one, entries = plan_files(replace(block, patterns=(p,)), index, ctx.claimed,
                                      ctx.stat, ctx.trees, ctx.skipped)
            units += [TextEntry(**asdict(e), encoding=p.selection) for e in entries]
            bp = one if bp is None else replace(bp, files=bp.files + one.files,
                                                bytes=bp.bytes + one.bytes,
                                                data_bytes=bp.data_bytes + one.data_bytes)
        return bp, units

    def split(self, plan: Any, nodes: int) -> Any:
        return plan

    def check(self, node: str) -> None:
        return None

    def transfer(self, t: Transfer) -> Moved:
        out = Moved()
        for k, dest in enumerate(t.dests):
            if dest is None:
                continue
            u = t.units[t.moved[k]]
            try:
                why = _decode_error(u.source, u.encoding)
                if why:
                    raise TransferError(f"node {t.node}: {u.source}: {why}: fix the file or "
                                        "name its encoding (PATTERN@ENCODING)")
                with open(u.source, "rb") as f, AtomicFile(dest, u.mode, u.mtime_ns) as w:
                    w.write(f.read())
                    w.commit()
                out.done[k] = (w.hexdigest(), w.nbytes)
                out.bytes_written += w.nbytes
                t.progress.update(w.nbytes)
            except Exception as e:
                out.error = e
                break
        out.extra = {"decoded": len(out.done)}
        return out

    def verify(self, path: str, source: str) -> Optional[str]:
        return _decode_error(path, source.rpartition("@")[2])

    def describe_block(self, b: Any) -> str:
        return f"text, {b.files} file(s) checked to decode, {b.bytes} B"

    def describe_unit(self, u: Any) -> str:
        return f"{u.source} ({u.encoding}) -> {u.dest}"

    def unit_dict(self, u: Any) -> Dict[str, Any]:
        return {"source": u.source, "dest": u.dest, "encoding": u.encoding}


register(TextKind())  # the one row
