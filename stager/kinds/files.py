"""The ``files`` kind: whole files, moved by a transfer method over the leader communicator.

Methods (:mod:`stager.staging.transfer`): ``stripe`` (default), ``readall``
(the paper's), ``bcast``, ``naive``. Each reads every planned byte from the
shared filesystem (once, except ``naive`` and ``readall`` under OMPIO),
checks every piece against the digest its reader computed, and commits each
file atomically on every node that needs it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from core.options import Option, parse_bool
from stager.planning.kinds import PlanContext
from stager.planning.plan import describe_size
from stager.staging.kind import Moved, Transfer
from stager.staging.transfer import Moving, Sink, SourceReader, run_method

__all__ = ["FilesKind", "OPTIONS"]

#: leaders on one host exchange through shared memory (staging.transfer.shmem)
OPTIONS = (Option("shared_exchange", True, parse_bool, "STAGER_SHARED_EXCHANGE"),)


class FilesKind:
    """Whole files (``files`` blocks)."""

    name = "files"
    what = "the files"
    label = ""
    whole_files = True
    entries = None  # plain file patterns
    options = OPTIONS
    json_keys = ("files", "entries")

    def plan(self, block: Any, index: int, ctx: PlanContext) -> Tuple[Any, List[Any]]:
        from stager.planning.files import plan_files

        return plan_files(block, index, ctx.claimed, ctx.stat, ctx.trees, ctx.skipped)

    def split(self, plan: Any, nodes: int) -> Any:
        return plan  # a whole file is placed whole

    def check(self, node: str) -> None:
        return None

    def verify(self, path: str, source: str) -> Optional[str]:
        return None  # identity, size and checksum say it all

    def describe_block(self, b: Any) -> str:
        if b.mode == "scatter":
            return (f"scatter, {b.files} file(s), {describe_size(b.bytes)} in all, "
                    f"each file on {b.replicas} node(s)")
        return f"{b.files} file(s), {describe_size(b.bytes)}"

    def describe_unit(self, e: Any) -> str:
        return (f"{e.source} -> {e.dest.replace(chr(0), '%')}  {e.size} B  "
                f"mode {e.mode:04o}")

    def unit_dict(self, e: Any) -> Dict[str, Any]:
        from dataclasses import asdict

        return asdict(e)


    def locate(self, e: Any) -> Tuple[str, None, int]:
        return e.source, None, e.size  # a whole copy of the source

    def transfer(self, t: Transfer) -> Moved:
        """Collective over ``t.comm`` (except ``naive``): move the files, return what was done.

        Broadcast files go through the chosen method over every leader. Files of
        ``scatter`` blocks move among their holders only: with several replicas, over
        a communicator of the holders (:func:`core.mpi.groups.holder_groups`: read
        once, in stripes, by the holders, and received by nobody else); with one
        (``t.alone``), read by the holder's leader itself, after the collective part.
        """
        from core.mpi.groups import holder_groups

        everyone, groups, local = t.by_holders()
        out = Moved()
        if everyone:  # identical on every leader: the plan decides
            self._move(t, t.comm, everyone, t.opts.method, out)
        # every leader walks every group to the end (members wait for each other)
        for hs, sub in holder_groups(t.comm, groups, lambda: out.error is not None):
            self._move(t, sub, groups[hs], t.opts.method, out)
        if any(t.alone) and out.error is None:
            # a local step: its failure is agreed by the pipeline after the kind returns
            self._move(t, t.comm, local, "naive", out)
        return out

    def _move(self, t: Transfer, comm: Any, which: List[int], method: str,
              out: Moved) -> None:
        jobs = [t.units[t.moved[k]] for k in which]
        sink = Sink(jobs, [t.dests[k] for k in which], progress=t.progress, fsync=t.opts.fsync)
        reader = SourceReader(jobs, t.meter)
        err = None
        m = Moving(comm, jobs, reader, sink, t.opts.chunk_size, t.opts.small_file_threshold,
                   t.job, t.opts.kind_options["shared_exchange"])
        try:
            err = run_method(method, m)
        except Exception as e:
            err = e
        finally:
            sink.abort()
        for j, digest in sink.done.items():
            out.done[which[j]] = (digest, jobs[j].size)
        out.error = out.error or err
        out.bytes_written += sink.bytes_written
        if method == t.opts.method or not out.extra:
            out.extra.update(m.info)
        if method != t.opts.method:
            out.extra["scatter_read_alone"] = len(which)
        elif comm is not t.comm:  # among the holders of scatter files with several replicas
            out.extra["scatter_in_groups"] = out.extra.get("scatter_in_groups", 0) + len(which)
