"""Options, resolved one way everywhere: keyword argument > environment variable > default.

As ``mpi4py.futures`` resolves ``MPI4PY_FUTURES_*``: each option is declared
once (:class:`Option`: name, environment variable, default, strict parser
that also checks the value), and :func:`resolve` walks a table of them. Under
MPI, rank 0 alone resolves -- keywords and ITS environment -- and broadcasts
the result (``core.mpi.bcast_result(comm, resolve, ...)``), so a variable set differently on one
rank cannot make ranks disagree, and a bad value is the same ``ValueError``
on every rank. Each table is kept by its owner: the staging options
(``stager.staging.options``, ``STAGER_*``), how ranks form nodes
(:data:`core.nodes.NODE_ID`), the executors' ``WORKFLOWS_*``, the stream job's
and each stream protocol's ``STAGER_STREAM_*``.

Sizes accept a plain byte count or a binary suffix: ``33554432``, ``32M``,
``32MiB``, ``1G``.
"""
from __future__ import annotations

import os
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

__all__ = ["Option", "resolve", "option", "options_of", "add_flags", "parse_size",
           "parse_bool", "parse_seconds", "parse_number", "parse_int", "parse_choice",
           "parse_text", "ENV_PREFIX"]

ENV_PREFIX = "STAGER_"
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
    help, metavar : str, optional
        Its command-line flag (:func:`add_flags`; no ``metavar``: a flag without value).
    cli : dict
        What the flag differs in from the default (``--NAME``, ``dest=NAME``): ``flag``,
        and any other keyword of ``add_argument``.
    """

    name: str
    default: Any
    parse: Callable[[Any, str], Any]
    env: Optional[str] = None
    help: str = ""
    metavar: Optional[str] = None
    cli: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def flag(self) -> str:
        return self.cli.get("flag") or "--" + self.name.replace("_", "-")


def option(value: Any, parse: Optional[Callable[[Any, str], Any]] = None,
           *, env: bool = True, unset: Any = MISSING, help: str = "",
           metavar: Optional[str] = None, **cli: Any) -> Any:
    """A dataclass field declaring its :class:`Option` (read by :func:`options_of`):
    ``value`` is the field's default (a dict: a fresh copy each), ``unset`` what the
    resolver gives when nothing is (default: ``value``), ``parse`` by default
    :func:`parse_text`; ``env=False``: a keyword only."""
    meta = {"option": dict(parse=parse or parse_text, env=env, help=help, metavar=metavar,
                           cli=cli, default=value if unset is MISSING else unset)}
    if isinstance(value, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=value, metadata=meta)


def options_of(cls: Any, env_prefix: str) -> Tuple[Option, ...]:
    """The :class:`Option` table of a dataclass's :func:`option` fields, in order;
    environment variables ``env_prefix + NAME``."""
    out = []
    for f in fields(cls):
        if "option" in f.metadata:
            d = dict(f.metadata["option"])
            d["env"] = env_prefix + f.name.upper() if d["env"] else None
            d["default"] = None if d["default"] is MISSING else d["default"]
            out.append(Option(f.name, **d))
    return tuple(out)


def add_flags(parser: Any, table: Iterable[Option], names: str = "") -> None:
    """Add the flags of ``table`` (those of ``names``, in that order, when given) to
    an argparse ``parser``: ``--NAME`` into ``dest=NAME``, no default (None: the
    resolver's environment and default then apply) unless ``cli`` says otherwise."""
    byname = {o.name: o for o in table}
    for o in [byname[n] for n in names.split()] if names else list(byname.values()):
        kw: Dict[str, Any] = {"dest": o.name, "help": o.help}
        if o.metavar is None:
            kw.update(action="store_true", default=None)
        else:
            kw["metavar"] = o.metavar
        kw.update((k, v) for k, v in o.cli.items() if k != "flag")
        parser.add_argument(o.flag, **kw)


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
