"""The mpi executor's pure parts: a task server's backlog rules and the dispatch roles (no MPI)."""
from __future__ import annotations

import pytest

from workflows.executors.mpi.queues import Entry, TaskQueue, guided_chunk
from workflows.executors.mpi.roles import plan_roles


def entry(tid, node=-1, hard=False, timeout=None):
    return Entry(tid, f"t#{tid}", node, hard, timeout, None, b"")


def tids(entries):
    return [e.tid for e in entries]


def test_guided_chunk():
    assert guided_chunk(0, 3, 64) == 0
    assert guided_chunk(1, 3, 64) == 1
    assert guided_chunk(20000, 3, 64) == 64
    assert guided_chunk(60, 3, 64) == 10
    assert guided_chunk(5, 3, 64) == 1


def test_worker_takes_own_hard_then_soft_then_free_then_others_soft():
    q = TaskQueue()
    q.extend([entry(1), entry(2, node=1), entry(3, node=0, hard=True), entry(4, node=0),
              entry(5, node=1, hard=True), entry(6)])
    assert len(q) == 6 and q.stealable == 4
    assert q.available(0) == 1 + 4
    assert tids(q.take(0, 10)) == [3, 4, 1, 6, 2]  # never node 1's hard task
    assert len(q) == 1 and tids(q.take(1, 10)) == [5]
    assert not q


def test_no_other_nodes_soft_tasks_when_asked_not_to():
    q = TaskQueue()
    q.extend([entry(1, node=1), entry(2)])
    assert tids(q.take(0, 10, elsewhere=False)) == [2]
    assert tids(q.take(1, 10)) == [1]


def test_timed_task_travels_alone():
    q = TaskQueue()
    q.extend([entry(1), entry(2, timeout=5.0), entry(3), entry(4)])
    assert tids(q.take(0, 10)) == [1]
    assert tids(q.take(0, 10)) == [2]
    assert tids(q.take(0, 10)) == [3, 4]


def test_steal_half_newest_first_never_hard():
    q = TaskQueue()
    q.extend([entry(i) for i in range(1, 7)] + [entry(7, node=2), entry(8, node=2, hard=True)])
    stolen = q.steal(100)
    assert tids(stolen) == [6, 5, 4, 3]  # half of 7 stealable, rounded up; free first
    assert tids(q.steal(100)) == [2, 1]
    assert tids(q.steal(100)) == [7]  # soft-placed tasks go once nothing free is left
    assert q.steal(100) == [] and len(q) == 1  # the hard task stays
    assert tids(q.take_free(5)) == [] and tids(q.drain()) == [8] and not q


def test_take_free_is_fifo_and_bounded():
    q = TaskQueue()
    q.extend([entry(i) for i in range(5)] + [entry(9, node=0)])
    assert tids(q.take_free(3)) == [0, 1, 2]
    assert len(q) == 3


def test_roles_central():
    r = plan_roles([0, 0, 1, 1], ["a", "b"], 0, "central")
    assert r.servers == (0,) and r.workers == (1, 2, 3)
    assert r.role(0) == "root" and r.role(2) == "worker"
    assert r.server_of_node() == {0: 0, 1: 0}


def test_roles_nodes():
    # node0 = {0, 1} (root serves 1), node1 = {2, 3} (2 serves 3), node2 = {4} (single rank:
    # a worker served by the root), node3 = {5, 6, 7} (5 serves 6, 7)
    r = plan_roles([0, 0, 1, 1, 2, 3, 3, 3], [f"n{i}" for i in range(4)], 0, "nodes")
    assert r.servers == (0, 2, 5)
    assert r.workers_of(0) == (1, 4) and r.workers_of(2) == (3,) and r.workers_of(5) == (6, 7)
    assert r.role(5) == "server" and r.role(4) == "worker"
    assert r.server_of_node() == {0: 0, 1: 2, 2: 0, 3: 5}
    assert r.nodes_with_workers() == [0, 1, 2, 3]


def test_roles_root_alone_on_its_node_and_one_rank():
    r = plan_roles([0, 1, 1], ["a", "b"], 0, "nodes")
    assert r.servers == (0, 1) and r.workers == (2,) and r.nodes_with_workers() == [1]
    one = plan_roles([0], ["a"], 0, "nodes")
    assert one.workers == () and one.servers == (0,)


def test_roles_validation():
    with pytest.raises(ValueError, match="dispatch mode"):
        plan_roles([0, 0], ["a"], 0, "ring")
    with pytest.raises(ValueError, match="root"):
        plan_roles([0, 0], ["a"], 2, "central")


def test_emulated_roles_match_the_stager_blocks():
    from core.nodes import assign_nodes, name_nodes

    index, names, _ = assign_nodes(name_nodes(8, "emulate:4"))
    r = plan_roles(index, names, 0, "nodes")
    assert r.node_of == (0, 0, 1, 1, 2, 2, 3, 3) and r.names == ("node0", "node1", "node2", "node3")
    assert r.servers == (0, 2, 4, 6) and r.workers == (1, 3, 5, 7)


def test_batches_stop_before_too_many_bytes():
    q = TaskQueue()
    q.extend([Entry(i, "t", -1, False, None, None, b"x" * 100) for i in range(10)])
    assert tids(q.take(0, 10, max_bytes=250)) == [0, 1]
    assert tids(q.take_free(10, max_bytes=250)) == [2, 3]
    assert tids(q.steal(10, max_bytes=250)) == [9, 8]
    big = TaskQueue()
    big.push(Entry(1, "t", -1, False, None, None, b"x" * 1000))
    assert tids(big.take(0, 10, max_bytes=10)) == [1]  # one task always goes, however large


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def delayed(wait=1.0):
    clock = Clock()
    return TaskQueue(wait=wait, clock=clock), clock


def test_soft_task_waits_for_its_node_before_others_take_it():
    q, clock = delayed(1.0)
    q.extend([entry(1, node=1), entry(2, node=1)])
    assert q.available(0) == 0 and q.stealable == 0
    assert q.take(0, 10) == [] and len(q) == 2
    clock.now += 0.999
    assert q.take(0, 10) == [] and q.steal(10) == []
    q.push(entry(3, node=1))  # queued later: its wait starts now
    clock.now += 0.001  # 1 and 2 waited 1 s: ripe; 3 not
    assert q.available(0) == 2 and q.stealable == 2
    assert tids(q.take(0, 10)) == [1, 2]
    assert q.take(0, 10) == []
    assert tids(q.take(1, 10)) == [3]  # its own node never waits
    assert not q


def test_own_node_takes_soft_tasks_at_once_and_free_tasks_never_wait():
    q, clock = delayed(5.0)
    q.extend([entry(1, node=0), entry(2), entry(3, node=1)])
    assert q.available(0) == 2 and q.available(1) == 2
    assert tids(q.take(0, 10)) == [1, 2]
    assert tids(q.take(1, 10)) == [3]


def test_hard_tasks_never_move_whatever_the_wait():
    q, clock = delayed(1.0)
    q.extend([entry(1, node=1, hard=True)])
    clock.now += 1e6
    assert q.take(0, 10) == [] and q.steal(10) == [] and q.available(0) == 0
    assert tids(q.take(1, 10)) == [1]


def test_steal_takes_only_ripe_soft_tasks_newest_of_them_first():
    q, clock = delayed(1.0)
    q.extend([entry(i, node=1) for i in (1, 2, 3, 4)])
    clock.now += 0.5
    q.extend([entry(5, node=1), entry(6)])
    assert tids(q.steal(10)) == [6]  # free only: no soft task waited 1 s yet
    clock.now += 0.5  # 1..4 ripe, 5 not
    assert q.stealable == 4
    assert tids(q.steal(10)) == [4, 3]  # half of the ripe ones, the owner keeps its oldest
    assert tids(q.take(1, 10)) == [1, 2, 5]  # order kept for the owner


def test_zero_wait_is_the_old_behaviour():
    q, clock = delayed(0.0)
    q.extend([entry(1, node=1), entry(2, node=1)])
    assert q.available(0) == 2 and tids(q.take(0, 10)) == [1, 2]


def test_no_wait_for_a_node_without_live_workers_here():
    q, clock = delayed(1.0)
    q.served = {0}  # node 1's workers all died (or were never served here)
    q.extend([entry(1, node=1), entry(2, node=0)])
    assert tids(q.take(2, 10)) == [1]  # node 1 has nobody: at once
    assert q.take(2, 10) == []  # node 0 has live workers: 2 waits for them
    clock.now += 1.0
    assert tids(q.take(2, 10)) == [2]


def test_stolen_soft_tasks_arrive_ripe_and_first():
    q, clock = delayed(1.0)
    q.push(entry(1, node=1))
    q.extend([entry(7, node=1), entry(8, node=1)], ripe=True)  # stolen: waited elsewhere
    assert tids(q.take(0, 10)) == [7, 8]  # 1 still waits for node 1
    assert tids(q.take(1, 10)) == [1]
    assert not q


def test_a_timed_or_large_ripe_task_still_ends_a_batch():
    q, clock = delayed(1.0)
    q.extend([entry(1), entry(2, node=1, timeout=5.0), entry(3, node=1)])
    clock.now += 1.0
    assert tids(q.take(0, 10)) == [1]
    assert tids(q.take(0, 10)) == [2]
    assert tids(q.take(0, 10)) == [3] and not q


def test_a_node_working_through_its_queue_keeps_it():
    """The wait restarts when the node's worker takes one of its soft tasks (as Spark's)."""
    q, clock = delayed(1.0)
    q.extend([entry(i, node=1) for i in (1, 2, 3)])
    clock.now += 0.5
    assert tids(q.take(1, 1)) == [1]  # node 1 works on its queue at t = 0.5
    clock.now += 0.6  # 2 and 3 waited 1.1 s, but node 1 took a task 0.6 s ago
    assert q.available(0) == 0 and q.take(0, 10) == [] and q.steal(10) == []
    clock.now += 0.4  # node 1 silent for 1 s: busy; its tasks may move
    assert q.stealable == 2 and tids(q.take(0, 10)) == [2, 3]


def test_locality_wait_option_keyword_then_environment_then_default(monkeypatch):
    from workflows.errors import ExecutorError
    from workflows.executors.mpi import executor as mx

    def wait(value):
        return mx.resolve_options(locality_wait=value)["locality_wait"]

    monkeypatch.delenv(mx.ENV_LOCALITY_WAIT, raising=False)
    assert wait(None) == mx.LOCALITY_WAIT == 1.0
    monkeypatch.setenv(mx.ENV_LOCALITY_WAIT, "0.25")
    assert wait(None) == 0.25
    assert wait(0) == 0.0  # the keyword wins; 0: no delay
    monkeypatch.setenv(mx.ENV_LOCALITY_WAIT, "0")
    assert wait(None) == 0.0
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv(mx.ENV_LOCALITY_WAIT, bad)
        with pytest.raises(ExecutorError, match="MPISTAGE_LOCALITY_WAIT"):
            wait(None)
    monkeypatch.delenv(mx.ENV_LOCALITY_WAIT)
    for bad in (-0.5, True, "soon", float("inf")):
        with pytest.raises(ExecutorError, match="locality_wait"):
            wait(bad)
