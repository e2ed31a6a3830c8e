"""Task arrays: many ready tasks of one app in one queue entry (less rank-0 CPU per task).

The root's CPU per task was mostly per-task work (future, record, pickling each call),
not messages (``bench/dispatch_model.md``), and a ``foreach`` over ready values is the
common case: the root cuts such a call into chunks (:func:`array_chunks`, about
:data:`CHUNKS_PER_WORKER` a worker, so results still arrive while it runs and the last
chunks balance) and queues one entry a chunk. The function, limits and shared keyword
arguments are pickled once a chunk (:class:`ArrayCall`); the worker runs the items in
order, each with its own limits, and answers with one blob, unpickled once by the root
(:class:`ArrayDone`); a server's failure for the entry fails every item of the chunk.
Placed items and items waiting for futures are never arrayed. The entry's fields, the
time-limit backstop and the pickling fall-backs: docs/DISPATCH.md, "Task arrays".
"""

from __future__ import annotations

import pickle
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from core.mpi.link import dumps

from ...errors import RemoteError
from ...futures import trampoline
from ...limits import Limits
from ...tasks import Outcome, TaskCall, execute

__all__ = ["ArrayCall", "ArrayDone", "array_chunks", "chunk_cap", "run_array",
           "CHUNKS_PER_WORKER", "BACKSTOP_SECONDS"]

#: Chunks of one call each worker should get (at least): results flow early, the end balances.
CHUNKS_PER_WORKER = 4
#: Longest a chunk's items' timeouts may add up to (s). A server knows when a chunk
#: started, not each item, so it gives up on a stuck worker only after the sum of
#: its chunk's timeouts (+ grace): timed apps get chunks of at most
#: ``BACKSTOP_SECONDS / timeout`` items (1 from 30 s timeouts on: not arrayed).
BACKSTOP_SECONDS = 60.0

Done = Callable[[Outcome], None]
Packed = Tuple[Any, Optional[RemoteError], float, float]


def array_chunks(n: int, workers: int, max_chunk: int,
                 per_worker: int = CHUNKS_PER_WORKER) -> List[int]:
    """Sizes of the chunks ``n`` ready tasks are cut into (sum ``n``, in order).

    ``k = min(max_chunk, n // (per_worker * workers))`` items per chunk, the
    sizes then evened out (they differ by at most one). ``k < 2`` -- too few
    tasks for every worker to get ``per_worker`` chunks of two -- gives
    ``[1] * n``: not arrayed.
    """
    if n <= 0:
        return []
    k = min(max(1, max_chunk), n // (max(1, per_worker) * max(1, workers)))
    if k < 2:
        return [1] * n
    count = -(-n // k)
    base, extra = divmod(n, count)
    return [base + 1] * extra + [base] * (count - extra)


class ArrayCall:
    """Several calls of one target: what an array entry's blob holds.

    ``args`` is one tuple of positional arguments per item; ``kwargs``,
    ``target``, ``limits`` are shared (pickled once); ``names`` the items'
    task names (for messages on the worker).
    """

    __slots__ = ("target", "limits", "kwargs", "names", "args")

    def __init__(self, target: Any, limits: Limits, kwargs: Dict[str, Any],
                 names: List[str], args: List[Tuple[Any, ...]]):
        self.target = target
        self.limits = limits
        self.kwargs = kwargs
        self.names = names
        self.args = args

    @classmethod
    def of(cls, calls: Sequence[TaskCall]) -> ArrayCall:
        """The array of ``calls`` (same target, limits and keyword arguments)."""
        first = calls[0]
        return cls(first.target, first.limits, first.kwargs, [c.name for c in calls],
                   [c.args for c in calls])

    def __reduce__(self):
        return (ArrayCall, (self.target, self.limits, self.kwargs, self.names, self.args))

    def __len__(self) -> int:
        return len(self.args)

    def calls(self) -> List[TaskCall]:
        return [TaskCall(name, self.target, args, self.kwargs, self.limits)
                for name, args in zip(self.names, self.args)]


def chunk_cap(max_chunk: int, timeout: Optional[float]) -> int:
    """Most items per chunk for tasks with this per-task ``timeout`` (see BACKSTOP_SECONDS)."""
    if timeout is None or timeout <= 0:
        return max_chunk
    return max(1, min(max_chunk, int(BACKSTOP_SECONDS // timeout)))


def same_array(calls: Sequence[TaskCall]) -> bool:
    """Whether ``calls`` may share one :class:`ArrayCall` (one target, limits, kwargs; unplaced)."""
    if not calls:
        return False
    first = calls[0]
    return all(c.target is first.target and c.limits is first.limits
               and c.kwargs is first.kwargs and c.place is None for c in calls)


def run_array(array: ArrayCall) -> bytes:
    """Run every item in order (each under its own limits); the pickled list of results.

    A value that does not pickle becomes that item's error; the others keep
    their values.
    """
    outs = [execute(call) for call in array.calls()]
    packed: List[Packed] = [(o.value, o.error, o.start, o.end) for o in outs]
    try:
        return dumps(packed)
    except Exception:
        for i, o in enumerate(outs):
            try:
                dumps(o.value)
            except Exception as exc:
                bad = o.unpicklable(exc)
                packed[i] = (None, bad.error, bad.start, bad.end)
        return dumps(packed)


class ArrayDone:
    """The root's record of one array entry: the items' callbacks, resolved from one blob."""

    __slots__ = ("dones",)

    def __init__(self, dones: List[Done]):
        self.dones = dones

    @property
    def count(self) -> int:
        return len(self.dones)

    def __call__(self, outcome: Outcome) -> None:
        """The same outcome for every item (cancelled, unservable)."""
        for done in self.dones:
            done(outcome)

    def resolve(self, blob: bytes, where: str, node: Optional[int]) -> None:
        """Resolve each item from the chunk's result blob (or one failure for all)."""
        try:
            payload = pickle.loads(blob)
        except Exception as exc:
            err = RemoteError(type(exc).__name__, f"the array's results could not be "
                              f"unpickled on the root: {exc}", "", where)
            now = time.time()
            self(Outcome(None, err, where, now, now, node))
            return
        if isinstance(payload, tuple):  # a server's failure for the whole chunk
            value, error, start, end = payload
            self(Outcome(value, error, where, start, end, node))
            return
        # One trampoline for the chunk: each item's callback queues its step there
        # instead of setting up a trampoline of its own.
        trampoline(lambda: self._each(payload, where, node))

    def _each(self, payload: List[Packed], where: str, node: Optional[int]) -> None:
        for done, (value, error, start, end) in zip(self.dones, payload):
            done(Outcome(value, error, where, start, end, node))
