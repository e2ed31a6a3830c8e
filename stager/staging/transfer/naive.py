"""``naive``: every leader copies every file by itself, with plain POSIX reads.

This is what the original HEDM tasks did (each node's first task copied the
dataset from the parallel filesystem), so it is the baseline of the benchmarks:
N nodes read the source N times, with no MPI communication at all during the
copy. Failures are agreed once, after the loop, by the caller.
"""
from __future__ import annotations

from typing import Optional, Sequence

from core import interrupt
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import chunk_ranges

__all__ = ["run_naive"]


def run_naive(files: Sequence[int], reader: SourceReader, sink: Sink,
              chunk_size: int) -> Optional[BaseException]:
    """Copy files ``files`` to this node (local; no collective). Returns the failure or ``None``."""
    buf = bytearray(max(1, min(chunk_size, max((reader.jobs[i].size for i in files), default=1))))
    view = memoryview(buf)
    try:
        for i in files:
            size = reader.jobs[i].size
            reader.open_check(i)
            for off, length in chunk_ranges(size, chunk_size):
                interrupt.check()  # SIGINT/SIGTERM: stop; the caller agrees on it
                v = view[:length]
                if length:
                    with reader.metered():
                        reader.read_into(i, off, v)
                sink.write(i, off, v)
            reader.close(i)
    except Exception as e:
        reader.close_all(check=False)
        return e
    return None
