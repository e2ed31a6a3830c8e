"""Scan shapes as users give them: integers, at most one ``-1`` resolved from the image count."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

__all__ = ["parse_scan_shape", "resolve_scan_shape"]


def parse_scan_shape(text: Any, name: str = "scan shape") -> Tuple[int, ...]:
    """``"NY,NX"`` (or ``NYxNX``, or a sequence; one value may be ``-1``) -> a tuple of
    ints; a :mod:`core.options` parser (ValueError naming ``name`` and the text)."""
    text = ",".join(map(str, text)) if isinstance(text, (list, tuple)) else str(text)
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"scan shape {text!r}: expected integers such as 32,64 "
                         "(one may be -1)") from None
    _check(shape, text)
    return shape


def _check(shape: Sequence[int], what: object) -> None:
    if not shape or any(n == 0 or n < -1 for n in shape) or list(shape).count(-1) > 1:
        raise ValueError(f"scan shape {what!r}: positive integers, at most one -1")


def resolve_scan_shape(shape: Optional[Sequence[int]], images: int) -> Tuple[int, ...]:
    """``shape`` with its ``-1`` replaced so it holds ``images``; ``(1, images)`` without one.

    >>> resolve_scan_shape((-1, 8), 64)
    (8, 8)

    ValueError when no integer fits or the shape does not hold ``images``.
    """
    if shape is None:
        return (1, images)
    _check(shape, tuple(shape))
    known = 1
    for n in shape:
        if n != -1:
            known *= n
    if -1 in shape:
        if images % known:
            raise ValueError(f"scan shape {tuple(shape)}: {images} images are not a "
                             f"multiple of {known}")
        return tuple(images // known if n == -1 else n for n in shape)
    if known != images:
        raise ValueError(f"scan shape {tuple(shape)} holds {known} images, the detector "
                         f"takes {images}: give a shape of {images} images, or one -1")
    return tuple(shape)
