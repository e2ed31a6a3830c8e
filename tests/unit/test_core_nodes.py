"""Node assignment rules (pure, no MPI)."""
import pytest

from core.errors import JobError
from core.nodes import assign_nodes, check_node_name, emulated_ids


@pytest.mark.parametrize("size", range(1, 9))
def test_emulated_blocks_are_contiguous_and_balanced(size):
    for k in range(1, size + 1):
        ids = emulated_ids(size, k)
        idx = [int(i[4:]) for i in ids]
        assert idx == sorted(idx) and set(idx) == set(range(k))
        counts = [idx.count(i) for i in range(k)]
        assert max(counts) - min(counts) <= 1


def test_emulated_examples():
    assert emulated_ids(4, 2) == ["node0", "node0", "node1", "node1"]
    assert emulated_ids(3, 2) == ["node0", "node1", "node1"]
    assert emulated_ids(4, 4) == ["node0", "node1", "node2", "node3"]


@pytest.mark.parametrize("k", [0, 5, -1, 2.0, True, "2"])
def test_emulated_rejects_bad_counts(k):
    with pytest.raises(ValueError, match="emulated nodes must be an integer"):
        emulated_ids(4, k)


def test_assign_nodes_orders_by_lowest_rank_and_picks_leaders():
    idx, names, leaders = assign_nodes(["b", "a", "b", "c", "a"])
    assert names == ["b", "a", "c"]
    assert idx == [0, 1, 0, 2, 1]
    assert leaders == [0, 1, 3]


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "x\x00"])
def test_node_names_must_be_path_components(bad):
    with pytest.raises(JobError, match="directory name"):
        check_node_name(bad)
    assert check_node_name("node-1.cluster") == "node-1.cluster"
