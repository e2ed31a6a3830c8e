"""Spill: arriving partitions written to node-local storage, recorded like staged files.

With ``--spill DIR`` (``%n`` = the node's name, as in spec destinations) every
receiver writes each partition it delivers to::

    DIR/<scan>/part-r<RECEIVER>-<INDEX>.h5      (INDEX: 6 digits, delivery order)

one small HDF5 file per partition (layout below), written whole in memory
(``driver='core'``) and then to a temporary name, checksummed and renamed: a
reader never sees half a file. Every file is recorded in the root's state
directory like a staged copy (:mod:`stager.nodelocal.state`,
``docs/staging-state.md``) under the key of the hook spec that the job writes
next to the scan outputs (``OUT/spill.hook``, naming ``DIR``): the receiver takes
the root's lock while it spills, journals the scan directories before it makes
them and each file's entry (size, mtime, mode, XXH3-128, device and inode) as soon
as the file has its final name, and compacts the record when a scan closes. So the
ordinary commands work on spilled frames::

    mpirun stager verify OUT/spill.hook      # re-checksum every node's partitions
    mpirun stager drain  DIR DEST            # copy them to the shared filesystem
    mpirun stager clean  OUT/spill.hook      # remove exactly them

and an offline re-run of the same analysis reads them back
(:mod:`analyses.sources`: ``--spilled DIR --scan NAME``). A receiver killed
between a rename and its journal entry leaves that one file unrecorded:
``clean`` keeps it (it never removes what it did not record).

Partition file layout: ``/frames`` (k, rows, cols) in the scan's dtype (missing
sectors zero), ``/frame_index`` (k,) int64, ``/complete`` (k,) bool, ``/sectors``
(k, S) bool; root attributes ``scan``, ``receiver``, ``partition``,
``scan_shape``, ``frames`` (of the whole scan), ``sectors``, ``dtype``.

"""
from __future__ import annotations

import errno
import os
import time
from typing import Any, Dict

import numpy as np

from core import localfs
from stager.nodelocal import record as records
from core.nodes import expand_node
from streams.accounting import runs
from streams.errors import StreamError

__all__ = ["Spill", "spill_spec_text", "SPEC_NAME"]

#: The hook spec written next to the outputs, naming the spill roots.
SPEC_NAME = "spill.hook"


def spill_spec_text(template: str) -> str:
    """A hook spec whose one block's destination is the spill template (``%n`` kept)."""
    return ("# Written by `stager stream receive --spill`: the node-local partitions.\n"
            "# mpirun stager verify THIS | mpirun stager clean THIS (same node options)\n"
            f"broadcast to {template} files {{\n  ?{template.replace('%n', 'any-node')}/"
            "never-staged-from-here\n}\n")


class Spill:
    """Writes one receiver's partitions to ``template`` (``%n`` -> ``node``), recorded.

    Parameters
    ----------
    template : str
        Absolute directory; ``%n`` is the node name.
    node : str
    receiver : int
    spec : str
        The hook spec naming ``template`` (``OUT/spill.hook``); the records are kept
        under its key (:func:`stager.planning.spec_key`), so it must exist before the
        first :meth:`write`.
    """

    def __init__(self, template: str, node: str, receiver: int, spec: str) -> None:
        if not os.path.isabs(template.replace("%n", "x")):
            raise StreamError(f"--spill {template}: must be an absolute directory")
        self.root = os.path.normpath(expand_node(template, node))
        self.node, self.receiver, self.spec = node, receiver, os.path.abspath(spec)
        self.counts: Dict[str, int] = {}
        self.bytes = 0
        self.seconds = 0.0
        self._state: Any = None
        self._journal: Any = None
        self._key = ""

    def _open(self) -> None:
        """Make and lock the root, open the spec's journal (first write only)."""
        from stager.nodelocal.lock import Holder
        from stager.nodelocal.state import RootState
        from stager.planning import spec_key

        if not os.path.isfile(self.spec):
            raise StreamError(f"spill: the hook spec {self.spec} is missing; the job writes "
                              "it before the rendezvous file -- was OUT removed meanwhile?")
        self._key = spec_key(self.spec)
        state = RootState.create(self.root)
        try:
            state.take_lock(Holder.here(run=f"stream-{os.getpid()}", node=self.node,
                                        spec=self.spec), wait=10.0)
            self._journal = records.SpecJournal(state.fd, state.path, self._key)
            self._journal.run(run=f"stream-{os.getpid()}", spec=self.spec, pid=os.getpid())
        except BaseException:
            state.close()
            raise
        self._state = state

    def write(self, part: Any) -> str:
        """Write one :class:`~streams.assemble.Partition`; return its path."""
        import h5py

        t = time.perf_counter()
        if self._state is None:
            self._open()
        g = part.geometry
        rel = os.path.join(g.scan, f"part-r{self.receiver}-{part.index:06d}.h5")
        d = os.path.join(self.root, g.scan)
        if not os.path.isdir(d):     # journaled before it is made: clean removes it
            localfs.ensure_dir(self.root, d, announce=self._state.add_dir)
        with h5py.File(f"spill-{g.scan}-{part.index}", "w", driver="core",
                       backing_store=False) as f:
            f.create_dataset("frames", data=part.data)
            f.create_dataset("frame_index", data=part.frames)
            f.create_dataset("complete", data=part.complete)
            f.create_dataset("sectors", data=part.sectors)
            f.attrs.update({"scan": g.scan, "receiver": self.receiver,
                            "partition": part.index, "scan_shape": list(g.scan_shape),
                            "frames": g.frames, "sectors": g.sectors, "dtype": g.dtype})
            f.flush()
            image = f.id.get_file_image()
        dest = os.path.join(d, os.path.basename(rel))
        try:
            with localfs.AtomicFile(dest, mode=0o600) as af:
                af.write(image)
                digest = af.hexdigest()
                af.commit()
            st = os.lstat(dest)
            source = f"stream:{g.scan}:r{self.receiver}:p{part.index}"
            self._journal.copy(rel, records.new_entry(source, (st.st_size, -1, -1, -1), st,
                                                      0o600, digest))
        except OSError as e:
            raise self._failed(part, dest, len(image), e) from e
        self.counts[g.scan] = self.counts.get(g.scan, 0) + 1
        self.bytes += len(image)
        self.seconds += time.perf_counter() - t
        return dest

    def _failed(self, part: Any, dest: str, size: int, e: OSError) -> StreamError:
        """The error of a spill write that failed (ENOSPC above all): node, frames, what to do.

        The temporary file is gone (``AtomicFile`` removes it); the job stops, so no
        partition is ever silently left out of the spill.
        """
        frames = runs(np.sort(part.frames), most=None)
        what = "no space left" if e.errno in (errno.ENOSPC, errno.EDQUOT) else \
            f"write failed ({e.strerror or e})"
        return StreamError(f"spill on node {self.node}: {what} in {self.root} writing "
                           f"{dest} ({size} bytes: scan {part.geometry.scan}, receiver "
                           f"{self.receiver}, partition {part.index}, frames {frames}); "
                           f"{sum(self.counts.values())} partition(s) were spilled before it. "
                           "The job stops rather than drop spilled frames: free space on "
                           "the node or give --spill a larger directory")

    def _compact(self) -> None:
        self._journal.close()
        records.compact(self._state.fd, self._state.path, self._state.load(self._key))

    def finish(self, scan: str) -> int:
        """Compact the record once ``scan`` closed; return how many files it spilled."""
        if self._state is not None:
            self._compact()
            self._journal = records.SpecJournal(self._state.fd, self._state.path, self._key)
        return self.counts.pop(scan, 0)

    def close(self) -> None:
        """Release the root (its lock); the record stays."""
        if self._state is not None:
            self._compact()
            self._state.close()
            self._state = self._journal = None
