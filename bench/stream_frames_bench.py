"""How long a viewer waits for one scan position's frame, fetched through the job.

One ``mpirun -n 4`` receiving job (2 emulated nodes, ``stem4d.flow``, ``--spill``)
receives one scan of 32x32 positions of 384x384 uint16 (288 MiB: each receiver keeps
the last 64 MiB of it in memory, the rest only spilled). After its final result, a
viewer (:meth:`streams.view.LiveJob.frame`, the viewers' certificate) asks for
``--requests`` positions spread over the scan, paced under the job's 10 requests per
second; each answer is checked equal to the frame the simulator sent. Reported: the
round trip (viewer -> rank 0 -> receivers over MPI -> rank 0 -> viewer), median and
95th percentile, apart for frames answered from memory and from the spill.

    .venv/bin/python bench/stream_frames_bench.py [--requests 60]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from loadavg import LoadSampler  # noqa: E402


def _env() -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    import numpy as np

    from streams import ScanGeometry, SimulatedScan
    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers
    from streams.view import launch

    shape, frame = (32, 32), (384, 384)
    g = ScanGeometry("s1", 4, shape[0] * shape[1], 4, frame, "<u2", shape)
    scan = SimulatedScan(g)
    times: dict = {"memory": [], "spill": []}
    with tempfile.TemporaryDirectory(prefix="frames-bench-") as tmp, LoadSampler() as load:
        job = launch(f"{tmp}/rv.json", f"{tmp}/out",
                     ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
                      f"{tmp}/local/%n", "--spill", f"{tmp}/spill/%n",
                      "--analysis", "stem4d.flow", "--live-interval", "0.5", "--scans", "2"],
                     env=_env())
        try:
            job.wait_connected()
            t0 = time.monotonic()
            run_producers(scan, read_rendezvous(job.rendezvous))
            job.result("s1", timeout=600)
            ingest_s = time.monotonic() - t0
            for i in np.linspace(0, g.frames - 1, a.requests).astype(int):
                t = time.perf_counter()
                f = job.frame("s1", int(i))
                times[f.where].append(time.perf_counter() - t)
                assert np.array_equal(f.data, scan.frame(int(i))), i
                time.sleep(max(0.0, 0.15 - (time.perf_counter() - t)))   # under 10/s
            # a last small scan ends the job (its --scans 2)
            run_producers(SimulatedScan(ScanGeometry("end", 4, 4, 4, frame, "<u2", (2, 2))),
                          read_rendezvous(job.rendezvous))
            job.wait(300)
        finally:
            job.close()
            if job.process.poll() is None:
                job.process.kill()
    res = {"requests": a.requests, "scan": list(shape), "frame": list(frame),
           "frame_bytes": frame[0] * frame[1] * 2, "ingest_s": round(ingest_s, 1),
           "load": load.summary()}
    for where, xs in times.items():
        res[where] = {"n": len(xs),
                      "median_ms": None if not xs else round(1e3 * statistics.median(xs), 1),
                      "p95_ms": None if not xs else round(1e3 * _pct(xs, 0.95), 1)}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "stream_frames.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = (f"# One scan position's frame through the job ({time.strftime('%Y-%m-%d')})\n\n"
          f"`bench/stream_frames_bench.py --requests {a.requests}`: {shape[0]}x{shape[1]} "
          f"positions of {frame[0]}x{frame[1]} uint16 ({res['frame_bytes']} bytes a frame) "
          f"to `mpirun -n 4` (2 emulated nodes, `--spill`), then {a.requests} frames asked "
          "by a viewer, each checked equal to the frame sent.\n\n"
          "| answered from | frames | median | 95th percentile |\n|---|---|---|---|\n")
    for where in ("memory", "spill"):
        r = res[where]
        md += f"| {where} | {r['n']} | {r['median_ms']} ms | {r['p95_ms']} ms |\n"
    md += f"\n{load.text()}.\n"
    with open(os.path.join(a.out, "stream_frames.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
