"""The text of an ``h5`` block entry: ``FILEGLOB:/internal/path[start:stop:step]``. Pure.

An ``h5`` entry names objects inside HDF5 files (docs/hook-spec.md, "HDF5
selections")::

    ~/beam/scan42.h5:/entry/data/data[0:720]     frames 0..719 of one dataset
    ~/beam/scan42.h5:/entry/data/data[::10]      every 10th frame
    ~/beam/scan42.h5:/entry/data/data[-100:]     the last 100 frames
    ~/beam/scan42.h5:/entry/instrument           a group, copied whole
    ~/beam/scan4?.h5:/entry/instrument/*         glob on the file and on the path

The parser calls :func:`split_entry` on every entry of an ``h5`` block, so a
malformed entry is a :class:`~hooks.errors.SpecError` at its line and column,
like any other mistake in a spec. Rules decided here:

* The file part ends at the FIRST ``:/`` of the entry, so a directory whose
  name ends in ``:`` cannot be named (HDF5 object names may hold ``:``).
* A trailing ``[...]`` holding a ``:`` is a first-axis slice; any other
  bracket is a glob character class (``[5]`` matches the name ``5``, so one
  frame is written ``[5:6]``).
* Slices have Python semantics with negative ``start``/``stop`` counting from
  the end, but are strict where Python is lenient: a bound beyond the axis is
  an error (Python would clip it silently, and a silently shorter stack is a
  wrong analysis), the step must be positive (the staged stack keeps the
  source's frame order), and an empty selection is an error. Bounds are
  checked against the dataset when the plan is made (:meth:`Slice.resolve`).
* ``*``, ``?`` and ``[...]`` glob within one path component of the internal
  path, like a shell glob; ``**`` is not supported there.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["Slice", "H5Selection", "split_entry", "parse_slice", "path_has_magic",
           "EntryError"]

_SLICE = re.compile(r"\[\s*(-?\d*)\s*:\s*(-?\d*)\s*(?::\s*(-?\d*)\s*)?\]$")


class EntryError(ValueError):
    """A malformed ``h5`` entry; ``offset`` is where in the entry text the problem is."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


def path_has_magic(path: str) -> bool:
    """True if an internal path holds a glob character (after its slice was removed)."""
    return any(c in path for c in "*?[")


@dataclass(frozen=True)
class Slice:
    """A first-axis slice as written (``None`` = omitted)."""

    start: Optional[int] = None
    stop: Optional[int] = None
    step: Optional[int] = None

    def __str__(self) -> str:
        def f(v: Optional[int]) -> str:
            return "" if v is None else str(v)
        text = f"{f(self.start)}:{f(self.stop)}"
        return f"[{text}:{self.step}]" if self.step is not None else f"[{text}]"

    def resolve(self, n: int) -> Tuple[int, int, int]:
        """Concrete ``(start, stop, step)`` on an axis of length ``n``.

        ``stop`` is exclusive and, with a step, trimmed to one past the last
        selected index, so ``len(range(start, stop, step))`` frames are selected.

        Raises
        ------
        ValueError
            A bound outside ``-n..n``, ``start >= stop``, or a step below 1; the
            message says what the axis holds.
        """
        step = 1 if self.step is None else self.step
        if step < 1:
            raise ValueError(f"step {step} is not allowed: use a positive step (the staged "
                             "frames keep the source order)")

        def bound(v: Optional[int], default: int, name: str) -> int:
            if v is None:
                return default
            if not -n <= v <= n:
                raise ValueError(f"{name} {v} is out of range for an axis of {n} "
                                 f"(valid: {-n}..{n})")
            return v + n if v < 0 else v

        start = bound(self.start, 0, "start")
        stop = bound(self.stop, n, "stop")
        if start >= stop:
            raise ValueError(f"selects no frame of {n} (start {start} >= stop {stop}); "
                             "an empty selection is not staged")
        count = len(range(start, stop, step))
        return start, start + (count - 1) * step + 1, step


@dataclass(frozen=True)
class H5Selection:
    """What an ``h5`` entry selects inside each matched file.

    Attributes
    ----------
    path : str
        Absolute internal path (``/`` for the root group); may hold glob characters.
    slice : Slice or None
        First-axis slice, if written.
    """

    path: str
    slice: Optional[Slice] = None

    def __str__(self) -> str:
        return self.path + (str(self.slice) if self.slice is not None else "")


def parse_slice(text: str) -> Optional[Slice]:
    """The slice at the end of ``text`` (``"[0:720]"`` → ``Slice(0, 720)``), or None.

    >>> parse_slice("/entry/data/data[0:720:2]")
    Slice(start=0, stop=720, step=2)
    >>> parse_slice("/entry/data[0-9]") is None
    True

    Raises
    ------
    ValueError
        A bound written as a lone ``-``.
    """
    m = _SLICE.search(text)
    if m is None:
        return None

    def num(s: Optional[str]) -> Optional[int]:
        if s is None or s == "":
            return None
        if s == "-":
            raise ValueError("'-' without a number")
        return int(s)

    return Slice(num(m.group(1)), num(m.group(2)), num(m.group(3)))


def split_entry(text: str) -> Tuple[str, H5Selection]:
    """Split an expanded ``h5`` entry into its file part and its selection.

    Parameters
    ----------
    text : str
        The entry after ``~``/``$VAR`` expansion, before any path normalisation.

    Returns
    -------
    (file, selection)
        ``file`` is the file glob as written (the caller makes it absolute).

    Raises
    ------
    EntryError
        No ``:/`` separator, an empty file part, a malformed slice, ``**`` in
        the internal path or a step below 1; ``offset`` points into ``text``.
    """
    cut = text.find(":/")
    if cut < 0:
        raise EntryError("h5 entry names no object inside the file: write FILE:/path/in/file "
                         "(FILE:/ for the whole file), e.g. scan.h5:/entry/data/data[0:720]",
                         len(text))
    file, inner = text[:cut], text[cut + 1:]
    if not file:
        raise EntryError("h5 entry has an empty file part: write FILE:/path/in/file", 0)
    bracket = inner.rfind("[")
    try:
        sl = parse_slice(inner)
    except ValueError as e:
        raise EntryError(f"bad slice: {e}; write [start:stop] or [start:stop:step] with "
                         "integers", cut + 1 + max(bracket, 0)) from e
    if sl is not None:
        inner = inner[:bracket]
    elif inner.endswith("]") and ":" in inner[bracket:]:
        raise EntryError("bad slice: write [start:stop] or [start:stop:step] with integers "
                         "(no spaces, no index lists)", cut + 1 + max(bracket, 0))
    if sl is not None and sl.step is not None and sl.step < 1:
        raise EntryError(f"step {sl.step} is not allowed: use a positive step (the staged "
                         "frames keep the source order)", cut + 1 + bracket)
    inner = inner.rstrip("/") or "/"
    if "**" in inner:
        raise EntryError("'**' is not supported inside an HDF5 file: glob one level with '*' "
                         "(e.g. /entry/*/data)", cut + 1 + inner.find("**"))
    return file, H5Selection(inner, sl)
