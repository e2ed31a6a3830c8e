"""The one message loop's handler table (core.mpi.loop.handlers), without MPI."""
import pytest

from core.mpi.link import TAGS
from core.mpi.loop import handlers


class Server:
    def recv_done(self, src, payload):
        return ("done", src, payload)

    def recv_steal(self, src, payload):
        return ("steal", src, payload)

    def on_close(self, report):   # not a handler: another prefix
        raise AssertionError


def test_handlers_are_found_by_tag_name():
    table = handlers(Server(), "executor")
    tags = TAGS["executor"]
    assert set(table) == {tags["DONE"], tags["STEAL"]}
    assert table[tags["DONE"]](3, "x") == ("done", 3, "x")
    assert table[tags["STEAL"]](4, 2) == ("steal", 4, 2)


def test_a_handler_named_after_no_tag_of_its_loop_is_refused():
    class Typo(Server):
        def recv_dnoe(self, src, payload):
            pass

    with pytest.raises(ValueError, match=r"Typo.recv_dnoe: the executor loop has no tag DNOE"):
        handlers(Typo(), "executor")
    with pytest.raises(ValueError, match="the stream loop has no tag DONE"):
        handlers(Server(), "stream")   # an executor handler in the stream loop
    with pytest.raises(KeyError):
        handlers(Server(), "no-such-loop")


def test_each_stream_role_handles_only_its_own_messages():
    from streams.job.coordinator_loop import CoordinatorLoop
    from streams.job.ranks import WorkerLoop
    from streams.job.receiver_loop import ReceiverLoop

    name = {tag: n for n, tag in TAGS["stream"].items()}

    def handled(cls):   # a role's handler table, read without building its link
        return {name[tag] for tag in handlers(object.__new__(cls), "stream")}

    assert handled(WorkerLoop) == {"WORK", "ABORT", "FIN"}
    assert handled(ReceiverLoop) == {"ACK", "SHARE", "FRAME", "ABORT", "FIN"}
    assert handled(CoordinatorLoop) == handled(ReceiverLoop) | {"LIVE", "CTRL"}
