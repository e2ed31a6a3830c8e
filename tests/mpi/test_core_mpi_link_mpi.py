"""core.mpi.link.Link on a real communicator: arrays round trip (large ones out of band), a
foreign tag is named."""
import numpy as np
import pytest

from core.mpi.link import OUT_OF_BAND, TAGS, Link
from tests.mpiutil import assert_all

pytestmark = pytest.mark.mpi


def test_link_round_trip_and_foreign_tag():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        link = Link(comm, "stream")
        assert OUT_OF_BAND <= 200_000   # the large arrays below go apart
        rank, size = comm.rank, comm.size

        def parts(r):   # two arrays out of band (>= OUT_OF_BAND bytes), one inside
            big = np.arange(100_000, dtype=np.uint16).reshape(100, 1000) + r
            return [big, np.arange(10) + r, np.full((300, 300), r, np.float64)]

        link.send((rank + 1) % size, TAGS["stream"]["WORK"], ("part", parts(rank)))
        apart = link.unsent == 3    # the message and its two large arrays, each sent alone
        got = None
        while got is None:
            got = link.poll()
        src, tag, (kind, arrays) = got
        ok = (apart and src == (rank - 1) % size and tag == TAGS["stream"]["WORK"]
              and kind == "part" and all(np.array_equal(a, b) and a.flags.writeable
                      for a, b in zip(arrays, parts(src))))
        ok = ok and link.flush(10.0) and link.unsent == 0 and link.sent == link.received == 1
        # a tag of another loop reaching this one is an error naming rank, source and tag
        link.send(rank, TAGS["executor"]["TASKS"], None)
        err = ""
        try:
            while link.poll() is None:
                pass
        except RuntimeError as e:
            err = str(e)
        link.flush(10.0)
        ok = ok and f"rank {rank}: unexpected message tag 1 from rank {rank}" in err
        assert_all(comm, ok, f"rank {rank}: round trip or tag check failed ({err!r})")
    finally:
        comm.Free()


def test_loop_hands_each_message_to_its_handler_until_over(capfd):
    from mpi4py import MPI

    from core.mpi.loop import Loop

    class Echo(Loop):
        def __init__(self, link):
            super().__init__(link)
            self.got = []

        def recv_work(self, src, payload):
            self.got.append((src, payload))

        def recv_fin(self, src, payload):
            self.over = True

    comm = MPI.COMM_WORLD.Dup()
    try:
        rank, size = comm.rank, comm.size
        link, tags = Link(comm, "stream"), TAGS["stream"]
        loop = Echo(link)
        nxt, prev = (rank + 1) % size, (rank - 1) % size
        for tag, payload in [("WORK", "a"), ("ACK", 1), ("ACK", 2), ("WORK", "b"), ("FIN", None)]:
            link.send(nxt, tags[tag], payload)   # ACK: no handler on this loop
        loop.run()
        ok = link.flush(10.0) and loop.got == [(prev, "a"), (prev, "b")]
        err = capfd.readouterr().err
        said = f"dropped an unexpected message (tag ACK from rank {prev})"
        ok = ok and err.count(said) == 1 and f"rank {rank} of the stream loop" in err
        assert_all(comm, ok, f"rank {rank}: got {loop.got}, stderr {err!r}")
    finally:
        comm.Free()


def test_out_of_band_buffers_reused_only_when_unheld():
    """A worker's next partition lands in the buffer of the last one it let go of (no new
    allocation), never in one an array still views, nor twice in one message."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        link, work = Link(comm, "stream"), TAGS["stream"]["WORK"]
        rank, size = comm.rank, comm.size

        def part(i):
            return np.full((200, 1000), i, np.uint16)

        def one(obj):
            link.send((rank + 1) % size, work, obj)
            got = None
            while got is None:
                got = link.poll()
            return got[2]

        def owner(a):     # the bytearray an unpickled array's memory is
            while not isinstance(a, memoryview):
                a = a.base
            return a.obj

        a = one(part(1))
        held = a[10:20]                   # a view kept, as an analysis might
        del a
        b = one(part(2))
        of_b = owner(b)
        del b                             # let go of
        c = one(part(3))
        x, y = one((part(4), part(5)))    # two of the same size in one message
        ok = (np.all(held == 1) and np.all(c == 3) and np.all(x == 4) and np.all(y == 5)
              and owner(c) is of_b and owner(held) is not of_b
              and len({id(owner(v)) for v in (held, c, x, y)}) == 4)
        ok = ok and link.flush(10.0)
        assert_all(comm, ok, f"rank {rank}: a held buffer was reused, or none was")
    finally:
        comm.Free()
