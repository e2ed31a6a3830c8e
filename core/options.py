"""Options, resolved one way everywhere: keyword argument > environment variable > default.

As ``mpi4py.futures`` resolves ``MPI4PY_FUTURES_*``: each option is declared
once (:class:`Option`: name, environment variable, default, strict parser
that also checks the value), and :func:`resolve` walks a table of them. Under
MPI, rank 0 alone resolves -- keywords and ITS environment -- and broadcasts
the result (``core.mpi.bcast_result(comm, resolve, ...)``), so a variable set differently on one
rank cannot make ranks disagree, and a bad value is the same ``ValueError``
on every rank. Tables using it: :data:`STAGE_OPTIONS` (``STAGER_*``, the
staging options below), :data:`NODE_ID` (how ranks form nodes, used by
:class:`core.job.Job`), the mpi executor's ``WORKFLOWS_MPI_*``.

Sizes accept a plain byte count or a binary suffix: ``33554432``, ``32M``,
``32MiB``, ``1G``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

__all__ = ["Option", "resolve", "StageOptions", "STAGE_OPTIONS", "resolve_options", "NODE_ID",
           "parse_node_id", "node_id_of", "split_node_id", "resolve_node_id", "parse_size",
           "parse_bool", "parse_seconds", "parse_int", "parse_choice", "parse_text", "ENV_PREFIX"]

ENV_PREFIX = "STAGER_"
#: The transfer methods, one row each: name -> its function (stager.staging.transfer),
#: imported when used; the first is the default
METHODS = {
    "stripe": "stager.staging.transfer:stripe",
    "readall": "stager.staging.transfer:readall",
    "bcast": "stager.staging.transfer:bcast",
    "naive": "stager.staging.transfer:naive",
}
MAX_CHUNK = 1 << 30  # far below 2**31, so every MPI count stays an int32
#: ``h5`` blocks: memory per rank for collective pieces, and its floor.
DEFAULT_H5_MEMORY = 1 << 30
MIN_H5_MEMORY = 64 << 10

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


# -- strict parsers: (value, label) -> value, ValueError naming the label ------------------
def parse_size(text: Any, name: str = "size") -> int:
    """Bytes from ``int`` or ``"32M"``/``"32MiB"``/``"4096"``; strict."""
    if isinstance(text, bool):
        raise ValueError(f"{name} must be a byte count, got {text!r}")
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"{name} must be a byte count like 33554432 or 32M, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def parse_bool(text: Any, name: str = "flag") -> bool:
    """True/False from a bool or ``1/0``, ``true/false``, ``yes/no``, ``on/off``; strict."""
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name} must be true/false/1/0, got {text!r}")


def parse_seconds(text: Any, name: str = "seconds") -> float:
    """Seconds from a number, or ``forever``/``inf`` (-1); strict."""
    if isinstance(text, bool):
        raise ValueError(f"{name} must be a number of seconds or 'forever', got {text!r}")
    if isinstance(text, (int, float)):
        return float(text) if text >= 0 else -1.0
    t = str(text).strip().lower()
    if t in ("forever", "inf", "infinity", "-1"):
        return -1.0
    try:
        v = float(t)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds or 'forever', got {text!r}") \
            from None
    if v != v or v < 0:
        raise ValueError(f"{name} must be a number of seconds or 'forever', got {text!r}")
    return v


def parse_number(lo: float = 0, strict: bool = False) -> Callable[[Any, str], float]:
    """A parser of finite numbers ``>= lo`` (``> lo`` when ``strict``; bools refused)."""
    def parse(value: Any, name: str) -> float:
        try:
            if isinstance(value, bool):
                raise ValueError
            v = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
        if not (v > lo if strict else v >= lo) or v == float("inf"):
            raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {lo}, "
                             f"got {value!r}")
        return v
    return parse


def parse_int(lo: int = 0, hi: Optional[int] = None) -> Callable[[Any, str], int]:
    """A parser of integers in ``lo..hi`` (decimal text or int; bools refused)."""
    def parse(value: Any, name: str) -> int:
        try:
            if isinstance(value, bool):
                raise ValueError
            n = value if isinstance(value, int) else int(str(value).strip(), 10)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
        if n < lo or (hi is not None and n > hi):
            upper = "" if hi is None else f" and <= {hi}"
            raise ValueError(f"{name} must be >= {lo}{upper}, got {value!r}")
        return n
    return parse


def parse_choice(*choices: str) -> Callable[[Any, str], str]:
    """A parser accepting exactly one of ``choices``."""
    def parse(value: Any, name: str) -> str:
        if str(value) not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return str(value)
    return parse


def parse_text(value: Any, name: str) -> Optional[str]:
    """A string, or None for an empty one."""
    return None if value in (None, "") else str(value)


# -- the resolver ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One option, declared once.

    Attributes
    ----------
    name : str
        Keyword name.
    default : Any
        Used when neither keyword nor environment give a value (not parsed).
    parse : callable(value, label) -> value
        Strict parser and check; raises ``ValueError`` naming ``label``.
    env : str, optional
        Environment variable read when the keyword is absent or None (an empty
        value counts as unset).
    """

    name: str
    default: Any
    parse: Callable[[Any, str], Any]
    env: Optional[str] = None


def resolve(table: Sequence[Option], kwargs: Mapping[str, Any],
            env: Optional[Mapping[str, str]] = None, what: str = "option") -> Dict[str, Any]:
    """Values of ``table``: keyword > environment > default, parsed strictly. Local, pure.

    Raises
    ------
    TypeError
        A keyword not in ``table``.
    ValueError
        A keyword or environment value that does not parse (the message names
        the keyword or the variable).
    """
    env = os.environ if env is None else env
    names = [o.name for o in table]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise TypeError(f"unknown {what}(s): {', '.join(unknown)}; known: {', '.join(names)}")
    out: Dict[str, Any] = {}
    for o in table:
        if kwargs.get(o.name) is not None:
            out[o.name] = o.parse(kwargs[o.name], o.name)
        elif o.env and env.get(o.env) not in (None, ""):
            out[o.name] = o.parse(env[o.env], f"{o.name} (${o.env})")
        else:
            out[o.name] = o.default
    return out


# -- how ranks form nodes: one value ----------------------------------------------------------
def parse_node_id(value: Any, name: str = "node_id") -> str:
    """``host`` | ``env:VAR`` | ``emulate:N`` (canonical text); strict.

    * ``host``: ranks sharing memory form a node, named by host name;
    * ``env:VAR``: ranks with the same value of environment variable ``VAR``;
    * ``emulate:N``: ``N`` contiguous blocks of ranks, ``node0`` .. (one-machine tests).
    """
    text = str(value).strip()
    kind, _, arg = text.partition(":")
    if text == "host":
        return text
    if kind == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
        return text
    if kind == "emulate":
        return f"emulate:{parse_int(1)(arg, name)}"
    raise ValueError(f"{name} must be 'host', 'env:VAR' or 'emulate:N', got {value!r}")


def node_id_of(node_id: Any = None, emulate_nodes: Any = None,
               node_id_env: Any = None) -> Optional[str]:
    """The one ``node_id`` value from it or the older keywords (None if none is given). Pure.

    ``emulate_nodes=K`` is ``emulate:K`` and ``node_id_env=VAR`` is ``env:VAR``.

    Raises
    ------
    ValueError
        More than one given, or a value that does not parse.
    """
    given = [(k, v) for k, v in (("node_id", node_id), ("emulate_nodes", emulate_nodes),
                                 ("node_id_env", node_id_env)) if v not in (None, "")]
    if len(given) > 1:
        raise ValueError(f"use either {' or '.join(k for k, _ in given)}, not both")
    if not given:
        return None
    key, value = given[0]
    if key == "emulate_nodes":
        return f"emulate:{parse_int(1)(value, 'emulate_nodes')}"
    if key == "node_id_env":
        return parse_node_id(f"env:{value}", "node_id_env")
    return parse_node_id(value)


def split_node_id(node_id: str) -> Tuple[Optional[int], Optional[str]]:
    """``(N, None)`` for ``emulate:N``, ``(None, VAR)`` for ``env:VAR``, else ``(None, None)``."""
    kind, _, arg = node_id.partition(":")
    return (int(arg) if kind == "emulate" else None), (arg if kind == "env" else None)


#: How ranks form nodes: keyword > ``$STAGER_NODE_ID`` > ``host``.
NODE_ID = Option("node_id", "host", parse_node_id, ENV_PREFIX + "NODE_ID")


def resolve_node_id(env: Optional[Mapping[str, str]] = None, node_id: Any = None,
                    emulate_nodes: Any = None, node_id_env: Any = None) -> str:
    """``node_id`` from keywords, ``$STAGER_NODE_ID`` (or the older ``$STAGER_EMULATE_NODES``,
    ``$STAGER_NODE_ID_ENV``), else ``host``. Local; collective callers run it on rank 0."""
    env = os.environ if env is None else env
    given = node_id_of(node_id, emulate_nodes, node_id_env)
    if given is None and not env.get(NODE_ID.env or ""):
        given = node_id_of(None, env.get(ENV_PREFIX + "EMULATE_NODES"),
                           env.get(ENV_PREFIX + "NODE_ID_ENV"))
    return str(resolve([NODE_ID], {"node_id": given}, env)["node_id"])


# -- the staging options -----------------------------------------------------------------------
@dataclass(frozen=True)
class StageOptions:
    """Resolved options of one ``stage`` call (see :func:`stager.stage`)."""

    method: str = "stripe"
    chunk_size: int = 32 << 20
    small_file_threshold: int = 1 << 20
    #: how ranks form nodes (:func:`parse_node_id`)
    node_id: str = "host"
    force: bool = False
    json: Optional[str] = None
    progress: bool = True
    fsync: bool = False
    h5_memory: int = DEFAULT_H5_MEMORY
    h5_inline_bytes: Optional[int] = None
    #: seconds to wait for another run holding a destination's lock (negative: forever)
    wait: float = 0.0
    #: read every source again after staging and compare it with its copies
    verify_source: bool = False
    #: seconds the ranks get to stop together after SIGINT/SIGTERM (core.interrupt)
    interrupt_grace: float = 0.6
    #: emulated nodes exchange chunks through a shared-memory window (transfer.shmem)
    shared_exchange: bool = True

    @property
    def emulate_nodes(self) -> Optional[int]:
        """``N`` when nodes are emulated (``node_id`` ``emulate:N``), else None."""
        return split_node_id(self.node_id)[0]


def _chunk(lo: int) -> Callable[[Any, str], int]:
    def parse(value: Any, name: str) -> int:
        size = parse_size(value, name)
        if not lo <= size <= MAX_CHUNK:
            raise ValueError(f"{name} must be between {lo} and {MAX_CHUNK} bytes, got {size}")
        return size
    return parse


def _h5_memory(value: Any, name: str) -> int:
    cap = parse_size(value, f"h5 memory cap ({name})")
    if cap < MIN_H5_MEMORY:
        raise ValueError(f"h5 memory cap must be at least {MIN_H5_MEMORY} bytes, got {cap}")
    return cap


def _grace(value: Any, name: str) -> float:
    g = parse_seconds(value, name)
    if g < 0:
        raise ValueError(f"{name} must be a finite number of seconds")
    return g


_PARSERS: Dict[str, Callable[[Any, str], Any]] = {
    "method": parse_choice(*METHODS), "chunk_size": _chunk(1),
    "small_file_threshold": _chunk(0), "node_id": parse_node_id, "json": parse_text,
    "h5_memory": _h5_memory, "h5_inline_bytes": parse_size, "wait": parse_seconds,
    "interrupt_grace": _grace,
}
#: The staging options: each falls back to ``STAGER_<NAME>``, then to its default.
STAGE_OPTIONS = tuple(Option(f.name, f.default, _PARSERS.get(f.name, parse_bool),
                             ENV_PREFIX + f.name.upper()) for f in fields(StageOptions))


def resolve_options(env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> StageOptions:
    """Staging options from keywords, then ``STAGER_<NAME>`` variables, then defaults. Local.

    ``emulate_nodes=K`` and ``node_id_env=VAR`` are accepted for ``node_id``
    (:func:`node_id_of`). Collective callers run it on rank 0 only and
    broadcast the result.

    Raises
    ------
    TypeError
        Unknown keyword.
    ValueError
        A value that does not parse.
    """
    env = os.environ if env is None else env
    kwargs = dict(kwargs)
    node_kw = {k: kwargs.pop(k, None) for k in ("node_id", "emulate_nodes", "node_id_env")}
    values = resolve(STAGE_OPTIONS, kwargs, env, what="staging option")
    values["node_id"] = resolve_node_id(env, **node_kw)
    return StageOptions(**values)
