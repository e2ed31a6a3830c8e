"""No output over an input: the one check every command that writes results makes first.

A command that writes results (a flow's ``OUT/<scan>.h5``, a receiving job's
``--out``, ``stager drain``'s targets, the HEDM flows' files) calls
:func:`check_outputs` with what it will write and what it reads, before it
writes anything. It refuses, naming both,

* an output that *is* an input, or lies inside an input directory (a drain
  target inside its node-local source, ``--out`` inside ``--local``);
* an output file that already exists and was not written by this project,
  unless the caller was given ``--overwrite``.

Written by this project means: an HDF5 file whose root attribute
``written_by`` is ``mpistage`` (:func:`mark`; every result file the project
writes carries it), or a JSON record whose top-level ``written_by`` is
``mpistage``; any other file (an analysis's CSV or PNG, a run's log) is ours when
the HDF5 result or JSON record it is named after (same name, or the name before a
last ``_word``: ``<scan>.h5`` for ``<scan>_binary.npy``) is. Result files of earlier
versions, without the mark, are still recognised by their layout (root attribute
``analysis`` with a dataset ``frames_complete``, or ``workflow`` of an HEDM
flow). Anything else -- a raw scan, a user's file of the same name -- is
someone else's.

Commands without ``--out`` write into a new directory named for the run
(:func:`run_directory`), never into the current directory under an input's name.

Pure apart from reading the paths it is given (``realpath``, ``stat``, an HDF5
root attribute).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Iterable, Optional

from core.errors import OutputError

__all__ = ["MARK", "WRITTEN_BY", "OutputError", "check_outputs", "ours", "mark",
           "run_directory"]

#: Root attribute (HDF5) or top-level key (JSON) naming the writer of a result file.
MARK = "written_by"
#: Its value in every result this project writes.
WRITTEN_BY = "mpistage"

_LEGACY_WORKFLOWS = ("hedm_ff", "hedm_nf", "hedm_nffit")


def mark(attrs: Any) -> None:
    """Mark a result as this project's: ``attrs`` is an HDF5 root's ``.attrs`` or a dict
    (a JSON record)."""
    attrs[MARK] = WRITTEN_BY


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def ours(path: str) -> bool:
    """Whether the existing file ``path`` was written by this project (see module doc)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    if head == b"\x89HDF\r\n\x1a\n":
        import h5py

        try:
            with h5py.File(path, "r") as f:
                a = f.attrs
                if _text(a.get(MARK, "")) == WRITTEN_BY:
                    return True
                return ("analysis" in a and "frames_complete" in f) or \
                    _text(a.get("workflow", "")) in _LEGACY_WORKFLOWS
        except (OSError, ValueError):
            return False
    if path.endswith(".json"):
        try:
            with open(path) as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and (record.get(MARK) == WRITTEN_BY or
                                             record.get("workflow") in _LEGACY_WORKFLOWS)
    stem, ext = os.path.splitext(path)
    if ext in (".h5", ".json", ""):
        return False
    # named after <scan>.h5 (or a record <name>.json): <scan>.png, or <scan>_binary.npy
    # (a last "_word" added)
    base, _, tail = stem.rpartition("_")
    stems = [stem] + ([base] if base and tail.isalpha() and "/" not in tail else [])
    return any(ours(s + e) for s in stems for e in (".h5", ".json"))


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_outputs(outputs: Iterable[str], inputs: Iterable[Optional[str]], *,
                  overwrite: bool = False, what: str = "output",
                  hint: str = "choose another --out") -> None:
    """Refuse to write ``outputs`` (files or directories) over ``inputs`` (files or
    directories; ``None`` entries are skipped).

    Parameters
    ----------
    outputs : iterable of str
        Every path the command will write (result files, or a directory it fills).
    inputs : iterable of str or None
        Every path it reads (frame files, a spill or node-local directory, parameters);
        one ending in ``/`` is a directory, whether or not it exists yet.
    overwrite : bool
        The caller was given ``--overwrite``: an existing file not written by this
        project may be replaced (an input never may).
    what : str
        How messages name an output ("output", "drain target").
    hint : str
        What to do, ending the message of an output over an input.

    Raises
    ------
    OutputError
        An output is an input or inside an input directory; or an output file exists,
        was not written by this project, and ``overwrite`` is false. Nothing was written.
    """
    reads = [(i, _real(i), i.endswith("/")) for i in inputs if i]
    for out in outputs:
        real = _real(out)
        for given, r, folder in reads:
            if real == r:
                raise OutputError(f"{what} {out} is the input {given}: writing it would "
                                  f"destroy the input; {hint}")
            if _inside(real, r) and (folder or os.path.isdir(r)):
                raise OutputError(f"{what} {out} is inside the input directory {given}: "
                                  f"{hint}")
        if not overwrite and os.path.isfile(real) and not ours(real):
            raise OutputError(f"{what} {out} exists and was not written by mpistage (no "
                              f"'{MARK}' mark): {hint}, or give --overwrite to replace it")


def run_directory(name: str, base: Optional[str] = None) -> str:
    """A new directory for a run's results, ``BASE/NAME-out-YYYYmmdd-HHMMSS[-K]``
    (``base``: the current directory), made here (never an existing one)."""
    base = os.path.abspath(base or os.getcwd())
    stem = os.path.join(base, f"{name}-out-{time.strftime('%Y%m%d-%H%M%S')}")
    for k in range(1000):
        path = stem if k == 0 else f"{stem}-{k}"
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise OutputError(f"cannot make a new results directory {stem}-*: 1000 exist; give --out")
