"""stager.mpi.link.Link on a real communicator: arrays round trip, a foreign tag is named."""
import numpy as np
import pytest

from stager.mpi.link import TAGS, Link
from tests.mpiutil import assert_all

pytestmark = pytest.mark.mpi


def test_link_round_trip_and_foreign_tag():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        link = Link(comm, "stream")
        rank, size = comm.rank, comm.size
        data = np.arange(1000, dtype=np.uint16).reshape(10, 100) + rank
        link.send((rank + 1) % size, TAGS["stream"]["WORK"], ("part", data))
        got = None
        while got is None:
            got = link.poll()
        src, tag, (kind, arr) = got
        ok = (src == (rank - 1) % size and tag == TAGS["stream"]["WORK"] and kind == "part"
              and np.array_equal(arr, np.arange(1000, dtype=np.uint16).reshape(10, 100) + src))
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
