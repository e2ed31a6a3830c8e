"""A synthetic 4D-STEM scan as an HDF5 file: the frames the detector simulator streams.

``write_scan_file(path, scan_shape, shape)`` writes ``/frames`` (ny, nx, rows,
cols) uint16 with :func:`streams.simulate.synthetic_frame` -- the same
frames ``python -m streams.simulate`` sends by default, so a streamed scan
and the file processed offline can be compared bit for bit.

As a command (the 4D-STEM guide's stand-in scan)::

    python -m stem4d.synth scan.h5 --scan-shape 16 16 --shape 64 64
"""
from __future__ import annotations

import sys
from typing import List, Optional, Tuple

import numpy as np

__all__ = ["write_scan_file"]


def write_scan_file(path: str, scan_shape: Tuple[int, int] = (16, 16),
                    shape: Tuple[int, int] = (128, 128), seed: int = 0) -> str:
    """Write the synthetic scan to ``path`` (dataset ``/frames``); return ``path``."""
    import h5py

    from streams.simulate import synthetic_frame

    ny, nx = scan_shape
    with h5py.File(path, "w") as f:
        d = f.create_dataset("frames", (ny, nx, *shape), dtype="<u2",
                             chunks=(1, 1, *shape))
        for i in range(ny * nx):
            d[divmod(i, nx)] = synthetic_frame(i, shape, scan_shape, "<u2", seed)
        f.attrs["source"] = "streams.simulate.synthetic_frame"
        f.attrs["seed"] = seed
    return path


def frames_array(scan_shape: Tuple[int, int], shape: Tuple[int, int], seed: int = 0
                 ) -> np.ndarray:
    """The same frames in memory, (ny*nx, rows, cols)."""
    from streams.simulate import synthetic_frame

    return np.stack([synthetic_frame(i, shape, scan_shape, "<u2", seed)
                     for i in range(scan_shape[0] * scan_shape[1])])


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m stem4d.synth FILE``: write a synthetic scan file (``/frames``)."""
    import argparse
    import os

    p = argparse.ArgumentParser(
        prog="python -m stem4d.synth",
        description="Write a synthetic 4D-STEM scan as an HDF5 file: /frames (ny, nx, rows, "
                    "cols) uint16, the frames `python -m streams.simulate` streams with the "
                    "same options.")
    p.add_argument("path", metavar="FILE", help="the HDF5 file to write (must not exist)")
    p.add_argument("--scan-shape", type=int, nargs=2, default=(16, 16), metavar=("NY", "NX"),
                   help="scan positions (default 16 16)")
    p.add_argument("--shape", type=int, nargs=2, default=(128, 128), metavar=("ROWS", "COLS"),
                   help="frame size in pixels (default 128 128)")
    p.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    args = p.parse_args(argv)
    if min(*args.scan_shape, *args.shape) < 1:
        p.error("--scan-shape and --shape take positive numbers")
    if os.path.lexists(args.path):
        p.error(f"{args.path} exists: give a new file name (nothing was written)")
    write_scan_file(args.path, tuple(args.scan_shape), tuple(args.shape), args.seed)
    ny, nx = args.scan_shape
    print(f"{args.path}: /frames {ny} x {nx} positions of {args.shape[0]} x {args.shape[1]} "
          "uint16 pixels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
