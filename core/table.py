"""The one plug-in table: name -> ``"module:Attr"`` row, imported when first asked for.

Block kinds, transfer methods, executors, stream protocols and the ``stager``
subcommands are each one :class:`Table` (as h5py keeps its drivers in one
registry): a plug-in is one module plus one row, nothing branches on its name,
and an unknown name is one error, :class:`~core.errors.UnknownName`, listing
the known ones::

    >>> t = Table("greeting", {"hello": "string:capwords"})
    >>> t.load("hello")("hi there")
    'Hi There'
    >>> t.names()
    ('hello',)
    >>> t.load("bye")
    Traceback (most recent call last):
    ...
    core.errors.UnknownName: unknown greeting 'bye': use one of hello

A row is ``"module:Attr"`` (or ``"module"``: the module itself), resolved with
:func:`load_object` when first asked for, so that importing the table imports no
plug-in; or the object itself (what :meth:`Table.register` adds from outside
the package, e.g. the tests' toy kind). ``make`` turns what a row names into what
the table hands out (a class into its one instance); it runs once per name.

A table reads like the mapping of its rows (``name in t``, ``t[name]``,
``list(t)``), so argparse ``choices=`` and messages take it as it is.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, Dict, Generic, Iterator, Mapping, Optional, Tuple, TypeVar, Union

from core.errors import UnknownName

__all__ = ["Table", "load_object", "load_module", "load_path"]

T = TypeVar("T")


class Table(Mapping[str, Union[str, Any]], Generic[T]):
    """Plug-ins by name; rows are ``"module:Attr"`` strings (lazy) or objects.

    Parameters
    ----------
    what : str
        What a row is, for messages ("block kind", "executor").
    rows : mapping of str to str or object
        The built-in rows, in table order.
    make : callable, optional
        Applied once to what a row names (default: used as it is).
    about : mapping of str to str, optional
        A one-line description of some rows (shown without importing them).
    paths : bool
        A name spelled ``"module:Attr"`` that is not a row is resolved too (a plug-in
        named on a command line).
    hint : str
        Appended to the unknown-name message (how to add one).
    """

    def __init__(self, what: str, rows: Mapping[str, Any], *,
                 make: Optional[Callable[[Any], T]] = None,
                 about: Optional[Mapping[str, str]] = None, paths: bool = False,
                 hint: str = "") -> None:
        self.what = what
        self._rows: Dict[str, Any] = dict(rows)
        self._about: Dict[str, str] = dict(about or {})
        self._make = make
        self._paths = paths
        self._hint = hint
        self._loaded: Dict[str, T] = {}

    # -- the mapping of rows ----------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"Table({self.what!r}, {self._rows!r})"

    # -- plug-ins -----------------------------------------------------------------------------
    def register(self, name: str, row: Any, about: str = "") -> None:
        """Add (or replace) row ``name``: ``"module:Attr"`` or the object itself."""
        self._rows[name] = row
        self._loaded.pop(name, None)
        if about:
            self._about[name] = about

    def names(self) -> Tuple[str, ...]:
        """The rows' names, in table order."""
        return tuple(self._rows)

    def about(self, name: str) -> str:
        """The one-line description of row ``name`` ("" if none)."""
        return self._about.get(self.check(name), "")

    def check(self, name: str) -> str:
        """``name`` if it is a row (or, with ``paths``, a ``"module:Attr"``), else
        :class:`~core.errors.UnknownName`. Pure: imports nothing."""
        if name in self._rows or (self._paths and isinstance(name, str) and ":" in name):
            return name
        hint = f" ({self._hint})" if self._hint else ""
        raise UnknownName(f"unknown {self.what} {name!r}: use one of "
                          f"{', '.join(self._rows) or '(none)'}{hint}")

    def load(self, name: str) -> T:
        """What row ``name`` names (its module imported on first use, ``make`` applied once)."""
        if name not in self._loaded:
            row = self._rows.get(self.check(name), name)
            got = load_object(row) if isinstance(row, str) else row
            self._loaded[name] = self._make(got) if self._make and isinstance(row, str) \
                else got
        return self._loaded[name]

    def loaded(self) -> Tuple[T, ...]:
        """Every row's plug-in, in table order (each module imported)."""
        return tuple(self.load(n) for n in self._rows)


def load_object(spec: str, default: Optional[str] = None) -> Any:
    """What ``MODULE:NAME`` or ``FILE.py:NAME`` names: the one loader of a spec (an
    ``--analysis``, a ``udf:`` class, an ``--on-ready`` or leader hook, a table's row).
    ``NAME`` may be dotted (``Class.attr``); without ``:NAME``, ``default`` is looked
    up, or with no default the module itself is returned.

    Raises
    ------
    ImportError
        Not of that form, the module or file does not import (its message), or it
        defines no ``NAME``; whatever else the module raises on import passes through.
    """
    where, sep, name = spec.rpartition(":")
    if not sep:
        where, name = spec, default or ""
    if not where or (sep and not name) or \
            (name and not all(part.isidentifier() for part in name.split("."))):
        raise ImportError(f"{spec!r}: expected MODULE:NAME or FILE.py:NAME")
    obj = load_module(where)
    for part in name.split(".") if name else ():
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"{where} defines no {name}") from None
    return obj


def load_module(where: str, name: Optional[str] = None) -> Any:
    """The module named ``where`` (``pkg.mod``) or the Python file ``where`` (``FILE.py``,
    loaded by :func:`load_path` as ``name``); raises as :func:`load_object`."""
    if not where.endswith(".py"):
        return importlib.import_module(where)
    if not os.path.isfile(where):
        raise ImportError(f"file {where} does not exist")
    return load_path(os.path.abspath(where), name)


def load_path(path: str, name: Optional[str] = None) -> Any:
    """Import the Python file ``path`` as a module of its own, registered in
    ``sys.modules`` as ``name`` (default ``mpistage_<file stem>``) and removed again if
    it fails to import: a flow file, ``--analysis FILE.py``, ``udf:FILE.py:CLASS``,
    ``--on-ready FILE.py:FUNCTION``, a task's function whose module is a file.

    Raises
    ------
    ImportError
        ``path`` is not a Python file; else whatever the file raises on import.
    """
    import importlib.util

    if name is None:
        name = "mpistage_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
