"""Task arrays without MPI: chunk sizes, the worker's run, the root's fan-out."""
from __future__ import annotations

import pickle

import pytest

from workflows.errors import RemoteError
from workflows.executors.mpi.arrays import (ArrayCall, ArrayDone, array_chunks, run_array,
                                            same_array)
from workflows.executors.mpi.queues import Entry, TaskQueue
from core.mpi.link import dumps
from workflows.limits import Limits
from workflows.tasks import FunctionRef, TaskCall


def square(x):
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x * x


def unpicklable(x):
    if x == 1:
        return lambda: None
    return x


@pytest.mark.parametrize("n,workers,max_chunk", [
    (0, 3, 64), (1, 3, 64), (23, 3, 64), (24, 3, 64), (25, 3, 64), (100, 3, 64),
    (3000, 3, 64), (3001, 7, 64), (10 ** 6, 1000, 64), (500, 1, 4), (97, 2, 1)])
def test_chunks_cover_items_in_order_and_give_every_worker_several(n, workers, max_chunk):
    sizes = array_chunks(n, workers, max_chunk)
    assert sum(sizes) == n
    assert all(1 <= s <= max_chunk for s in sizes)
    assert max(sizes, default=0) - min(sizes, default=0) <= 1  # even
    if n // (4 * workers) < 2 or max_chunk < 2:
        assert sizes == [1] * n  # too few to array
    else:
        assert len(sizes) >= 4 * workers or max(sizes) == max_chunk


def test_chunk_size_is_capped_and_grows_with_items():
    assert array_chunks(3000, 3, 64)[0] == 64
    assert array_chunks(120, 3, 64) == [10] * 12
    assert array_chunks(1000, 10000, 64) == [1] * 1000


def _calls(fn, items, timeout=None):
    ref = FunctionRef.of(fn)
    limits = Limits(timeout, None, False)
    kwargs: dict = {}
    return [TaskCall(f"{fn.__name__}#{i + 1}", ref, (i,), kwargs, limits) for i in items]


def test_same_array_needs_one_target_limits_kwargs_and_no_placement():
    calls = _calls(square, range(4))
    assert same_array(calls)
    other = _calls(square, range(2))  # another FunctionRef and kwargs object
    assert not same_array(calls + other)
    placed = TaskCall("p", calls[0].target, (1,), calls[0].kwargs, calls[0].limits, (0, False))
    assert not same_array(calls + [placed])
    assert not same_array([])


def test_array_runs_items_in_order_and_fails_one_item_alone():
    array = pickle.loads(dumps(ArrayCall.of(_calls(square, range(6)))))
    assert len(array) == 6 and array.names[0] == "square#1"
    out = pickle.loads(run_array(array))
    assert [v for v, e, _s, _e in out] == [0, 1, 4, None, 16, 25]
    errors = [e for _v, e, _s, _e in out]
    assert [e is None for e in errors] == [True, True, True, False, True, True]
    assert errors[3].type_name == "ValueError" and "bad item 3" in errors[3].message
    assert "square" in errors[3].traceback  # the item's own traceback


def test_an_unpicklable_value_fails_only_its_item():
    out = pickle.loads(run_array(ArrayCall.of(_calls(unpicklable, range(3)))))
    assert out[0][0] == 0 and out[2][0] == 2
    assert out[1][0] is None and out[1][1] is not None


def test_array_items_keep_their_own_timeout():
    import time

    def slow(x):
        time.sleep(5 if x == 1 else 0)
        return x

    globals()["slow"] = slow
    slow.__qualname__ = "slow"
    out = pickle.loads(run_array(ArrayCall.of(_calls(slow, range(3), timeout=0.3))))
    assert out[0][0] == 0 and out[2][0] == 2
    assert out[1][1] is not None and out[1][1].type_name == "TaskTimeout"
    assert out[1][3] - out[1][2] < 3


def test_root_resolves_each_item_or_fails_all_with_the_servers_message():
    got: list = []
    done = ArrayDone([got.append for _ in range(3)])
    done.resolve(dumps([(1, None, 0.0, 1.0), (None, RemoteError("E", "m", "", "w"), 0.0, 1.0),
                        (3, None, 0.0, 1.0)]), "rank 2", 1)
    assert [o.value for o in got] == [1, None, 3]
    assert got[1].error.message == "m" and all(o.where == "rank 2" and o.node == 1 for o in got)
    got.clear()
    err = RemoteError("TaskCrashed", "its worker, rank 2 on vm, died while running it", "",
                      "rank 2", kind="crash")
    done.resolve(dumps((None, err, 0.0, 1.0)), "rank 2", 1)  # what a server sends
    assert len(got) == 3 and all(o.error.message.startswith("its worker, rank 2") for o in got)


def test_an_array_entry_moves_as_one_and_bounds_its_backstop():
    q = TaskQueue()
    q.push(Entry(1, "a..b (array of 8)", -1, False, 8 * 0.5, None, b"x", 8))
    q.push(Entry(2, "c", -1, False, None, None, b"y"))
    batch = q.take(0, 10)
    assert [e.tid for e in batch] == [1]  # a timed entry travels alone
    assert batch[0].tasks == 8 and q.take(0, 10)[0].tasks == 1


def test_timed_apps_get_chunks_whose_timeouts_sum_to_at_most_a_minute():
    from workflows.executors.mpi.arrays import BACKSTOP_SECONDS, chunk_cap

    assert chunk_cap(64, None) == 64 and chunk_cap(64, 0.5) == 64
    assert chunk_cap(64, 1.0) == 60 and chunk_cap(64, 10.0) == 6
    assert chunk_cap(64, 45.0) == 1 and chunk_cap(64, 3600.0) == 1
    for t in (0.1, 1.0, 7.0, 29.0):
        assert chunk_cap(64, t) * t <= BACKSTOP_SECONDS
