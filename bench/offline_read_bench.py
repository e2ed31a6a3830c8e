"""The offline runner's partition reads (``analyses.sources.read_partition``): what keeping
a reader per file and process gives, for a TIFF series and an HDF5 file of frames.

Run: ``python bench/offline_read_bench.py [--reps 7] [--out bench/results]``

Two sources, both read in the same run, alternating, ``--reps`` times each way:

* a TIFF series of 200 frames of 512x288 uint16 (the NF demo's frame size), one frame
  per partition: each frame's file opened as a reader of its own (``open_frame_file``:
  it reads the file once for its shape, then the frame; the runner's first version)
  against ``read_partition`` (one series reader per process);
* an HDF5 scan, 32x32 positions of 128x128 uint16 frames (``udf_bench.py``'s file),
  read in partitions of 16 and of 64 frames: the file and dataset opened for every
  partition (the runner's first version) against ``read_partition`` (one open dataset
  per file and process).

Writes ``offline_read.json`` and ``offline_read.md``: best of ``--reps``, and the ratio
opened each time / kept (above 1: keeping the reader is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loadavg import LoadSampler
from analyses.sources import frame_files, partitions, read_partition
from analyses.sources.frames import open_frame_file


def _h5_opened(refs) -> None:
    import h5py

    for r in refs:
        with h5py.File(r.path, "r") as f:
            d = f[r.dataset]
            nx = d.shape[1]
            y0, y1 = r.start // nx, (r.stop - 1) // nx + 1
            d[y0:y1].reshape(-1, *d.shape[2:])[r.start - y0 * nx:r.stop - y0 * nx]


def _tiff_opened(refs) -> None:
    for r in refs:
        np.stack([open_frame_file(f, (), r.dtype).read(0) for f in frame_files(r)])


def _runner(refs) -> None:
    for r in refs:
        read_partition(r)


def _best(fn, refs, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn(refs)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args()
    import h5py

    from kernels.io import write_tiff_series

    rows = []
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp, LoadSampler(1.0) as load:
        h5 = os.path.join(tmp, "scan.h5")
        rng = np.random.default_rng(0)
        with h5py.File(h5, "w") as f:
            f.create_dataset("frames", data=rng.integers(0, 1000, (32, 32, 128, 128),
                                                         dtype=np.uint16),
                             chunks=(1, 1, 128, 128))
        series = os.path.join(tmp, "f_%06d.tif")
        write_tiff_series(series, rng.integers(0, 4000, (200, 512, 288), dtype=np.uint16))
        # (case, opened each time, kept (the runner), refs)
        cases = [("TIFF series, one 512x288 frame per partition", _tiff_opened, _runner,
                  partitions(series, 200, 1, kind="frames", dtype="uint16"))]
        cases += [(f"HDF5 scan, partitions of {k} frames of 128x128", _h5_opened, _runner,
                   partitions(h5, 1024, k, dataset="/frames")) for k in (16, 64)]
        for name, opened, kept, refs in cases:
            _runner(refs[:1])                                 # imports, first open
            t_open, t_kept = float("inf"), float("inf")
            for _ in range(a.reps):                           # alternating
                t_open = min(t_open, _best(opened, refs, 1))
                t_kept = min(t_kept, _best(kept, refs, 1))
            rows.append({"case": name, "partitions": len(refs),
                         "opened_ms": round(t_open * 1e3, 2), "kept_ms": round(t_kept * 1e3, 2),
                         "opened_over_kept": round(t_open / t_kept, 2),
                         "per_partition_saved_ms": round((t_open - t_kept) / len(refs) * 1e3,
                                                         3)})
    os.makedirs(a.out, exist_ok=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "reps": a.reps,
              "cpus": os.cpu_count(), "load": load.summary(), "rows": rows}
    with open(os.path.join(a.out, "offline_read.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    lines = ["# Partition reads of the offline runner: reader kept per process vs opened "
             "per partition (bench/offline_read_bench.py)", "",
             f"Measured {result['date']}, {os.cpu_count()} CPUs, {load.text()}; best of "
             f"{a.reps}, the two ways alternating; files in /dev/shm. Kept: "
             "`analyses.sources.read_partition`.", "",
             "| source | partitions | opened each time (ms) | kept (ms) | opened / kept | "
             "saved per partition (ms) |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['partitions']} | {r['opened_ms']} | {r['kept_ms']} | "
              f"{r['opened_over_kept']} | {r['per_partition_saved_ms']} |" for r in rows]
    with open(os.path.join(a.out, "offline_read.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
