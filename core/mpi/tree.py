"""The one merge tree: a fixed, ordered binary tree over positions ``0..n-1``.

Both reductions of the project follow it: the task runtime's
``workflows.reduce_tree(ordered=True)`` (each merge a task, launched as soon as its
two inputs exist) and the receiving job's merge of per-rank partials
(:func:`merge_ranks`, point to point). Round k pairs ``(dst, src)`` with ``src =
dst + 2**k``; position ``dst`` computes ``merge(own, received)`` (lower position
first). The shape never depends on timing, so a merge that is associative but not
commutative (concatenation) -- or not even exactly associative (floating-point
sums) -- gives the same bits on every run.

Their names say what is merged: task results (``reduce_tree``), ranks' values
(``merge_ranks``). :func:`tree_schedule` is pure; :func:`merge_ranks` needs mpi4py only
through the ``comm`` it is given.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple

__all__ = ["tree_schedule", "merge_ranks", "TreeMergeError"]


class TreeMergeError(RuntimeError):
    """A merge failed somewhere in the tree (the message names the rank)."""


def tree_schedule(n: int) -> List[List[Tuple[int, int]]]:
    """Rounds of the ordered binary merge tree over positions ``0..n-1``. Pure.

    After the last round position 0 holds the merge of all, in position order::

        >>> tree_schedule(5)
        [[(0, 1), (2, 3)], [(0, 2)], [(0, 4)]]
    """
    rounds: List[List[Tuple[int, int]]] = []
    step = 1
    while step < n:
        rounds.append([(d, d + step) for d in range(0, n, 2 * step) if d + step < n])
        step *= 2
    return rounds


def merge_ranks(comm: Any, ranks: Sequence[int], value: Any, merge: Callable[[Any, Any], Any],
                tag: int = 7201) -> Any:
    """Point to point over `comm` among ``ranks`` (every one of them must call): merge
    their values in the fixed tree of :func:`tree_schedule`.

    Returns the merged value at ``ranks[0]``, None elsewhere. An error at any step
    travels up the tree as text and is raised at ``ranks[0]`` as
    :class:`TreeMergeError`; the caller agrees on it afterwards (every rank of
    ``ranks`` has finished its sends by then).
    """
    pos = list(ranks).index(comm.rank)
    mine: Any = ("ok", value)
    for rnd in tree_schedule(len(ranks)):
        for dst, src in rnd:
            if pos == src:
                comm.send(mine, dest=ranks[dst], tag=tag)
                return None
            if pos == dst:
                other = comm.recv(source=ranks[src], tag=tag)
                if mine[0] == "ok" and other[0] == "ok":
                    try:
                        mine = ("ok", merge(mine[1], other[1]))
                    except Exception as e:   # carried up the tree
                        mine = ("err", f"rank {comm.rank}: merge failed: {e!r}")
                elif mine[0] == "ok":
                    mine = other
    if mine[0] == "err":
        raise TreeMergeError(mine[1])
    return mine[1]

