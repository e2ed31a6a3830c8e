"""The one role rule (core.mpi.roles.serve_nodes), and the two loops' roles derived from it."""
import random

import pytest

from core.mpi.roles import Roles, serve_nodes, workers_of
from streams.job.roles import assign_roles
from workflows.executors.mpi.roles import plan_roles


def test_first_ranks_of_each_node_serve_and_workers_are_dealt_round_robin():
    s = serve_nodes([0, 0, 0, 0, 0, 1, 1, 1], per_node=2)
    assert s == (0, 1, 0, 1, 0, 5, 6, 5)
    assert workers_of(s, 0) == (2, 4) and workers_of(s, 1) == (3,)
    assert workers_of(s, 5) == (7,) and workers_of(s, 6) == ()


def test_a_node_without_spare_rank_serves_itself_or_is_left_to_the_caller():
    assert serve_nodes([0, 1, 1]) == (0, 1, 1)
    assert serve_nodes([0, 1, 1], lone="work") == (-1, 1, 1)
    # ``first`` serves its node even alone, and ahead of lower ranks of its node
    assert serve_nodes([0, 1, 1], lone="work", first=0) == (0, 1, 1)
    assert serve_nodes([0, 0, 0], first=1) == (1, 1, 1)
    with pytest.raises(ValueError, match="2 receivers per node, but node 1 has only 1 rank"):
        serve_nodes([0, 0, 1], per_node=2, what="receivers")
    with pytest.raises(ValueError, match="per node must be a positive integer"):
        serve_nodes([0], per_node=0)
    with pytest.raises(ValueError, match="lone"):
        serve_nodes([0], lone="idle")


@pytest.mark.parametrize("seed", range(20))
def test_every_worker_is_served_on_its_own_node_evenly(seed):
    rng = random.Random(seed)
    per = rng.randint(1, 3)
    node_of = [rng.randrange(5) for _ in range(rng.randint(1, 24))]   # nodes interleaved too
    nodes = sorted(set(node_of))
    if min(node_of.count(n) for n in nodes) < per:
        with pytest.raises(ValueError, match="rank"):
            serve_nodes(node_of, per)
        return
    s = serve_nodes(node_of, per)
    for n in nodes:
        ranks = [r for r, k in enumerate(node_of) if k == n]
        mine = [r for r in ranks if s[r] == r]
        assert mine == ranks[:per]
        loads = [len(workers_of(s, r)) for r in mine]
        assert sum(loads) == len(ranks) - per and max(loads) - min(loads) <= 1
    for r, srv in enumerate(s):
        assert node_of[srv] == node_of[r]


def test_both_loops_take_their_roles_from_the_rule():
    node_of = [0, 0, 0, 1, 1, 2]
    stream = assign_roles(node_of, 1)
    rule = serve_nodes(node_of, 1)
    assert stream.servers == (0, 3, 5) and stream.server_of == rule
    assert [stream.workers_of(r) for r in stream.servers] == [workers_of(rule, r)
                                                              for r in stream.servers]
    tasks = plan_roles(node_of, ["a", "b", "c"], 0, "nodes")
    assert tasks.servers == (0, 3)                 # node 2's lone rank: a worker of the root
    assert tasks.workers_of(0) == (1, 2, 5) and tasks.workers_of(3) == (4,)
    assert tasks.server_of == (0, 0, 0, 3, 3, 0)   # a serving rank serves itself
    # receivers are numbered in rank order, also when a node's ranks are not contiguous
    assert assign_roles([0, 1, 0, 1], 1).servers == (0, 1)


def test_one_roles_class_for_both_loops():
    stream, tasks = assign_roles([0, 0, 1], 1), plan_roles([0, 0, 1, 1], ["a", "b"], 1, "nodes")
    assert type(stream) is type(tasks) is Roles
    assert stream.root is None and tasks.root == 1 and tasks.servers == (1, 2)
    assert [tasks.role(r) for r in range(4)] == ["worker", "root", "server", "worker"]
    assert [tasks.index(r) for r in range(4)] == [None, 0, 1, None]
    assert stream.describe("receiver") == ("receiver 0: rank 0 (node 0), workers [1]; "
                                           "receiver 1: rank 2 (node 1), workers none")
