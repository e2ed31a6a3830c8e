"""Median selection networks (pure Python, built once at import).

Why a network: a fixed sequence of compare-exchange steps has no
data-dependent branches, so the median filter can apply each step to a whole
image row at once and let LLVM turn it into SIMD ``min``/``max`` instructions.
Batcher's odd-even merge sort is used because it is short to state and valid
for any ``n``; comparators that cannot influence the middle output are then
pruned (walking backwards from the median wire).  Validity is checked in the
tests by the 0-1 principle.
"""
from __future__ import annotations

import numpy as np

__all__ = ["batcher_pairs", "median_network"]


def batcher_pairs(n: int) -> list[tuple[int, int]]:
    """Comparators ``(i, j)``, ``i < j``, of Batcher's odd-even merge sort for ``n`` inputs.

    After applying them in order with ``(a[i], a[j]) = (min, max)``, ``a`` is sorted.
    """
    if n < 1:
        raise ValueError("a sorting network needs n >= 1 inputs")
    pairs: list[tuple[int, int]] = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return pairs


def median_network(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pruned network whose wire ``(n - 1) // 2`` ends with the (lower) median.

    Returns
    -------
    (lo, hi) : two int64 arrays of equal length
        Comparator ``t`` writes ``min`` to wire ``lo[t]`` and ``max`` to ``hi[t]``.
    """
    needed = {(n - 1) // 2}
    kept: list[tuple[int, int]] = []
    for i, j in reversed(batcher_pairs(n)):
        if i in needed or j in needed:
            kept.append((i, j))
            needed.update((i, j))
    kept.reverse()
    lo = np.array([i for i, _ in kept], dtype=np.int64)
    hi = np.array([j for _, j in kept], dtype=np.int64)
    return lo, hi
