"""Reader benchmark: the hand-written GE reader against fabio's, one core, one run.

Run:  .venv/bin/python bench/readers_bench.py [--frames 16] [--repeat 5] [--dir /dev/shm]
Writes bench/results/readers.json and bench/results/readers.md.

Why it exists: :mod:`kernels.io.ge` keeps a hand-written GE raw reader although
fabio (``GEimage``) reads GE too; its docstring cites this measurement.  A GE
file of ``--frames`` 2048x2048 uint16 frames behind APS's blanked 8192-byte
header is written to ``--dir`` (page cache / RAM, so the disk is not what is
measured) and read frame by frame:

* whole frames: ``GEFile.read(i, out)`` vs ``fabio.open(path).getframe(i).data``;
* 64-row bands (what an NF-HEDM task reads per frame): ``GEFile.read_rows`` vs
  fabio's whole frame sliced (fabio reads whole frames only).

Both sides are checked equal first; then timed alternately ``repeat`` times in
this process; the ratio of medians is reported, with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from loadavg import LoadSampler  # noqa: E402

from kernels.io import GEFile  # noqa: E402

SHAPE = (2048, 2048)
BAND = 64


def write_ge(path: str, n: int) -> None:
    frame = (np.arange(SHAPE[0] * SHAPE[1], dtype=np.uint32) % 65521).astype("<u2")
    with open(path, "wb") as f:
        f.write(b"\0" * 8192)
        for i in range(n):
            f.write(np.roll(frame, i).tobytes())


def timed(fn, repeat):
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    import fabio

    path = os.path.join(args.dir, f"readers-bench-{os.getpid()}.ge2")
    write_ge(path, args.frames)
    try:
        ours = GEFile(path)
        buf = np.empty(SHAPE, np.uint16)
        band = np.empty((BAND, SHAPE[1]), np.uint16)
        first = fabio.open(path)
        for i in (0, args.frames - 1):
            theirs = first if i == 0 else first.getframe(i)
            assert np.array_equal(ours.read(i, buf), theirs.data), "readers disagree"
        r0s = [(97 * i) % (SHAPE[0] - BAND) for i in range(args.frames)]

        def ours_frames():
            for i in range(args.frames):
                ours.read(i, buf)

        def fabio_frames():
            img = fabio.open(path)
            for i in range(args.frames):
                frame = (img if i == 0 else img.getframe(i)).data
                assert frame.shape == SHAPE

        def ours_bands():
            for i, r0 in enumerate(r0s):
                ours.read_rows(i, r0, r0 + BAND, band)

        def fabio_bands():
            img = fabio.open(path)
            for i, r0 in enumerate(r0s):
                (img if i == 0 else img.getframe(i)).data[r0:r0 + BAND].copy()

        cases = {"whole frames": (ours_frames, fabio_frames),
                 f"{BAND}-row bands": (ours_bands, fabio_bands)}
        rows = []
        with LoadSampler() as load:
            for name, (a, b) in cases.items():
                a(), b()                                   # warm the page cache and imports
                ta, tb = [], []
                for _ in range(args.repeat):
                    ta += timed(a, 1)
                    tb += timed(b, 1)
                ma, mb = float(np.median(ta)), float(np.median(tb))
                rows.append({"case": name, "frames": args.frames,
                             "ours_ms_per_frame": 1e3 * ma / args.frames,
                             "fabio_ms_per_frame": 1e3 * mb / args.frames,
                             "speedup": mb / ma, "ours_s": ta, "fabio_s": tb})
    finally:
        os.unlink(path)
    result = {"bench": "readers", "host": platform.node(), "python": platform.python_version(),
              "fabio": fabio.version, "dir": args.dir, "repeat": args.repeat,
              "load": load.summary(), "cases": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "readers.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "readers.md"), "w") as f:
        f.write(render_md(result))
    print(render_md(result))
    return 0


def render_md(res) -> str:
    lines = [f"# GE raw reader: kernels.io.GEFile vs fabio {res['fabio']}", "",
             f"{res['cases'][0]['frames']} frames of 2048x2048 uint16 in {res['dir']}, "
             f"median of {res['repeat']} alternating runs, one process; load average "
             f"{res['load']['before']} before, {res['load']['min']}-{res['load']['max']} "
             "during the run (provisional: other sessions share this machine).", "",
             "| case | GEFile ms/frame | fabio ms/frame | fabio / GEFile |",
             "|---|---|---|---|"]
    for r in res["cases"]:
        lines.append(f"| {r['case']} | {r['ours_ms_per_frame']:.2f} | "
                     f"{r['fabio_ms_per_frame']:.2f} | {r['speedup']:.1f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
