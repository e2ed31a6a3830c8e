"""``readall``: the paper's method, kept as the reference.

Every leader opens each large file with ``MPI_File_open`` on the leader
communicator and reads every chunk with ``MPI_File_read_at_all`` of the *same*
range, as Swift/T's ``turbine_io_copy_to`` does; whether the MPI-IO layer
de-duplicates those identical reads is up to the implementation (this
machine's default OMPIO does not, ROMIO does), which is exactly what the
report's amplification measures. Each leader hashes the chunk it read; the
digests are compared across leaders, so every writer checks what it wrote
against what the others read.

Small files use the same batches as ``stripe`` (one collective ``open`` per
4 KiB file would be the 10,000-round problem the batching exists to avoid).
Before each collective open every leader opens the file with POSIX and the
leaders agree, so a missing or unreadable file fails on all of them instead
of inside MPI-IO.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from core.checksum import digest
from stager.errors import TransferError
from core.mpi.agree import any_true
from core import interrupt
from stager.staging.transfer.sink import Sink
from stager.staging.transfer.source import SourceReader
from stager.staging.transfer.tasks import chunk_ranges

__all__ = ["run_readall"]


def run_readall(comm: Any, large: Sequence[int], reader: SourceReader, sink: Sink,
                chunk_size: int) -> Optional[BaseException]:
    """Collective over `comm` (the leader communicator): every leader must call.

    Moves the files whose indices are in ``large`` (identical on all leaders).
    Returns this rank's own failure or ``None``; on any failure every leader
    stops at the same point.
    """
    from mpi4py import MPI

    error: Optional[BaseException] = None

    def failed_after(step: Callable[..., Any], *args: Any) -> bool:
        """Collective: run ``step(*args)`` unless this leader failed already; has any?"""
        nonlocal error
        if error is None:
            try:
                step(*args)
            except Exception as e:
                error = e
        return any_true(comm, error is not None)

    sink.share_checksums(0, 1)  # every leader read the whole file: each hashes its own copy
    buf = bytearray(max(1, chunk_size))
    view = memoryview(buf)
    for i in large:
        job = reader.jobs[i]
        if failed_after(reader.open_check, i):  # POSIX open + planned size/mtime check
            break
        fh = MPI.File.Open(comm, job.source, MPI.MODE_RDONLY)
        try:
            for off, length in chunk_ranges(job.size, chunk_size):
                if failed_after(interrupt.check):
                    break
                v = view[:length]
                with reader.metered():
                    fh.Read_at_all(off, [v, length, MPI.BYTE])
                d = digest(v)
                digests = comm.allgather(d if error is None else None)
                if error is None and any(x != d for x in digests if x is not None):
                    error = TransferError(f"leaders read different bytes from {job.source} at "
                                          f"offset {off}; the source changed while being staged")
                if failed_after(sink.write, i, off, v):
                    break
        finally:
            fh.Close()
        if failed_after(reader.close, i):
            break
    reader.close_all(check=False)
    return error
