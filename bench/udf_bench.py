"""LiberTEM UDFs through mpistage vs LiberTEM itself, on the same file, in one run.

Three figures, each a ratio measured in the same run (alternating, ``--repeat``
times, median):

1. **per-core throughput** (frames/s on one process): our path
   (:mod:`analyses.udf`: ``read_partition`` + LiberTEM's part runner per
   partition of K frames + the tree merge + ``get_results``) vs LiberTEM's
   ``Context.make_with("inline").run_udf`` on the same HDF5 file (its HDF5
   dataset, read by LiberTEM), for SumUDF, SumSigUDF, StdDevUDF and
   ApplyMasksUDF (3 masks); ``OMP_NUM_THREADS=1`` etc. for both;
2. **whole job at 2 emulated nodes**: ``mpirun -n 4 python -m workflows run
   analyses.runner --emulate-nodes 2`` (start-up included, and the
   flow's own time) vs LiberTEM's local Dask with 2 workers
   (``Context.make_with("dask", cpus=2)``: cluster start-up, then ``run_udf``);
3. **time to the first live result** from a stream: a receiving job
   (``mpirun -n 4 stager stream receive --emulate-nodes 2 --analysis udf:...``)
   waits; the simulator paces the scan at ``--rate`` frames/s; the clock runs
   from the first frame sent to the first live message at a ``LiveView``.

    .venv/bin/python bench/udf_bench.py                 # 32x32 scan of 128x128 frames
    .venv/bin/python bench/udf_bench.py --scan 16 16 --frame 64 64 --repeat 1

Writes ``bench/results/udf.json`` and ``udf.md`` (with the load average).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
from loadavg import LoadSampler  # noqa: E402

UDFS = [("libertem.udf.sum:SumUDF", {}), ("libertem.udf.sumsigudf:SumSigUDF", {}),
        ("libertem.udf.stddev:StdDevUDF", {}), ("libertem.udf.masks:ApplyMasksUDF", "MASKS")]


def _env() -> Dict[str, str]:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_")):
            env.pop(k)
    return env


def _make_file(tmp: Path, scan: List[int], frame: List[int]) -> Path:
    import h5py

    from streams.simulate import synthetic_frame

    path = tmp / "scan.h5"
    F = scan[0] * scan[1]
    data = np.stack([synthetic_frame(i, tuple(frame), tuple(scan)) for i in range(F)])
    with h5py.File(path, "w") as f:
        f.create_dataset("frames", data=data.reshape(*scan, *frame), chunks=(1, 1, *frame))
    yy, xx = np.mgrid[:frame[0], :frame[1]]
    r = np.hypot(yy - frame[0] / 2, xx - frame[1] / 2)
    masks = np.stack([r < frame[0] / 8, (r >= frame[0] / 6) & (r < frame[0] / 2),
                      np.ones(frame, bool)]).astype(np.float32)
    np.save(tmp / "masks.npy", masks)
    return path


def _params(p: Any, tmp: Path) -> Dict[str, Any]:
    return {"masks": str(tmp / "masks.npy")} if p == "MASKS" else dict(p)


def ours(spec: str, params: Dict[str, Any], path: Path, k: int,
         frames: Any = None) -> Dict[str, Any]:
    """One process: read (unless ``frames`` are given), process, merge (pairwise tree),
    results."""
    from analyses.loading import load_analysis
    from analyses.sources import partitions, read_partition
    from analyses.sources.dataset import dataset_geometry

    g = dataset_geometry(str(path), "/frames", "bench")
    t0 = time.perf_counter()
    a = load_analysis("udf:" + spec, params)
    a.prepare(g)
    parts = []
    for ref in partitions(str(path), g.frames, k):
        if frames is None:
            parts.append(a.process_partition(*read_partition(ref)))
        else:
            n = ref.stop - ref.start
            parts.append(a.process_partition(frames[ref.start:ref.stop],
                                              np.arange(ref.start, ref.stop), np.ones(n, bool)))
    while len(parts) > 1:
        parts = [a.merge(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    res = a.arrays(parts[0].compact())
    return {"seconds": time.perf_counter() - t0, "frames": g.frames, "result": res}


def libertem_inline(spec: str, params: Dict[str, Any], path: Path, k: int,
                    frames: Any = None) -> Dict[str, Any]:
    """LiberTEM inline on the HDF5 file (or on ``frames`` in memory, partitions of k)."""
    from libertem.api import Context

    from tests.udf_cases import make_udf

    t0 = time.perf_counter()
    ctx = Context.make_with("inline")
    if frames is None:
        ds = ctx.load("hdf5", path=str(path), ds_path="/frames")
    else:
        ds = ctx.load("memory", data=frames, sig_dims=2,
                      num_partitions=max(1, -(-frames.shape[0] * frames.shape[1] // k)))
    res = ctx.run_udf(ds, make_udf(spec, params))
    out = {k: np.asarray(v.data) for k, v in res.items()}
    return {"seconds": time.perf_counter() - t0, "result": out}


def per_core(a: Any, tmp: Path, path: Path) -> Dict[str, Any]:
    """Both paths on the file and on the same frames in memory; warmed up (numba JIT)
    first; the order alternates between repeats."""
    import h5py

    with h5py.File(path, "r") as f:
        mem = f["frames"][()]
    flat = mem.reshape(-1, *mem.shape[2:])
    rows = {}
    for spec, p in UDFS:
        params = _params(p, tmp)
        k = a.partition_frames
        for warm in (ours, libertem_inline):        # numba JIT, imports, page cache
            warm(spec, params, path, k)
            warm(spec, params, path, k, flat if warm is ours else mem)
        t: Dict[str, List[float]] = {"ours": [], "lt": [], "ours_mem": [], "lt_mem": []}
        F = flat.shape[0]
        for i in range(a.per_core_repeat):
            runs = [("ours", partial(ours, spec, params, path, k)),
                    ("lt", partial(libertem_inline, spec, params, path, k)),
                    ("ours_mem", partial(ours, spec, params, path, k, flat)),
                    ("lt_mem", partial(libertem_inline, spec, params, path, k, mem))]
            got = {}
            for name, fn in (runs if i % 2 == 0 else runs[::-1]):
                got[name] = fn()
                t[name].append(got[name]["seconds"])
            for key, ref in got["lt"]["result"].items():
                for o in ("ours", "ours_mem"):
                    if not np.allclose(ref, got[o]["result"][key][1], rtol=1e-5,
                                       equal_nan=True):
                        raise SystemExit(f"{spec} {key}: results differ ({o})")
        m = {n: statistics.median(v) for n, v in t.items()}
        b = {n: min(v) for n, v in t.items()}
        rows[spec.rpartition(":")[2]] = {
            "best_ratio_throughput": round(b["lt"] / b["ours"], 3),
            "best_ratio_throughput_memory": round(b["lt_mem"] / b["ours_mem"], 3),
            "seconds": {n: [round(x, 4) for x in v] for n, v in t.items()},
            "ours_s": round(m["ours"], 4), "libertem_inline_s": round(m["lt"], 4),
            "ours_frames_per_s": round(F / m["ours"], 1),
            "libertem_frames_per_s": round(F / m["lt"], 1),
            "ratio_throughput": round(m["lt"] / m["ours"], 3),
            "ours_memory_frames_per_s": round(F / m["ours_mem"], 1),
            "libertem_memory_frames_per_s": round(F / m["lt_mem"], 1),
            "ratio_throughput_memory": round(m["lt_mem"] / m["ours_mem"], 3)}
        print(spec, rows[spec.rpartition(":")[2]], flush=True)
    return rows


def whole_job(a: Any, tmp: Path, path: Path) -> Dict[str, Any]:
    spec = "libertem.udf.sumsigudf:SumSigUDF"
    ours_wall, ours_flow, dask_total, dask_run = [], [], [], []
    for i in range(a.repeat):
        rep = tmp / f"report{i}.json"
        t0 = time.perf_counter()
        r = subprocess.run(["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m",
                            "workflows", "run", "analyses.runner", "--emulate-nodes",
                            "2", "--out", str(tmp / f"out{i}"), "--report", str(rep), "--",
                            "--frames", f"{path}:/frames", "--partition-frames",
                            str(a.partition_frames), "--analysis", "udf:" + spec],
                           env=_env(), capture_output=True, text=True, timeout=600)
        if r.returncode:
            raise SystemExit(r.stdout + r.stderr)
        ours_wall.append(time.perf_counter() - t0)
        ours_flow.append(json.loads(rep.read_text())["seconds"]["flow"])
        code = ("import time,sys; t0=time.perf_counter()\n"
                "from libertem.api import Context\n"
                "from libertem.udf.sumsigudf import SumSigUDF\n"
                "ctx=Context.make_with('dask', cpus=2); t1=time.perf_counter()\n"
                f"ds=ctx.load('hdf5', path={str(path)!r}, ds_path='/frames')\n"
                "ctx.run_udf(ds, SumSigUDF()); t2=time.perf_counter()\n"
                "print(t2-t0, t2-t1); ctx.close()\n")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                           text=True, timeout=600, cwd=tmp)
        if r.returncode:
            raise SystemExit(r.stdout + r.stderr)
        total = time.perf_counter() - t0
        run = float(r.stdout.split()[-1])
        dask_total.append(total)
        dask_run.append(run)
    m = statistics.median
    return {"udf": "SumSigUDF", "ours_job_wall_s": round(m(ours_wall), 3),
            "ours_flow_s": round(m(ours_flow), 3),
            "libertem_dask2_wall_s": round(m(dask_total), 3),
            "libertem_dask2_run_udf_s": round(m(dask_run), 3),
            "ratio_wall": round(m(dask_total) / m(ours_wall), 3),
            "ratio_compute": round(m(dask_run) / m(ours_flow), 3)}


def first_live(a: Any, tmp: Path) -> Dict[str, Any]:
    from streams.job.live import LiveView
    from streams.protocol import ScanGeometry
    from streams.protocols.native.rendezvous import wait_for_rendezvous
    from streams.simulate import SimulatedScan, run_producers

    rows = []
    for i in range(a.repeat):
        out = tmp / f"live{i}"
        rv = tmp / f"rv{i}.json"
        job = subprocess.Popen(
            ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m", "stager", "stream",
             "receive", "--rendezvous", str(rv), "--out", str(out), "--emulate-nodes", "2",
             "--bind", "127.0.0.1", "--local", str(tmp / f"l{i}" / "%n"), "--live-interval",
             "0.25", "--partition-frames", "16", "--analysis",
             "udf:libertem.udf.sumsigudf:SumSigUDF,libertem.udf.sum:SumUDF"],
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        r = wait_for_rendezvous(rv, timeout=300)
        view = LiveView(r.live, r.server_key, r.client_certificate)
        time.sleep(0.5)     # the SUB socket's subscription reaches the publisher
        g = ScanGeometry(f"s{i}", 2, a.scan[0] * a.scan[1], 2, tuple(a.frame), "<u2",
                         tuple(a.scan))
        got: Dict[str, float] = {}

        def watch(view: Any = view, got: Dict[str, float] = got) -> None:
            while "t" not in got:
                msg = view.receive(0.05)
                if msg is not None and msg.images:
                    got["t"] = time.perf_counter()
        th = threading.Thread(target=watch, daemon=True)
        th.start()
        t0 = time.perf_counter()
        run_producers(SimulatedScan(g, rate=a.rate), r)
        t_sent = time.perf_counter() - t0
        jout, jerr = job.communicate(timeout=300)
        th.join(5)
        view.close()
        if job.returncode:
            raise SystemExit(jout + jerr)
        rep = json.loads((out / f"s{i}.json").read_text())
        rows.append({"first_live_s": round(got.get("t", float("nan")) - t0, 3),
                     "job_first_live_after_first_message_s":
                         rep["timing"]["first_live_after_first_message_s"],
                     "scan_send_s": round(t_sent, 3),
                     "finalized_after_last_message_s":
                         rep["timing"]["finalized_after_last_message_s"]})
        print(rows[-1], flush=True)
    return {"rate_frames_per_s": a.rate, "runs": rows,
            "median_first_live_s": statistics.median(r["first_live_s"] for r in rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scan", type=int, nargs=2, default=[32, 32])
    ap.add_argument("--frame", type=int, nargs=2, default=[128, 128])
    ap.add_argument("--partition-frames", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="whole-job and live runs")
    ap.add_argument("--per-core-repeat", type=int, default=7)
    ap.add_argument("--rate", type=float, default=500.0, help="paced stream, frames/s")
    ap.add_argument("--out", default=str(HERE / "results" / "udf"))
    a = ap.parse_args()
    import libertem

    with tempfile.TemporaryDirectory(prefix="udf-bench-", dir="/dev/shm") as t:
        tmp = Path(t)
        path = _make_file(tmp, a.scan, a.frame)
        with LoadSampler() as load:
            res = {"scan": a.scan, "frame": a.frame, "partition_frames": a.partition_frames,
                   "repeat": a.repeat, "per_core_repeat": a.per_core_repeat,
                   "libertem": libertem.__version__,
                   "per_core": per_core(a, tmp, path),
                   "whole_job_2_nodes": whole_job(a, tmp, path),
                   "first_live": first_live(a, tmp)}
        res["load"] = {"before": load.before, "min": min(load.samples),
                       "mean": round(statistics.mean(load.samples), 2),
                       "max": max(load.samples)}
    Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    Path(a.out + ".md").write_text(_markdown(res))
    print(_markdown(res))
    return 0


def _markdown(r: Dict[str, Any]) -> str:
    lines = [f"# LiberTEM UDFs: mpistage vs LiberTEM {r['libertem']}", "",
             f"Scan {r['scan'][0]}x{r['scan'][1]} of {r['frame'][0]}x{r['frame'][1]} uint16 "
             f"frames (HDF5 in /dev/shm), partitions of {r['partition_frames']}, median of "
             f"{r['repeat']}; load average before {r['load']['before']:.1f}, during "
             f"{r['load']['min']:.1f}-{r['load']['max']:.1f} (2 cores, shared with other "
             "sessions: absolute times are noisy, the ratios were taken side by side).", "",
             "## Per core (one process, same file)", "",
             "| UDF | ours frames/s | LiberTEM inline frames/s | ratio (best of N) | "
             "in memory: ours | LiberTEM inline | ratio (best of N) |",
             "|---|---|---|---|---|---|---|"]
    for name, row in r["per_core"].items():
        lines.append(f"| {name} | {row['ours_frames_per_s']} | {row['libertem_frames_per_s']} "
                     f"| {row['ratio_throughput']} ({row['best_ratio_throughput']}) | "
                     f"{row['ours_memory_frames_per_s']} | "
                     f"{row['libertem_memory_frames_per_s']} | "
                     f"{row['ratio_throughput_memory']} "
                     f"({row['best_ratio_throughput_memory']}) |")
    lines += ["", f"Medians of {r.get('per_core_repeat', r['repeat'])} alternating runs "
              "after a warm-up; ratio = our frames/s over LiberTEM's (>= 1: ours is at least "
              "as fast), of the medians and, in brackets, of the best runs (less exposed to "
              "the other sessions' load). From the file: both read the same HDF5 dataset; "
              "in memory: the frames are already in RAM (LiberTEM's memory dataset, "
              "partitions of the same size)."]
    w = r["whole_job_2_nodes"]
    lines += ["", "## Whole job, SumSigUDF: 2 emulated nodes (mpirun -n 4) vs LiberTEM Dask, "
              "2 workers", "", "| | ours | LiberTEM Dask | ratio (Dask / ours) |",
              "|---|---|---|---|",
              f"| wall, start-up included | {w['ours_job_wall_s']} s | "
              f"{w['libertem_dask2_wall_s']} s | {w['ratio_wall']} |",
              f"| compute (flow / run_udf) | {w['ours_flow_s']} s | "
              f"{w['libertem_dask2_run_udf_s']} s | {w['ratio_compute']} |"]
    f = r["first_live"]
    lines += ["", f"## Time to the first live result (stream paced at "
              f"{f['rate_frames_per_s']:.0f} frames/s, SumSigUDF + SumUDF, 2 emulated nodes)",
              "", f"Median {f['median_first_live_s']} s from the first frame sent to the first "
              "live message at a subscriber.", "",
              "| first live (subscriber) | job's own figure | scan sent in | "
              "finalized after last message |", "|---|---|---|---|"]
    for row in f["runs"]:
        lines.append(f"| {row['first_live_s']} s | "
                     f"{row['job_first_live_after_first_message_s']} s | "
                     f"{row['scan_send_s']} s | {row['finalized_after_last_message_s']} s |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
