"""The reading side of a transfer: source files opened once, checked, metered.

Every source read goes through :class:`SourceReader`, which

* opens a file at most once per rank and checks at open that it still has the
  planned identity -- size, mtime, ctime and inode ("changed since planning") --
  and again at close, right after this rank's last piece of it
  ("changed while being staged"): a rewrite that restores the size and the mtime
  still moves the ctime, and a file replaced by another has another inode;
* reads with ``preadv`` straight into the task buffer (no copy), failing on a
  short read (the file shrank);
* counts the bytes with :class:`~stager.staging.report.SourceMeter` (callers wrap
  their read loops in :meth:`SourceReader.metered`), around source reads only.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

from stager.errors import TransferError
from stager.planning.plan import FileEntry
from stager.planning.sources import changed
from stager.staging.report import SourceMeter

__all__ = ["SourceReader", "changed_error"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_CHECK_OPEN = 1 << 20  # files larger than this are also checked when opened


def changed_error(job: FileEntry, st: os.stat_result, when: str) -> Optional[TransferError]:
    """An error if ``st`` differs from the plan (size, mtime, ctime, inode), else ``None``."""
    diff = changed((job.size, job.mtime_ns, job.ctime_ns, job.ino), st)
    if diff is None:
        return None
    return TransferError(f"source {job.source} changed {when} ({diff}); stage again once the "
                         "data is complete")


class SourceReader:
    """Open-once, checked, metered reads of the planned source files.

    Keeps a few files open (a large file is read chunk by chunk across tasks);
    :meth:`close_before` closes those a caller is done with.
    """

    def __init__(self, jobs: Sequence[FileEntry], meter: SourceMeter) -> None:
        self.jobs = jobs
        self.meter = meter
        self._fds: Dict[int, int] = {}

    def _fd(self, i: int) -> int:
        fd = self._fds.get(i)
        if fd is None:
            job = self.jobs[i]
            try:
                fd = os.open(job.source, os.O_RDONLY | _CLOEXEC)
            except OSError as e:
                raise TransferError(f"cannot read source {job.source}: {e.strerror}; "
                                    "check that it exists and is readable by you") from e
            # small files are read in one call and checked once, at close; large ones
            # are checked before their many chunks are read as well
            err = changed_error(job, os.fstat(fd), "since planning") if job.size > _CHECK_OPEN \
                else None
            if err is not None:
                os.close(fd)
                raise err
            self._fds[i] = fd
        return fd

    def read_into(self, i: int, offset: int, view: memoryview) -> None:
        """Fill ``view`` with the bytes of file ``i`` at ``offset`` (not metered: see
        :meth:`metered`)."""
        fd = self._fd(i)
        done = 0
        while done < len(view):
            try:
                n = os.preadv(fd, [view[done:]], offset + done)
            except OSError as e:
                raise TransferError(f"reading source {self.jobs[i].source} at byte "
                                    f"{offset + done} failed: {e.strerror}") from e
            if n == 0:
                raise TransferError(
                    f"source {self.jobs[i].source} is shorter than planned "
                    f"({offset + done} < {self.jobs[i].size} bytes); it changed "
                    "while being staged, stage again")
            done += n

    def metered(self) -> SourceMeter:
        """Context manager counting source bytes read inside it.

        Wrap whole loops of :meth:`read_into` calls: sampling ``/proc/self/io``
        costs two reads of it, too much per 4 KiB file. Nothing else may read
        inside the block (opening and ``fstat`` do not count as reads).
        """
        return self.meter

    def open_check(self, i: int) -> None:
        """Open file ``i`` now (to surface open errors early)."""
        self._fd(i)

    def close(self, i: int) -> None:
        """Close file ``i``, checking it did not change while being read."""
        fd = self._fds.pop(i, None)
        if fd is None:
            return
        try:
            err = changed_error(self.jobs[i], os.fstat(fd), "while being staged")
        finally:
            os.close(fd)
        if err is not None:
            raise err

    def close_before(self, i: int) -> None:
        """Close (with checks) every open file with index below ``i``."""
        for j in sorted(k for k in self._fds if k < i):
            self.close(j)

    def close_all(self, check: bool = True) -> None:
        for j in sorted(self._fds):
            if check:
                self.close(j)
            else:
                os.close(self._fds.pop(j))
