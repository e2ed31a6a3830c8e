"""Dataflow patterns over apps: ``foreach`` and ``reduce_tree`` (the paper's Figures 4 and 5).

``reduce_tree`` has no barrier between map and reduce: a merge starts as soon
as its two inputs exist, while other map tasks still run.

* ``ordered=True`` builds the project's one fixed binary tree over the inputs
  in their order (:func:`core.mpi.tree.tree_schedule`, the tree the receiving
  job merges its ranks' partials in): ``merge(x0, x1)``, ``merge(x2, x3)``, ...,
  then the same over those results. Each merge waits only for its own two inputs. The tree's
  shape does not depend on timing, so a merge that is associative but not
  commutative (concatenation) -- or not even exactly associative
  (floating-point sums) -- gives the same bits on every executor and every run.
* ``ordered=False`` merges *any* two results that are ready, in completion
  order: best when task times vary widely (5 s to 160 s in FF-HEDM), but the
  merge must be commutative as well as associative.

Both are loops over lists (no recursion) and launch exactly ``n - 1`` merges.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterable, List, Optional, Union

from core.mpi.tree import tree_schedule

from .apps import App, app
from .errors import DependencyFailure
from .futures import AppFuture, exception_of

__all__ = ["foreach", "reduce_tree"]


def _as_app(fn: Union[App, Callable]) -> App:
    return fn if isinstance(fn, App) else app(fn)


def foreach(
    fn: Union[App, Callable], items: Iterable[Any], *args: Any, **kwargs: Any
) -> List[AppFuture]:
    """Call ``fn(item, *args, **kwargs)`` as one task per item; return the futures in order.

    Items may be futures (each task then waits for its own item only); the
    executor balances the tasks over its workers. A plain function is wrapped
    with :func:`~workflows.apps.app`. The tasks are launched together
    (:meth:`~workflows.apps.App.map`): the mpi executor sends those whose
    arguments are ready as task arrays (``docs/DISPATCH.md``); every item
    still has its own future, result, error and time limit.
    """
    return _as_app(fn).map(items, *args, **kwargs)


def reduce_tree(merge: Union[App, Callable], items: Iterable[Any], ordered: bool = True,
                launched: Optional[List[Any]] = None) -> Future:
    """Reduce ``items`` (values or futures) pairwise with the app ``merge``; return one future.

    Parameters
    ----------
    merge : App or callable
        ``merge(a, b) -> c``, associative (and commutative if ``ordered=False``).
    items : iterable
        At least one value or future.
    ordered : bool
        Keep the items' order (fixed tree) or merge in completion order.
    launched : list, optional
        Every merge's future is appended to it as it is launched (the reduce
        phase's tasks, e.g. for :func:`~workflows.futures.phase_spans`).

    Returns
    -------
    concurrent.futures.Future
        The final result. If an input or a merge fails, it fails with
        :class:`~workflows.errors.DependencyFailure` naming the first failure.

    Raises
    ------
    ValueError
        If ``items`` is empty.
    """
    level = list(items)
    if not level:
        raise ValueError("reduce_tree needs at least one item")
    merge_app = _as_app(merge)

    def task(a: Any, b: Any) -> Any:
        fut = merge_app(a, b)
        if launched is not None:
            launched.append(fut)
        return fut

    if len(level) == 1:
        return level[0] if isinstance(level[0], Future) else _done(level[0])
    if ordered:
        for rnd in tree_schedule(len(level)):
            for dst, src in rnd:
                level[dst] = task(level[dst], level[src])
        return level[0]
    return _Unordered(task, level, merge_app.name).result


def _done(value: Any) -> AppFuture:
    fut = AppFuture("value")
    fut.set_running_or_notify_cancel()
    fut.set_result(value)
    return fut


class _Unordered:
    """Merge any two ready results until one is left (``reduce_tree(ordered=False)``)."""

    def __init__(self, merge: Callable[..., Any], items: List[Any], name: str):
        self.merge = merge
        self.result = AppFuture(f"reduce_tree({name})")
        self.lock = threading.Lock()
        self.ready: List[Any] = []
        self.left = len(items)  # partial results that exist or are being made
        self.failed = False
        for item in items:
            if isinstance(item, Future):
                item.add_done_callback(self._arrived)
            else:
                self._arrived(_done(item))

    def _arrived(self, fut: Future) -> None:
        # Called directly (not via the trampoline): the merge it launches must be
        # counted by the runtime before the task that finished stops counting,
        # or an executor shutting down could see zero tasks in between.
        exc = exception_of(fut)
        pairs = []
        final = None
        with self.lock:
            if self.failed:
                return
            if exc is not None:
                self.failed = True
            else:
                self.ready.append(fut)
                while len(self.ready) >= 2:
                    pairs.append((self.ready.pop(), self.ready.pop()))
                    self.left -= 1
                final = self.ready[0] if self.left == 1 and len(self.ready) == 1 else None
        if exc is not None:
            if self.result.set_running_or_notify_cancel():
                self.result.set_exception(DependencyFailure(self.result.task.name, "...", exc))
            return
        for a, b in pairs:
            self.merge(a, b).add_done_callback(self._arrived)
        if final is not None and self.result.set_running_or_notify_cancel():
            self.result.set_result(final.result())
