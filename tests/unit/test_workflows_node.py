"""Which node a task runs on: the runtime tells it; the stager's naming rule decides."""
import socket

import pytest

from core.nodes import emulated_ids, local_node_name, name_nodes
from workflows import on_this_node, this_node
from workflows import node
from workflows.node import set_node


@pytest.fixture(autouse=True)
def _forget_node():
    set_node(None)
    yield
    set_node(None)


def _node_of_task(_: int) -> str:
    import os

    return f"{this_node()} {os.environ.get('WORKFLOWS_NODE', '-')}"


def test_the_runner_sets_the_node_and_tasks_read_it():
    set_node("node1")
    assert this_node() == "node1"
    assert on_this_node("/x/%n/nf") == "/x/node1/nf"
    assert on_this_node("/x/%n", node="n7") == "/x/n7"
    assert on_this_node("/no/placeholder") == "/no/placeholder"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_get_the_node_from_the_executor_not_the_environment(method, monkeypatch):
    """The local pool's workers, forked or spawned, read the runner's node; no variable
    of the environment carries it (one planted there is ignored)."""
    from workflows.executors.local import LocalExecutor

    monkeypatch.setenv("WORKFLOWS_NODE", "planted")
    set_node("node3")
    ex = LocalExecutor(max_workers=1, start_method=method)
    try:
        assert ex._pool.submit(_node_of_task, 0).result(timeout=120) == "node3 planted"
    finally:
        ex.shutdown()
    assert node._NODE == "node3"


@pytest.fixture
def no_node_env(monkeypatch):
    for var in ("STAGER_NODE_ID", "STAGER_EMULATE_NODES", "STAGER_NODE_ID_ENV",
                "WORKFLOWS_NODE_ID_ENV"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_outside_a_run_the_same_rule_as_the_stager(no_node_env):
    monkeypatch = no_node_env
    assert this_node() == name_nodes(1, "host", [(socket.gethostname(), 0)])[0]
    monkeypatch.setenv("STAGER_NODE_ID", "env:MY_NODE")
    monkeypatch.setenv("MY_NODE", "n7")
    assert this_node() == "n7"
    monkeypatch.delenv("MY_NODE")
    with pytest.raises(Exception, match="MY_NODE"):
        this_node()


def test_the_old_node_variable_is_accepted_with_a_deprecation_warning(no_node_env):
    """``WORKFLOWS_NODE_ID_ENV=VAR`` (before one node-identity variable) means
    ``STAGER_NODE_ID=env:VAR``, saying so; the stager's own variable wins over it."""
    monkeypatch = no_node_env
    monkeypatch.setenv("WORKFLOWS_NODE_ID_ENV", "MY_NODE")
    monkeypatch.setenv("MY_NODE", "n7")
    with pytest.warns(DeprecationWarning, match="STAGER_NODE_ID=env:MY_NODE"):
        assert this_node() == "n7"
    monkeypatch.setenv("STAGER_NODE_ID", "host")
    assert this_node() == name_nodes(1, "host", [(socket.gethostname(), 0)])[0]


def test_one_naming_rule():
    # emulated nodes: contiguous blocks, as the stager splits ranks
    assert name_nodes(4, "emulate:2") == emulated_ids(4, 2) == ["node0", "node0", "node1",
                                                                "node1"]
    # repeated host names in different shared-memory groups stay unique and readable
    assert name_nodes(4, "host", [("h", 0), ("h", 0), ("h", 2), ("g", 3)]) == ["h-0", "h-0",
                                                                                "h-2", "g"]
    assert name_nodes(2, "env:V", ["a", "b"]) == ["a", "b"]
    with pytest.raises(Exception, match="V is unset"):
        name_nodes(2, "env:V", ["a", ""])
    with pytest.raises(ValueError, match="expected 2 values"):
        name_nodes(2, "host")
    # one process with more emulated nodes than ranks is an error, as for the stager
    with pytest.raises(ValueError, match="emulated nodes must be an integer in 1..1"):
        local_node_name("emulate:2")
    assert local_node_name("emulate:1") == "node0"
    assert local_node_name("env:V", env={"V": "n3"}) == "n3"
