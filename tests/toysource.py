"""A toy analysis source, ``npy``: one class plus one row, to prove a source is a plug-in.

Frames ``(F, rows, cols)`` in a NumPy ``.npy`` file (which no built-in source reads),
memory-mapped so a partition reads only its frames. Registered in
:data:`analyses.sources.SOURCES`; nothing else of ``analyses`` is touched. Also a flow
(``python -m workflows run tests/toysource.py --executor inline -- --npy FILE``)
running the per-frame sum over it with :func:`analyses.runner.run_analysis`.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from analyses.geometry import ScanGeometry
from analyses.sources import SOURCES, Source, partitions


class NpySource(Source):
    """Positions ``start:stop`` of a ``.npy`` stack of frames."""

    def read(self, ref: Any, files: Sequence[str]) -> Any:
        data = np.load(files[0], mmap_mode="r")[ref.start:ref.stop]
        positions = np.arange(ref.start, ref.stop, dtype=np.int64)
        return np.ascontiguousarray(data), positions, np.ones(len(positions), bool)


SOURCES.register("npy", NpySource(), "frames (F, rows, cols) in a .npy file")


def add_arguments(parser: Any) -> None:
    parser.add_argument("--npy", required=True)
    parser.add_argument("--partition-frames", type=int, default=3)


def main(args: Any) -> Any:
    from analyses.runner import run_analysis

    stack = np.load(args.npy, mmap_mode="r")
    scan = os.path.splitext(os.path.basename(args.npy))[0]
    g = ScanGeometry(scan, 1, len(stack), 1, stack.shape[1:], stack.dtype.str, (1, len(stack)))
    refs = partitions(os.path.abspath(args.npy), g.frames, args.partition_frames, kind="npy")
    run = run_analysis(None, {}, refs, g, os.path.join(args.out, f"{scan}.h5"))
    return run.written
