"""foreach and reduce_tree: order, completion-order merging, size, failures (serial)."""
from __future__ import annotations

import random
import time

import pytest

from workflows import DependencyFailure, app, executors, foreach, reduce_tree


@app
def leaf(i, delay=0.0):
    time.sleep(delay)
    return [i]


@app
def concat(a, b):
    """Associative, not commutative."""
    return a + b


@app
def plus(a, b):
    return a + b


@app
def fail_on(i, bad):
    if i == bad:
        raise RuntimeError(f"leaf {i} is broken")
    return [i]


@pytest.fixture(params=["inline", "local"])
def executor(request):
    options = {"max_workers": 2} if request.param == "local" else {}
    with executors.make(request.param, **options) as ex:
        yield ex


def test_foreach_returns_futures_in_order(executor):
    futures = foreach(leaf, range(7))
    assert [f.result() for f in futures] == [[i] for i in range(7)]


def test_foreach_extra_arguments(executor):
    assert [f.result() for f in foreach(plus, [1, 2, 3], 10)] == [11, 12, 13]


def test_ordered_reduce_keeps_order_with_uneven_task_times(executor):
    rng = random.Random(4)
    # Later leaves finish first: completion order is not input order.
    leaves = [leaf(i, rng.choice([0.0, 0.02]) if i < 6 else 0.0) for i in range(11)]
    assert reduce_tree(concat, leaves, ordered=True).result() == list(range(11))


def test_unordered_reduce_merges_in_completion_order():
    with executors.make("local", max_workers=2):
        # Leaf 0 finishes last; the unordered tree merges the others first.
        leaves = [leaf(0, 0.6)] + [leaf(i) for i in range(1, 6)]
        merged = reduce_tree(concat, leaves, ordered=False).result()
        ordered = reduce_tree(concat, leaves, ordered=True).result()
    assert sorted(merged) == list(range(6))
    assert merged != list(range(6)), "unordered reduce waited for the slow leaf"
    assert ordered == list(range(6))


def test_unordered_reduce_commutative_sum(executor):
    values = list(range(1, 101))
    assert reduce_tree(plus, values, ordered=False).result() == 5050


def test_reduce_counts_n_minus_1_merges(executor):
    before = executor.runtime.launched
    launched = {True: [], False: []}
    for ordered in (False, True):
        reduce_tree(plus, list(range(37)), ordered=ordered, launched=launched[ordered]).result()
    executor.runtime.wait()
    assert executor.runtime.launched - before == 2 * 36
    # launched= hands back every merge's future (the reduce phase of a run record)
    for ordered, futures in launched.items():
        assert len(futures) == 36 and all(f.done() for f in futures), ordered
        assert max(f.result() for f in futures) == sum(range(37))


def test_single_item_and_empty():
    with executors.make("inline"):
        assert reduce_tree(plus, [5]).result() == 5
        assert reduce_tree(plus, [leaf(3)]).result() == [3]
        with pytest.raises(ValueError, match="at least one"):
            reduce_tree(plus, [])


def test_ten_thousand_leaves():
    with executors.make("inline"):
        for ordered in (True, False):
            assert reduce_tree(plus, list(range(10_000)), ordered=ordered).result() == 49_995_000


@pytest.mark.parametrize("ordered", [True, False])
def test_reduce_fails_when_a_leaf_fails(executor, ordered):
    leaves = foreach(fail_on, range(9), 4)
    err = reduce_tree(concat, leaves, ordered=ordered).exception(timeout=60)
    assert isinstance(err, DependencyFailure)
    assert "leaf 4 is broken" in str(err)


@pytest.mark.parametrize("ordered", [True, False])
def test_cancelled_input_fails_dependents_instead_of_hanging(ordered):
    # Future.exception() raises on a cancelled future; inside a done-callback that
    # was swallowed and the dependent task stayed pending, so `with ex:` never left.
    from concurrent.futures import CancelledError, Future

    with executors.make("inline") as ex:
        cut = Future()
        direct = plus(cut, 1)
        total = reduce_tree(plus, [leaf(1), cut, leaf(2)], ordered=ordered)
        assert cut.cancel()
        assert ex.runtime.wait(timeout=30), "a task waiting on a cancelled input never finished"
    with pytest.raises(DependencyFailure) as info:
        direct.result(timeout=0)
    assert isinstance(info.value.root, CancelledError)
    with pytest.raises(DependencyFailure):
        total.result(timeout=0)


def test_trampoline_runs_queued_steps_after_one_raises():
    from workflows.futures import trampoline

    ran = []

    def bad():
        trampoline(lambda: ran.append("queued"))
        raise RuntimeError("step failed")

    with pytest.raises(RuntimeError, match="step failed"):
        trampoline(bad)
    assert ran == ["queued"]
