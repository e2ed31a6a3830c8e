"""The project's tag table and the workers' credits (core.mpi.link), without MPI."""
from core.mpi.link import TAGS, Credits


def test_every_tag_number_is_unique_across_loops():
    numbers = [n for loop in TAGS.values() for n in loop.values()]
    assert len(numbers) == len(set(numbers)), numbers
    assert all(isinstance(n, int) and 0 <= n < 32767 for n in numbers)   # MPI_TAG_UB >= 32767


def test_both_loops_take_their_tags_from_the_table():
    from streams.job import ranks
    from workflows.executors.mpi import wire

    assert ranks.TAGS is TAGS["stream"]
    assert {ranks.TAG_WORK, ranks.TAG_ACK, ranks.TAG_LIVE, ranks.TAG_CTRL, ranks.TAG_SHARE,
            ranks.TAG_ABORT, ranks.TAG_FIN, ranks.TAG_FRAME} == set(TAGS["stream"].values())
    assert {name: getattr(wire, name) for name in wire.__all__} == TAGS["executor"]


def test_credits_bound_each_worker_and_go_first_to_who_freed_a_place_first():
    c = Credits((5, 6), 2)
    taken = [c.take() for _ in range(5)]
    assert taken == [5, 6, 5, 6, None]          # two each, then none free
    c.grant(6)
    c.grant(5)
    assert c.take() == 6                        # 6 returned first
    c.give_back([6])
    assert list(c) == [6, 5]
    c.drop(6)
    assert list(c) == [5] and len(c) == 1
