"""What the values of a Stream V2 message may be, checked before they are used: the
specification's types and the bounds of ``docs/stream-protocol.md`` section 8
(:func:`uint`, :func:`text_keys`, :func:`channels`, :class:`Arrays`, :func:`semantic`),
and an error never prints a hostile value whole (:func:`show`).
"""
from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, Dict, Optional, Tuple

from streams.errors import ProtocolError
from streams.protocol import Reason

__all__ = ["MAX_ARRAY_BYTES", "MAX_UINT", "MIN_INT", "PLAIN_TAGS", "Arrays", "semantic",
           "cbor_types", "untag", "show", "size_text", "key_text", "text_keys", "uint",
           "text", "channels", "dims"]


#: Default bound of all typed arrays of one message once decoded, together (a hostile
#: size is refused before any memory is taken; a 16M-pixel float32 flatfield is
#: 64 MiB). A receiver passes a bound of its own (a share of its ``--memory``).
MAX_ARRAY_BYTES = 1 << 30
#: The specification's ``Integer``: "an unsigned integer representable in 64 bits".
MAX_UINT = (1 << 64) - 1
#: Any other integer (user data, flags) must fit int64 or uint64: NumPy, HDF5 and the
#: reports take it as it is.
MIN_INT = -(1 << 63)

#: cbor2's semantic tags that the specification does not use, left as plain tags (which
#: the decoder skips, as stream2.c skips every tag): shared references (28, 29) would
#: let a message of 1 KB name an object 2^30 times over, a regular expression (35) is
#: compiled, a MIME message (36) parsed, string references (25, 256) shared, and
#: decimal fractions, rationals, sets and addresses carry numbers past any bound.
#: Kept: date/time (0, 1), bignums (2, 3: read, then bounded), self-describe (55799).
PLAIN_TAGS = (4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004)
_SEMANTIC: Dict[int, Any] = {}
_CBOR_TYPES: Tuple[Any, ...] = ()


def cbor_types() -> Tuple[Any, ...]:
    """``(CBORSimpleValue, CBORTag, undefined)`` of cbor2, imported once."""
    global _CBOR_TYPES
    if not _CBOR_TYPES:
        from cbor2 import CBORSimpleValue, CBORTag, undefined

        _CBOR_TYPES = (CBORSimpleValue, CBORTag, undefined)
    return _CBOR_TYPES


def semantic() -> Dict[int, Any]:
    """``semantic_decoders`` for cbor2 (>= 6: called with the decoded content)."""
    if not _SEMANTIC:
        CBORTag = cbor_types()[1]
        for tag in PLAIN_TAGS:
            _SEMANTIC[tag] = lambda value, immutable, tag=tag: CBORTag(tag, value)
    return _SEMANTIC


def untag(v: Any) -> Any:
    """Skip tags in front of a value, as stream2.c does (``cbor_value_skip_tag``)."""
    CBORTag = cbor_types()[1]
    while isinstance(v, CBORTag):
        v = v.value
    return v


class Arrays:
    """The typed arrays of one message: their decoded bytes, charged before each is
    decompressed and bounded in total by ``limit`` (``bound`` says which, in errors)."""

    __slots__ = ("limit", "used", "bound")

    def __init__(self, limit: int, bound: str = "for one message") -> None:
        self.limit, self.used, self.bound = limit, 0, bound

    def charge(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` more, or raise ``too_large`` (nothing was allocated for them)."""
        self.used += nbytes
        if self.used > self.limit:
            raise ProtocolError(Reason.TOO_LARGE, f"{what}: the typed arrays of this message "
                                f"decode to {size_text(self.used)} or more, over the bound of "
                                f"{size_text(self.limit)} {self.bound}")


def size_text(n: int) -> str:
    """Bytes as text: exact below 1 MiB, else in MiB."""
    return f"{n} bytes" if n < 1 << 20 else f"{n / (1 << 20):.0f} MiB"


def show(v: Any) -> str:
    """A short text for a value in an error (never the whole of a hostile one: the
    text of an integer over 4300 digits is itself an error in Python)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 256:
        return f"an integer of {v.bit_length()} bits"
    r = reprlib.repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def key_text(k: Any) -> str:
    """A map key as it appears in a field's name."""
    return k if isinstance(k, str) else show(k)


def text_keys(m: Mapping, what: str) -> None:
    """A map of the specification (the message, an image's ``data``): text keys only."""
    for k in m:
        if not isinstance(k, str):
            raise ProtocolError(Reason.MALFORMED, f"{what}: key {show(k)} is not a text "
                                "string")


def uint(m: Mapping, key: str, what: str) -> int:
    """The specification's ``Integer``: unsigned, representable in 64 bits."""
    v = untag(m.get(key))
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_UINT:
        raise ProtocolError(Reason.MALFORMED, f"{what}: {key} must be an unsigned integer "
                            f"of 64 bits, not {show(v)}")
    return v


def text(m: Mapping, key: str, what: str, default: Optional[str] = None) -> str:
    """A ``TextString`` field (``default`` when absent)."""
    v = untag(m.get(key, default))
    if not isinstance(v, str):
        raise ProtocolError(Reason.MALFORMED, f"{what}: {key} must be a text string, "
                            f"not {show(v)}")
    return v


def channels(m: Mapping, what: str) -> Tuple[str, ...]:
    """The start's ``channels``: distinct non-empty names without ``/`` (each names the
    series' group ``<channel>_channel`` in the scan's file and an image's data key)."""
    names = untag(m.get("channels", ()))
    if not isinstance(names, Sequence) or isinstance(names, (str, bytes)) or not all(
            isinstance(c, str) for c in names):
        raise ProtocolError(Reason.MALFORMED, f"{what}: channels must be a list of text")
    seen = set()
    for c in names:
        if not c or "/" in c:
            raise ProtocolError(Reason.MALFORMED, f"{what}: channel name {show(c)} is empty "
                                "or has a '/'")
        if c in seen:
            raise ProtocolError(Reason.MALFORMED, f"{what}: channel {show(c)} is named "
                                "twice in channels")
        seen.add(c)
    return tuple(names)


def dims(d: Any, what: str, least: int) -> Tuple[int, ...]:
    """Dimensions of a tag 40 array: unsigned integers of 64 bits, each >= ``least``."""
    if not isinstance(d, Sequence) or isinstance(d, (str, bytes)) or not all(
            isinstance(x, int) and not isinstance(x, bool) and least <= x <= MAX_UINT
            for x in d):
        raise ProtocolError(Reason.MALFORMED, f"{what}: dimensions {show(d)} are not "
                            f"integers of 64 bits >= {least}")
    return tuple(int(x) for x in d)
