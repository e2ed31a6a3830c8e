"""Task arrays under mpirun: a ``foreach`` of ready values as one entry per chunk.

Every test passes at any rank count 1..4 (with one rank the root runs the
arrays itself) and in both dispatch modes; what differs between rank counts is
read from the executor. Each checks that arrays were really used
(``ex.stats["array_tasks"]``) and that users still see one task per item.
"""
from __future__ import annotations

import time

import pytest

from tests.mpiutil import assert_all, emulated
from workflows import TaskFailure, TaskTimeout, app, foreach, reduce_tree

pytestmark = pytest.mark.mpi

N = 3000


@app
def square(x):
    if x == 77:
        raise ValueError(f"bad item {x}")
    return x * x


@app
def add(a, b):
    return a + b


@app
def plus(x, y=0):
    return x + y


@app(timeout=0.5)
def maybe_hang(i):
    if i == 5:
        time.sleep(3600)
    return i


def _comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _executor(comm, dispatch):
    from workflows.executors import MPIExecutor

    return MPIExecutor(emulated(comm, min(2, comm.size)), dispatch=dispatch)


@pytest.mark.parametrize("dispatch", ["central", "nodes"])
def test_results_in_order_and_one_failure_alone(dispatch):
    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, dispatch) as ex:
        if ex is not None:
            futures = foreach(square, range(N))
            errs = [f.exception(timeout=120) for f in futures]
            values = [f.result() if e is None else None for f, e in zip(futures, errs)]
            want = [i * i for i in range(N)]
            bad = [i for i, e in enumerate(errs) if e is not None]
            ok = bad == [77] and all(values[i] == want[i] for i in range(N) if i != 77)
            msg = f"failed items {bad[:5]}"
            err = errs[77]
            if ok:
                ok = (isinstance(err, TaskFailure) and "bad item 77" in str(err)
                      and "square" in err.remote.traceback and futures[77].task.name in str(err))
                msg = f"item 77: {err!r}"
            rt = ex.runtime
            ok = ok and rt.launched == N and rt.succeeded == N - 1 and len(rt.failures) == 1
            ok = ok and f"{N} tasks: {N - 1} succeeded, 1 failed" in rt.summary()
    stats = comm.bcast(ex.stats if comm.rank == 0 else None)
    if ok:
        ok = stats["tasks"] == N and stats["array_tasks"] == N
        ok = ok and stats["array_entries"] <= N // 2
        msg = f"stats {stats}"
    assert_all(comm, ok, msg)


def test_a_timeout_fails_its_item_only():
    # At -n 1 the root runs timed tasks in an isolated runner forked by its dispatcher
    # thread (workflows/isolate.py), which dies with that thread: a later executor
    # forks a new one (the first task after it must not fail as TaskCrashed).
    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, "nodes") as ex:
        if ex is not None:
            n = 24 * max(1, ex.workers)
            futures = foreach(maybe_hang, range(n))
            errs = [f.exception(timeout=120) for f in futures]
            bad = [i for i, e in enumerate(errs) if e is not None]
            ok = bad == [5] and isinstance(errs[5], TaskTimeout)
            ok = ok and "timeout of 0.5 s" in str(errs[5])
            msg = f"failed {bad}: {[repr(errs[i]) for i in bad]}"
            ok = ok and [f.result() for i, f in enumerate(futures) if i != 5] == [
                i for i in range(n) if i != 5]
            ok = ok and ex.runtime.launched == n and not ex.lost_workers
    stats = comm.bcast(ex.stats if comm.rank == 0 else None)
    ok = ok and stats["array_tasks"] == stats["tasks"]
    assert_all(comm, ok, msg or f"stats {stats}")


@pytest.mark.parametrize("dispatch", ["central", "nodes"])
def test_arrayed_and_dependent_tasks_mix(dispatch):
    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, dispatch) as ex:
        if ex is not None:
            first = foreach(plus, range(400), y=1)  # arrayed: shares one kwargs dict
            # Items that are futures wait for their own input (not arrayed); the ready
            # values among them are arrayed together.
            mixed = [first[i] if i % 3 == 0 else i for i in range(400)]
            second = foreach(plus, mixed, y=10)
            later = foreach(plus, second)  # every item a future: one by one
            want = [(i + 1 if i % 3 == 0 else i) + 10 for i in range(400)]
            got = [f.result(timeout=120) for f in later]
            ok = got == want
            msg = f"first wrong at {next((i for i in range(400) if got[i] != want[i]), None)}"
    stats = comm.bcast(ex.stats if comm.rank == 0 else None)
    ready = 400 + sum(1 for i in range(400) if i % 3)
    ok = ok and stats["tasks"] == 1200 and stats["array_tasks"] == ready
    assert_all(comm, ok, msg or f"stats {stats}")


@pytest.mark.parametrize("ordered", [True, False])
def test_reduce_tree_over_arrayed_results(ordered):
    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, "nodes") as ex:
        if ex is not None:
            items = [i for i in range(N) if i != 77]
            total = reduce_tree(add, foreach(square, items), ordered=ordered)
            got = total.result(timeout=300)
            ok = got == sum(i * i for i in items)
            msg = f"sum {got}"
            ok = ok and ex.runtime.launched == 2 * len(items) - 1
    stats = comm.bcast(ex.stats if comm.rank == 0 else None)
    ok = ok and stats["array_tasks"] == N - 1
    assert_all(comm, ok, msg or f"stats {stats}")


def test_arrays_off_sends_one_entry_per_task(monkeypatch):
    comm = _comm()
    monkeypatch.setenv("WORKFLOWS_MPI_ARRAYS", "0")
    ok = True
    with _executor(comm, "central") as ex:
        if ex is not None:
            ok = [f.result(timeout=120) for f in foreach(plus, range(500))] == list(range(500))
    stats = comm.bcast(ex.stats if comm.rank == 0 else None)
    ok = ok and stats["array_tasks"] == 0 and stats["tasks"] == 500
    assert_all(comm, ok, f"stats {stats}")


def test_an_item_that_does_not_pickle_fails_alone():
    import threading

    comm = _comm()
    ok, msg = True, ""
    with _executor(comm, "central") as ex:
        if ex is not None:
            items = list(range(200))
            items[50] = threading.Lock()  # does not pickle
            futures = foreach(plus, items)
            errs = [f.exception(timeout=120) for f in futures]
            bad = [i for i, e in enumerate(errs) if e is not None]
            ok = bad == [50] and "pickle" in str(errs[50])
            msg = f"failed {bad}: {errs[50]!r}"
            ok = ok and [f.result() for i, f in enumerate(futures) if i != 50] == [
                i for i in range(200) if i != 50]
    assert_all(comm, ok, msg)
