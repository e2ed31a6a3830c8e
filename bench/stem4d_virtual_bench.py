"""A virtual-image-only stem4d run against LiberTEM's inline ApplyMasksUDF: compute time.

Issue 24's target: a 4D-STEM run that asks only for virtual images (``mode=virtual``:
no electron counting, no events written) within 1.2x of LiberTEM's inline compute on
the same file. Both read the same HDF5 file (a scan of the simulator's frames) and apply
the same masks (a bright-field disk and an annular ring, from one ``.npy`` mask file):

- ours: what one worker of ``stem4d/flow.py`` does -- ``read_partition`` of K frames,
  ``Stem4D(mode="virtual", mask_file=...).process_partition``, the pairwise tree merge,
  and the scan-shaped images;
- LiberTEM: ``Context.make_with("inline").run_udf(ApplyMasksUDF)`` on its HDF5 dataset.

Warmed up first (numba JIT, imports, page cache), then alternating, ``--repeat`` times;
medians, the ratio ours / LiberTEM, results checked equal. One process, one thread.

    .venv/bin/python bench/stem4d_virtual_bench.py [--scan 32 32 --frame 128 128]

Writes ``bench/results/stem4d_virtual.{json,md}`` with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
from loadavg import LoadSampler  # noqa: E402


def ours(path: Path, masks: Path, k: int) -> Dict[str, Any]:
    from analyses.sources import partitions, read_partition
    from analyses.sources.dataset import dataset_geometry
    from stem4d.analysis import Stem4D

    g = dataset_geometry(str(path), "/frames", "bench")
    t0 = time.perf_counter()
    a = Stem4D(mode="virtual", mask_file=str(masks))
    a.prepare(g)
    parts = [a.process_partition(*read_partition(ref))
             for ref in partitions(str(path), g.frames, k)]
    while len(parts) > 1:
        parts = [a.merge(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    images = a.images(parts[0].compact(), g)
    return {"seconds": time.perf_counter() - t0, "images": images}


def libertem(path: Path, masks: Path) -> Dict[str, Any]:
    from libertem.api import Context
    from libertem.udf.masks import ApplyMasksUDF

    m = np.load(masks)
    t0 = time.perf_counter()
    ctx = Context.make_with("inline")
    ds = ctx.load("hdf5", path=str(path), ds_path="/frames")
    res = ctx.run_udf(ds, ApplyMasksUDF(mask_factories=[lambda i=i: m[i] for i in range(len(m))],
                                        mask_dtype=np.float64))
    return {"seconds": time.perf_counter() - t0, "intensity": np.asarray(res["intensity"].data)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scan", type=int, nargs=2, default=[32, 32])
    ap.add_argument("--frame", type=int, nargs=2, default=[128, 128])
    ap.add_argument("--partition-frames", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    from udf_bench import _make_file

    with tempfile.TemporaryDirectory() as d, LoadSampler(2.0) as load:
        tmp = Path(d)
        path = _make_file(tmp, a.scan, a.frame)
        masks = tmp / "bfadf.npy"
        np.save(masks, np.load(tmp / "masks.npy")[:2])       # the disk and the ring
        ours(path, masks, a.partition_frames)
        libertem(path, masks)
        t: Dict[str, list] = {"ours": [], "libertem": []}
        for i in range(a.repeat):
            runs = [("ours", lambda: ours(path, masks, a.partition_frames)),
                    ("libertem", lambda: libertem(path, masks))]
            got = {}
            for name, fn in (runs if i % 2 == 0 else runs[::-1]):
                got[name] = fn()
                t[name].append(got[name]["seconds"])
            lt = got["libertem"]["intensity"].reshape(-1, 2)
            mine = [v.reshape(-1) for n, v in got["ours"]["images"].items()
                    if n != "sum_image" and v.dtype == np.float64]
            for j in range(2):      # every LiberTEM image is one of ours
                if not any(np.allclose(lt[:, j], m, rtol=1e-12) for m in mine):
                    raise SystemExit(f"results differ: LiberTEM's mask {j} is none of ours")
    med = {n: statistics.median(v) for n, v in t.items()}
    F = a.scan[0] * a.scan[1]
    res = {"scan": a.scan, "frame": a.frame, "partition_frames": a.partition_frames,
           "repeat": a.repeat, "seconds": {n: [round(x, 4) for x in v] for n, v in t.items()},
           "median_s": {n: round(v, 4) for n, v in med.items()},
           "frames_per_s": {n: round(F / v, 1) for n, v in med.items()},
           "ours_over_libertem": round(med["ours"] / med["libertem"], 3),
           "load": load.summary() if hasattr(load, "summary") else None}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "stem4d_virtual.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = [f"# Virtual-image-only stem4d vs LiberTEM inline ApplyMasksUDF "
          f"({a.scan[0]}x{a.scan[1]} scan of {a.frame[0]}x{a.frame[1]} uint16, 2 masks)", "",
          "| | median s | frames/s |", "|---|---|---|",
          f"| stem4d mode=virtual (read + process + tree merge + images) | "
          f"{res['median_s']['ours']} | {res['frames_per_s']['ours']} |",
          f"| LiberTEM inline ApplyMasksUDF (its HDF5 dataset) | {res['median_s']['libertem']} "
          f"| {res['frames_per_s']['libertem']} |", "",
          f"ours / LiberTEM: **{res['ours_over_libertem']}x** (target <= 1.2x); "
          f"{a.repeat} alternating repeats after a warm-up, results checked equal; "
          f"load average {res['load']} (a 2-core machine shared with other work).", ""]
    with open(os.path.join(a.out, "stem4d_virtual.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
