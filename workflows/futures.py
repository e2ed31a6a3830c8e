"""Futures of tasks, and dependency resolution over nested arguments.

A task's arguments may hold futures anywhere inside lists, tuples, sets and
dict values. :func:`find_futures` lists them, :func:`when_all` calls back once
every one is done, and :func:`substitute` swaps each for its result. Waiting
happens on the submitting side through done-callbacks (as Parsl's
DataFlowKernel does), so a task occupies a worker slot only once its inputs
exist; nothing ever blocks a worker waiting for another task.

Callbacks can cascade: a finished task launches its dependents, whose failure
fails theirs, and so on through a long chain. :func:`trampoline` turns that
recursion into a loop per thread, so a chain of 100,000 tasks neither
overflows the stack nor holds a lock across user code.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import CancelledError, Future
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional

__all__ = ["AppFuture", "TaskInfo", "find_futures", "substitute", "when_all", "trampoline",
           "wait_all", "exception_of", "phase_spans"]

_local = threading.local()


class TaskInfo:
    """Where and when a task ran (filled in when it finishes).

    ``node`` is the index of the node it ran on (``None`` until known);
    ``number`` its task number in the runtime.
    """

    __slots__ = ("name", "where", "start", "end", "attempts", "node", "number")

    def __init__(self, name: str):
        self.name = name
        self.where: Optional[str] = None
        self.start: Optional[float] = None
        self.end: Optional[float] = None
        self.attempts = 0
        self.node: Optional[int] = None
        self.number = 0

    def __repr__(self) -> str:
        return (
            f"TaskInfo({self.name!r}, where={self.where!r}, start={self.start}, "
            f"end={self.end}, attempts={self.attempts}, node={self.node})"
        )


class AppFuture(Future):
    """The future an app call returns at once; ``.task`` says where it ran."""

    def __init__(self, name: str = "task"):
        super().__init__()
        self.task = TaskInfo(name)

    def __repr__(self) -> str:
        return f"<AppFuture {self.task.name} {self._state.lower()}>"


_CONTAINERS = (list, tuple, set, frozenset)


def find_futures(obj: Any) -> List[Future]:
    """List the futures inside ``obj`` (nested lists, tuples, sets, dict values).

    Iterative, so deeply nested or very long arguments cost no stack.
    """
    found: List[Future] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, Future):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, _CONTAINERS):
            stack.extend(item)
    return found


def substitute(obj: Any) -> Any:
    """Copy ``obj`` with every (done) future replaced by its result.

    Raises the first failed future's exception. Containers without futures
    are returned as they are (no copy).
    """
    if isinstance(obj, Future):
        return obj.result()
    if isinstance(obj, dict):
        if not find_futures(obj):
            return obj
        pairs = [(k, substitute(v)) for k, v in obj.items()]
        return dict(pairs) if type(obj) is dict else type(obj)(pairs)
    if isinstance(obj, _CONTAINERS):
        if not find_futures(obj):
            return obj
        items = [substitute(v) for v in obj]
        if hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*items)
        return type(obj)(items)
    return obj


def exception_of(fut: Future) -> Optional[BaseException]:
    """The exception of a done future; a cancelled one counts as failed.

    ``Future.exception()`` *raises* ``CancelledError`` for a cancelled future;
    inside a done-callback that exception would be swallowed by
    ``concurrent.futures`` and the dependent task left pending forever.
    """
    if fut.cancelled():
        return CancelledError(f"{fut!r} was cancelled")
    return fut.exception()


def trampoline(fn: Callable[[], None]) -> None:
    """Run ``fn`` now, or -- if this thread is already inside a trampoline --
    queue it to run after the current step (turns callback recursion into a loop).

    A step that raises does not drop the steps queued behind it (each one
    resolves some future); the first exception is re-raised once the queue is empty.
    """
    queue: Optional[Deque[Callable[[], None]]] = getattr(_local, "queue", None)
    if queue is not None:
        queue.append(fn)
        return
    queue = _local.queue = collections.deque([fn])
    first: Optional[BaseException] = None
    try:
        while queue:
            try:
                queue.popleft()()
            except Exception as exc:
                if first is None:
                    first = exc
    finally:
        _local.queue = None
    if first is not None:
        raise first


def when_all(futures: Iterable[Future], callback: Callable[[], None]) -> None:
    """Call ``callback()`` once every future in ``futures`` is done.

    The callback runs in the thread that completed the last future (or right
    away if all are done), inside :func:`trampoline`.
    """
    pending = [f for f in futures if not f.done()]
    if not pending:
        trampoline(callback)
        return
    lock = threading.Lock()
    count = [len(pending)]

    def one_done(_f: Future) -> None:
        with lock:
            count[0] -= 1
            last = count[0] == 0
        if last:
            trampoline(callback)

    for f in pending:
        f.add_done_callback(one_done)


def wait_all(obj: Any, timeout: Optional[float] = None) -> None:
    """Block until every future inside ``obj`` is done (failures included)."""
    import concurrent.futures as cf

    futures = find_futures(obj)
    if futures:
        done, not_done = cf.wait(futures, timeout=timeout)
        if not_done:
            raise TimeoutError(f"{len(not_done)} futures still pending after {timeout} s")


def phase_spans(phases: Mapping[str, Iterable[Any]], origin: float) -> Dict[str, Dict[str, float]]:
    """Wall-time span of each phase from its tasks' start/end stamps (worker clocks).

    Returns ``{phase: {"start", "end", "seconds", "tasks", "busy"}}`` with
    start/end relative to ``origin`` (a ``time.time()`` taken before the
    first task); ``busy`` sums the tasks' own durations. Phases may overlap:
    a tree reduction starts while its inputs are still being made.
    """
    out: Dict[str, Dict[str, float]] = {}
    for name, futures in phases.items():
        infos = [f.task for f in futures if getattr(f, "task", None) is not None
                 and f.task.start is not None]
        if not infos:
            continue
        start = min(i.start for i in infos) - origin
        end = max(i.end for i in infos) - origin
        out[name] = {"start": round(start, 4), "end": round(end, 4),
                     "seconds": round(end - start, 4), "tasks": len(infos),
                     "busy": round(sum(i.end - i.start for i in infos), 4)}
    return out
