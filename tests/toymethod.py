"""A toy transfer method, ``relay``: one function plus one row, to prove a method is a plug-in.

The first leader reads each file whole and hands it to the others with one
``bcast`` of the bytes and their digest; every leader that needs the file writes
it through the sink, which checks each copy against that digest and commits it.
Registered with :func:`stager.staging.transfer.register`; nothing else of the
stager is touched. A toy: every file passes through one rank's memory at once.
"""
from __future__ import annotations

from typing import Optional

from core import checksum
from stager.staging.transfer import Moving, register


def relay(m: Moving) -> Optional[BaseException]:
    """Collective over ``m.comm``: rank 0 reads, every leader writes its own copy."""
    m.info["exchange"] = "relay (rank 0 reads, bcast)"
    error: Optional[BaseException] = None
    for i, job in enumerate(m.jobs):
        sent = None
        if m.comm.rank == 0:
            try:
                data = bytearray(job.size)
                m.reader.open_check(i)
                with m.reader.metered():
                    m.reader.read_into(i, 0, memoryview(data))
                m.reader.close(i)
                sent = (bytes(data), checksum.digest(data), None)
            except Exception as e:  # every leader learns it from the same bcast
                sent = (b"", b"", f"{job.source}: {e}")
        data, digest, failed = m.comm.bcast(sent, root=0)
        if failed is not None:
            return error or RuntimeError(f"relay: reading {failed}")
        if error is None:  # a leader whose write failed still takes part in every bcast
            try:
                m.sink.write(i, 0, memoryview(data), digest)
            except Exception as e:
                error = e
    return error


register("relay", relay)
