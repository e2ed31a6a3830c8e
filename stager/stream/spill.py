"""Spill: arriving partitions written to node-local storage, recorded like staged files.

With ``--spill DIR`` (``%n`` = the node's name, as in spec destinations) every
receiver writes each partition it delivers to::

    DIR/<scan>/part-r<RECEIVER>-<INDEX>.h5      (INDEX: 6 digits, delivery order)

one small HDF5 file per partition (layout below), written whole in memory
(``driver='core'``) and then to a temporary name, checksummed and renamed: a
reader never sees half a file. Every file is entered in the destination root's
record (``DIR/.stager-record.json``, :mod:`stager.nodelocal.record`) with its
size, mtime, mode and XXH3-128 checksum, and a hook spec naming ``DIR`` is
written next to the scan outputs, so the ordinary commands work on spilled
frames::

    mpirun stager verify OUT/spill.hook      # re-checksum every node's partitions
    mpirun stager drain  DIR DEST            # copy them to the shared filesystem
    mpirun stager clean  OUT/spill.hook      # remove exactly them

and an offline re-run of the same analysis reads them back
(:func:`read_partition_file`, :func:`spilled_partitions`).

Partition file layout: ``/frames`` (k, rows, cols) in the scan's dtype (missing
sectors zero), ``/frame_index`` (k,) int64, ``/complete`` (k,) bool, ``/sectors``
(k, S) bool; root attributes ``scan``, ``receiver``, ``partition``,
``scan_shape``, ``frames`` (of the whole scan), ``sectors``, ``dtype``.

The record is kept in memory per scan and saved when the scan closes
(:meth:`Spill.finish`), through :func:`record_files` -- the one function that
touches the record API, so a change of that API changes one place.
"""
from __future__ import annotations

import glob
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from stager.nodelocal import localfs
from stager.nodelocal import record as records
from stager.planning.plan import expand_node
from stager.stream.errors import StreamError

__all__ = ["Spill", "record_files", "spill_spec_text", "read_partition_file",
           "spilled_partitions", "SPEC_NAME"]

#: The hook spec written next to the outputs, naming the spill roots.
SPEC_NAME = "spill.hook"


def record_files(root: str, files: Dict[str, records.StagedFile], created: List[str]) -> None:
    """Add ``files`` (paths relative to ``root``) to ``root``'s record and save it.

    The only use of :mod:`stager.nodelocal.record` in the stream layer.
    """
    rec = records.load(root)
    rec.files.update(files)
    rec.created_dirs.extend(d for d in created if d not in rec.created_dirs)
    records.save(rec)


def spill_spec_text(template: str) -> str:
    """A hook spec whose one block's destination is the spill template (``%n`` kept)."""
    return ("# Written by `stager stream receive --spill`: the node-local partitions.\n"
            "# mpirun stager verify THIS | mpirun stager clean THIS (same node options)\n"
            f"broadcast to {template} files {{\n  ?{template.replace('%n', 'any-node')}/"
            "never-staged-from-here\n}\n")


class Spill:
    """Writes one receiver's partitions to ``template`` (``%n`` -> ``node``).

    Parameters
    ----------
    template : str
        Absolute directory; ``%n`` is the node name.
    node : str
    receiver : int
    """

    def __init__(self, template: str, node: str, receiver: int) -> None:
        if not os.path.isabs(template.replace("%n", "x")):
            raise StreamError(f"--spill {template}: must be an absolute directory")
        self.root = os.path.normpath(expand_node(template, node))
        self.receiver = receiver
        self.files: Dict[str, Dict[str, records.StagedFile]] = {}
        self.created: List[str] = []
        self.bytes = 0
        self.seconds = 0.0

    def write(self, part: Any) -> str:
        """Write one :class:`~stager.stream.assemble.Partition`; return its path."""
        import h5py

        t = time.perf_counter()
        g = part.geometry
        rel = os.path.join(g.scan, f"part-r{self.receiver}-{part.index:06d}.h5")
        d = localfs.ensure_dir(self.root, os.path.dirname(rel), self.created)
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
        with localfs.AtomicFile(dest, mode=0o600) as af:
            af.write(image)
            digest = af.hexdigest()
            af.commit()
        st = os.lstat(dest)
        self.files.setdefault(g.scan, {})[rel] = records.StagedFile(
            source=f"stream:{g.scan}:r{self.receiver}:p{part.index}", size=st.st_size,
            mtime_ns=st.st_mtime_ns, mode=0o600, checksum=digest, source_size=st.st_size)
        self.bytes += len(image)
        self.seconds += time.perf_counter() - t
        return dest

    def finish(self, scan: str) -> int:
        """Record the files of ``scan``; return how many."""
        files = self.files.pop(scan, {})
        if files:
            record_files(self.root, files, self.created)
        return len(files)


def read_partition_file(path: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
    """``(frames, frame_index, complete, attrs)`` of one spilled partition file."""
    import h5py

    with h5py.File(path, "r") as f:
        return (f["frames"][()], f["frame_index"][()], f["complete"][()],
                {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()})


def spilled_partitions(template: str, scan: str, nodes: Optional[List[str]] = None
                       ) -> List[str]:
    """Paths of the spilled partitions of ``scan`` under ``template``, sorted.

    ``nodes``: the node names to look under (default: every directory that
    ``%n`` matches, for a shared view on one machine).
    """
    if "%n" in template:
        if nodes is None:
            pattern = template.replace("%n", "*")
            roots = sorted(glob.glob(pattern))
        else:
            roots = [expand_node(template, n) for n in nodes]
    else:
        roots = [template]
    paths: List[str] = []
    for r in roots:
        paths.extend(sorted(glob.glob(os.path.join(r, scan, "part-r*-*.h5"))))
    return paths

