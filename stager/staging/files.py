"""The ``files`` kind: whole files, moved by a transfer method over the leader communicator.

Methods (:mod:`stager.staging.transfer`): ``stripe`` (default), ``readall``
(the paper's), ``bcast``, ``naive``. Each reads every planned byte from the
shared filesystem (once, except ``naive`` and ``readall`` under OMPIO),
checks every piece against the digest its reader computed, and commits each
file atomically on every node that needs it.
"""
from __future__ import annotations

from stager.staging.kind import Moved, Transfer
from stager.staging.transfer import FileJob, Sink, SourceReader, run_method

__all__ = ["FilesKind"]


class FilesKind:
    """Whole files (``files`` blocks)."""

    name = "files"
    what = "the files"

    def check(self, node: str) -> None:
        return None

    def transfer(self, t: Transfer) -> Moved:
        """Collective over ``t.comm`` (except ``naive``): move the files, return what was done."""
        units = t.units
        jobs = [FileJob(units[i].source, units[i].size, units[i].mtime_ns, units[i].mode,
                        units[i].ctime_ns, units[i].ino) for i in t.moved]
        sink = Sink(jobs, t.dests, progress=t.progress, fsync=t.opts.fsync)
        reader = SourceReader(jobs, t.meter)
        err = None
        info: dict = {}
        try:
            err = run_method(t.opts.method, t.comm, jobs, reader, sink, t.opts.chunk_size,
                             t.opts.small_file_threshold, t.opts.shared_exchange, info)
        except Exception as e:
            err = e
        finally:
            sink.abort()
        done = {k: (digest, jobs[k].size) for k, digest in sink.done.items()}
        return Moved(done=done, error=err, bytes_written=sink.bytes_written, extra=info)
