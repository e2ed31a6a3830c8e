"""The staging options: one table, each option falling back to ``STAGER_<NAME>``, then its default.

Resolved by the one resolver (:func:`core.options.resolve`), on rank 0, and
broadcast (:func:`stager.stage`). Each block kind brings its own rows (``options`` of
the kind, :func:`stager.planning.kinds.options`), resolved with these into
:attr:`StageOptions.kind_options`. How ranks form nodes is the job's option
(:data:`core.nodes.NODE_ID`, held by :class:`core.job.Job`); a lock's ``wait`` is the
destination roots' option (:data:`stager.nodelocal.roots.WAIT`), shared by ``stage``,
``verify`` and ``clean``.

Sizes accept a plain byte count or a binary suffix: ``33554432``, ``32M``,
``32MiB``, ``1G``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, Mapping, Optional

from core.options import (ENV_PREFIX, Option, parse_bool, parse_choice, parse_seconds,
                          parse_size, parse_text, resolve)
from stager.nodelocal.roots import WAIT

__all__ = ["StageOptions", "STAGE_OPTIONS", "resolve_options", "MAX_CHUNK"]

MAX_CHUNK = 1 << 30  # far below 2**31, so every MPI count stays an int32


@dataclass(frozen=True)
class StageOptions:
    """Resolved options of one ``stage`` call (see :func:`stager.stage`)."""

    method: str = "stripe"
    chunk_size: int = 32 << 20
    small_file_threshold: int = 1 << 20
    force: bool = False
    json: Optional[str] = None
    progress: bool = True
    fsync: bool = False
    #: seconds to wait for another run holding a destination's lock (negative: forever)
    wait: float = 0.0
    #: read every source again after staging and compare it with its copies
    verify_source: bool = False
    #: seconds the ranks get to stop together after SIGINT/SIGTERM (core.interrupt)
    interrupt_grace: float = 0.6
    #: the block kinds' own options, by name (each kind's ``options`` rows)
    kind_options: Dict[str, Any] = field(default_factory=dict)


def _chunk(lo: int) -> Callable[[Any, str], int]:
    def parse(value: Any, name: str) -> int:
        size = parse_size(value, name)
        if not lo <= size <= MAX_CHUNK:
            raise ValueError(f"{name} must be between {lo} and {MAX_CHUNK} bytes, got {size}")
        return size
    return parse


def _grace(value: Any, name: str) -> float:
    g = parse_seconds(value, name)
    if g < 0:
        raise ValueError(f"{name} must be a finite number of seconds")
    return g


def _method(value: Any, name: str) -> str:
    from stager.staging.transfer import METHODS

    return parse_choice(*METHODS.names())(value, name)


_PARSERS: Dict[str, Callable[[Any, str], Any]] = {
    "method": _method, "chunk_size": _chunk(1),
    "small_file_threshold": _chunk(0), "json": parse_text,
    "interrupt_grace": _grace,
}
#: The staging options: each falls back to ``STAGER_<NAME>``, then to its default.
STAGE_OPTIONS = tuple(WAIT if f.name == WAIT.name else
                      Option(f.name, f.default, _PARSERS.get(f.name, parse_bool),
                             ENV_PREFIX + f.name.upper()) for f in fields(StageOptions)
                      if f.name != "kind_options")


def resolve_options(env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> StageOptions:
    """Staging options from keywords, then ``STAGER_<NAME>`` variables, then defaults. Local.

    How ranks form nodes is not one of them: it is the job's (:class:`core.job.Job`).
    Collective callers run it on rank 0 only and broadcast the result.

    Raises
    ------
    TypeError
        Unknown keyword.
    ValueError
        A value that does not parse.
    """
    from stager.planning.kinds import options

    rows = options()
    got = resolve(STAGE_OPTIONS + rows, kwargs, env, what="staging option")
    return StageOptions(**{o.name: got[o.name] for o in STAGE_OPTIONS},
                        kind_options={o.name: got[o.name] for o in rows})
