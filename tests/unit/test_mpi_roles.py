"""The one role rule (stager.mpi.roles.serve_nodes), and the two loops' roles derived from it."""
import random

import pytest

from stager.mpi.roles import serve_nodes
from streams.job.roles import assign_roles
from workflows.executors.mpi.roles import plan_roles


def test_first_ranks_of_each_node_serve_and_workers_are_dealt_round_robin():
    s = serve_nodes([0, 0, 0, 0, 0, 1, 1, 1], per_node=2)
    assert s.servers == (0, 1, 5, 6)
    assert s.workers_of(0) == (2, 4) and s.workers_of(1) == (3,)
    assert s.workers_of(5) == (7,) and s.workers_of(6) == ()
    assert s.server_of == (0, 1, 0, 1, 0, 5, 6, 5)


def test_a_node_without_spare_rank_serves_itself_or_is_left_to_the_caller():
    assert serve_nodes([0, 1, 1]).server_of == (0, 1, 1)
    assert serve_nodes([0, 1, 1], lone="work").server_of == (-1, 1, 1)
    # ``first`` serves its node even alone, and ahead of lower ranks of its node
    assert serve_nodes([0, 1, 1], lone="work", first=0).servers == (0, 1)
    assert serve_nodes([0, 0, 0], first=1).server_of == (1, 1, 1)
    with pytest.raises(ValueError, match="node 1 has only 1 rank"):
        serve_nodes([0, 0, 1], per_node=2)
    with pytest.raises(ValueError, match="per_node"):
        serve_nodes([0], per_node=0)
    with pytest.raises(ValueError, match="lone"):
        serve_nodes([0], lone="idle")


@pytest.mark.parametrize("seed", range(20))
def test_every_worker_is_served_on_its_own_node_evenly(seed):
    rng = random.Random(seed)
    per = rng.randint(1, 3)
    node_of = sorted(rng.randrange(5) for _ in range(rng.randint(1, 24)))
    nodes = sorted(set(node_of))
    if min(node_of.count(n) for n in nodes) < per:
        return
    s = serve_nodes(node_of, per)
    for n in nodes:
        ranks = [r for r, k in enumerate(node_of) if k == n]
        mine = [r for r in s.servers if node_of[r] == n]
        assert mine == ranks[:per]
        loads = [len(s.workers_of(r)) for r in mine]
        assert sum(loads) == len(ranks) - per and max(loads) - min(loads) <= 1
    for r, srv in enumerate(s.server_of):
        assert node_of[srv] == node_of[r]


def test_both_loops_take_their_roles_from_the_rule():
    node_of = [0, 0, 0, 1, 1, 2]
    stream = assign_roles(node_of, 1)
    rule = serve_nodes(node_of, 1)
    assert stream.receivers == rule.servers
    assert stream.workers == tuple(rule.workers_of(r) for r in rule.servers)
    tasks = plan_roles(node_of, ["a", "b", "c"], 0, "nodes")
    assert tasks.servers == (0, 3)                 # node 2's lone rank: a worker of the root
    assert tasks.workers_of(0) == (1, 2, 5) and tasks.workers_of(3) == (4,)
