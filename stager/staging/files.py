"""The ``files`` kind: whole files, moved by a transfer method over the leader communicator.

Methods (:mod:`stager.staging.transfer`): ``stripe`` (default), ``readall``
(the paper's), ``bcast``, ``naive``. Each reads every planned byte from the
shared filesystem (once, except ``naive`` and ``readall`` under OMPIO),
checks every piece against the digest its reader computed, and commits each
file atomically on every node that needs it.
"""
from __future__ import annotations

from typing import List

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
        """Collective over ``t.comm`` (except ``naive``): move the files, return what was done.

        Files of ``scatter`` blocks held by one node (``t.alone``) are read by that
        node's leader itself, after the collective part: each byte is still read once,
        and no other leader receives it. The rest (broadcast files, and scatter files
        with several replicas: read once, written by their holders) go through the
        chosen method.
        """
        alone = t.alone or [False] * len(t.moved)
        shared = [k for k in range(len(t.moved)) if not alone[k]]
        local = [k for k in range(len(t.moved)) if alone[k]]
        out = Moved()
        if shared:  # identical on every leader: the plan decides
            self._move(t, shared, t.opts.method, out)
        if local and out.error is None:
            # a local step: its failure is agreed by the pipeline after the kind returns
            self._move(t, [k for k in local if t.dests[k] is not None], "naive", out)
        return out

    def _move(self, t: Transfer, which: List[int], method: str, out: Moved) -> None:
        units = t.units
        jobs = [FileJob(units[t.moved[k]].source, units[t.moved[k]].size,
                        units[t.moved[k]].mtime_ns, units[t.moved[k]].mode,
                        units[t.moved[k]].ctime_ns, units[t.moved[k]].ino) for k in which]
        sink = Sink(jobs, [t.dests[k] for k in which], progress=t.progress, fsync=t.opts.fsync)
        reader = SourceReader(jobs, t.meter)
        err = None
        info: dict = {}
        try:
            err = run_method(method, t.comm, jobs, reader, sink, t.opts.chunk_size,
                             t.opts.small_file_threshold, t.opts.shared_exchange, info)
        except Exception as e:
            err = e
        finally:
            sink.abort()
        for j, digest in sink.done.items():
            out.done[which[j]] = (digest, jobs[j].size)
        out.error = out.error or err
        out.bytes_written += sink.bytes_written
        if method == t.opts.method or not out.extra:
            out.extra.update(info)
        if method != t.opts.method:
            out.extra["scatter_read_alone"] = len(which)
