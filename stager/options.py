"""Staging options: keyword argument > ``STAGER_*`` environment variable > default.

Parsed strictly. Under MPI, rank 0 alone resolves them -- keywords and ITS
environment -- and broadcasts the result (``stager.mpi.bcast_result``), so a
variable set differently on one rank (a chunk size) cannot make ranks
disagree, and a bad value is the same ``ValueError`` on every rank. Sizes
accept a plain byte count or a binary suffix: ``33554432``, ``32M``,
``32MiB``, ``1G``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

__all__ = ["StageOptions", "resolve_options", "parse_size", "parse_bool", "parse_seconds",
           "ENV_PREFIX"]

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


@dataclass(frozen=True)
class StageOptions:
    """Resolved options of one ``stage`` call (see :func:`stager.stage`)."""

    method: str = "stripe"
    chunk_size: int = 32 << 20
    small_file_threshold: int = 1 << 20
    emulate_nodes: Optional[int] = None
    node_id_env: Optional[str] = None
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
    #: seconds the ranks get to stop together after SIGINT/SIGTERM (stager.staging.interrupt)
    interrupt_grace: float = 0.6
    #: emulated nodes exchange chunks through a shared-memory window (transfer.shmem)
    shared_exchange: bool = True


def _parse(name: str, value: Any) -> Any:
    if name == "method":
        if str(value) not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {value!r}")
        return str(value)
    if name in ("chunk_size", "small_file_threshold"):
        size = parse_size(value, name)
        lo = 1 if name == "chunk_size" else 0
        if not lo <= size <= MAX_CHUNK:
            raise ValueError(f"{name} must be between {lo} and {MAX_CHUNK} bytes, got {size}")
        return size
    if name == "emulate_nodes":
        if value is None or value == "":
            return None
        try:
            is_int = isinstance(value, int) and not isinstance(value, bool)
            k: int = value if is_int else int(str(value), 10)
        except ValueError:
            raise ValueError(f"emulate_nodes must be a positive integer, got {value!r}") from None
        if isinstance(value, bool) or k < 1:
            raise ValueError(f"emulate_nodes must be a positive integer, got {value!r}")
        return k
    if name in ("node_id_env", "json"):
        return None if value in (None, "") else str(value)
    if name == "h5_memory":
        cap = parse_size(value, "h5 memory cap (h5_memory, STAGER_H5_MEMORY)")
        if cap < MIN_H5_MEMORY:
            raise ValueError(f"h5 memory cap must be at least {MIN_H5_MEMORY} bytes, got {cap}")
        return cap
    if name == "h5_inline_bytes":
        return parse_size(value, "h5_inline_bytes")
    if name == "wait":
        return parse_seconds(value, "wait (STAGER_WAIT)")
    if name == "interrupt_grace":
        g = parse_seconds(value, "interrupt_grace (STAGER_INTERRUPT_GRACE)")
        if g < 0:
            raise ValueError("interrupt_grace must be a finite number of seconds")
        return g
    return parse_bool(value, name)


def resolve_options(env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> StageOptions:
    """Options from keywords, then ``STAGER_<NAME>`` variables, then defaults. Local.

    Collective callers run it on rank 0 only and broadcast the result.

    Raises
    ------
    TypeError
        Unknown keyword.
    ValueError
        A value that does not parse.
    """
    env = os.environ if env is None else env
    names = [f.name for f in fields(StageOptions)]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise TypeError(f"unknown staging option(s): {', '.join(unknown)}; "
                        f"known: {', '.join(names)}")
    values = {}
    for name in names:
        if kwargs.get(name) is not None:
            values[name] = _parse(name, kwargs[name])
        elif env.get(ENV_PREFIX + name.upper()) not in (None, ""):
            values[name] = _parse(name, env[ENV_PREFIX + name.upper()])
    opts = StageOptions(**values)
    if opts.emulate_nodes is not None and opts.node_id_env is not None:
        raise ValueError("use either emulate_nodes or node_id_env, not both")
    return opts
