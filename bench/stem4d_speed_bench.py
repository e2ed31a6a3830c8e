"""4D-STEM speed against the tools it replaces (issue 42): stempy's counting, LiberTEM's
virtual images, and the flow's own per-frame overhead, each beside its peer in one run.

- **counting**: F camera-like 576x576 uint16 frames (dark + read noise, electrons with
  charge sharing, X-ray hits), written once as 4D Camera sector files (version 5, four
  ``module<N>.data`` files) for stempy and as an HDF5 dataset for us. stempy 3.6 counts
  them with its multi-pass threaded reader on ``--threads`` threads
  (``stempy.image.electron_count``: its thresholds from 40 sampled frames, its sparse
  result); we count the same frames on ``--workers`` worker processes, each doing what
  one worker of ``stem4d/flow.py`` does per task (``read_partition`` of K frames,
  ``Stem4D(mode="count", rule="stempy").process_partition``) with stempy's thresholds
  of that run (``fixed``), plus our own sampling of 40 frames (``stem4d.counting``),
  timed beside it. The events are checked equal frame by frame. stempy's dark
  reference lies below every pixel (stempy 3.6 samples in uint16: a pixel below the
  dark wraps and its threshold computation throws, which hangs its threaded reader)
  and is a whole number per pixel (its multi-pass pipeline subtracts the dark's
  integer part, its classic pipeline and our ``rule="stempy"`` truncate the difference:
  for a fractional dark the two stempy pipelines differ by one count).
- **virtual**: V frames of 256x256 uint16 in memory, the flow's default masks (a
  bright-field disk and an annular ring): ``kernels.virtual_detector`` on one core
  against LiberTEM 0.16 ``ApplyMasksUDF`` (``mask_dtype=float64``) run inline on a
  memory dataset (BLAS limited to one thread), results checked equal.
- **overhead**: a 64x64 scan of 128x128 uint16 camera-like frames in an HDF5 file,
  ``mode="both"`` (their dark reference, thresholds 40 / 2000 above it):
  the flow's work on one core (``read_partition`` + ``process_partition`` per partition
  of K frames, the tree merge, the images) against the time of its kernels alone on
  the same frames in memory (the per-frame sums, the virtual-detector kernel, the
  counting kernel); the ratio flow / kernels is the per-frame overhead.

Each side runs in its own process, the sides alternate round by round, every figure
is a median of ``--rounds``; peak RSS (``ru_maxrss``) of every process that did the work;
the 1-minute load average sampled throughout. ``--before COMMIT`` measures that commit's
``kernels``/``stem4d``/``analyses`` (``git archive``) in the same rounds, so a change
shows beside the code it replaced.

    .venv/bin/python bench/stem4d_speed_bench.py [--before HEAD~3] [--rounds 3]

Writes ``bench/results/stem4d_speed.{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ONE_THREAD = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "NUMBA_NUM_THREADS")}
SECTOR_HEADER = np.dtype([("scan", "<u4"), ("frame", "<u4"), ("sx", "<u2"), ("sy", "<u2"),
                          ("x", "<u2"), ("y", "<u2")])


def _maxrss_mib() -> float:
    """This process's peak RSS (VmHWM: ``ru_maxrss`` keeps the parent's across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------- data

def camera(n: int, size: int, seed: int = 0):
    """Camera-like uint16 frames and a dark reference below every pixel (float32)."""
    rng = np.random.default_rng(seed)
    shape = (size, size)
    dark = rng.normal(100, 4, shape).astype(np.float32)
    bank = np.rint(dark + rng.normal(0, 3.5, (8, *shape))).astype(np.int32)
    frames = np.empty((n, *shape), np.uint16)
    for i in range(n):
        f = np.roll(bank[i % 8], 7 * (i // 8), axis=1)
        k = rng.poisson(size * size * 0.002)
        r, c = rng.integers(1, size - 1, k), rng.integers(1, size - 1, k)
        f[r, c] += rng.gamma(6, 25, k).astype(np.int32)          # the electron's pixel
        f[r, c + 1] += rng.gamma(2, 10, k).astype(np.int32)      # charge sharing
        nx = rng.poisson(3)
        xr, xc = rng.integers(1, size - 1, nx), rng.integers(1, size - 2, nx)
        f[xr, xc] += 30_000                                      # X-ray hits
        frames[i] = np.clip(f, 0, 65535)
    # whole numbers: stempy's multi-pass pipeline subtracts the dark's integer part
    # (``frame - uint16(dark)``), its classic one truncates ``frame - dark``, and so do we
    # (rule="stempy"); for a whole-number dark all three agree
    ref = np.floor(np.minimum(dark - 20, frames.min(axis=0) - 1)).astype(np.float32)
    return frames, ref


def write_sectors(d: Path, frames: np.ndarray, scan: tuple) -> List[str]:
    """4D Camera version-5 sector files: per module a header and 144 rows per frame."""
    sy, sx = scan
    files = []
    rows = frames.shape[1] // 4
    for m in range(4):
        p = d / f"data_scan1_module{m}.data"
        with open(p, "wb") as f:
            for i in range(len(frames)):
                h = np.array([(1, i + 1, sx, sy, i % sx, i // sx)], SECTOR_HEADER)
                f.write(h.tobytes())
                f.write(np.ascontiguousarray(frames[i, m * rows:(m + 1) * rows]).tobytes())
        files.append(str(p))
    return files


def write_h5(path: Path, frames: np.ndarray, scan: tuple) -> None:
    import h5py

    with h5py.File(path, "w") as h:
        h.create_dataset("frames", data=frames.reshape(*scan, *frames.shape[1:]))


# ---------------------------------------------------------------- children

def child_stempy(a: Dict[str, Any]) -> Dict[str, Any]:
    import stempy.image as si
    import stempy.io as sio

    dark = np.load(a["dark"])
    t0 = time.perf_counter()
    r = sio.reader(a["files"], version=sio.FileVersion.VERSION5, backend="multi-pass",
                   threads=a["threads"])
    ec = si.electron_count(r, darkreference=dark, number_of_samples=40,
                           threshold_num_blocks=40)
    sec = time.perf_counter() - t0
    meta = ec.metadata["electron_counting"]
    if a.get("events"):
        counts = np.array([len(ec.data[i, 0]) for i in range(ec.data.shape[0])], np.int64)
        flat = np.concatenate([np.sort(np.asarray(ec.data[i, 0], np.uint32))
                               for i in range(ec.data.shape[0])])
        np.savez(a["events"], counts=counts, flat=flat)
    return {"seconds": sec, "maxrss_mib": _maxrss_mib(),
            "background_threshold": meta["background_threshold"],
            "x_ray_threshold": meta["x_ray_threshold"]}


_W: Dict[str, Any] = {}


def _init_worker(params: Dict[str, Any], h5: str, warm: List[Any]) -> None:
    from analyses.sources.dataset import dataset_geometry
    from stem4d.analysis import Stem4D

    g = dataset_geometry(h5, "/frames", "bench")
    an = Stem4D(**params)
    an.prepare(g)
    an.process_partition(*warm)         # numba: load the cache (or compile) before timing
    _W.update(analysis=an)


def _pid(_: int) -> int:
    time.sleep(0.05)
    return os.getpid()


def _count_task(ref: Any) -> Any:
    from analyses.sources import read_partition

    p = _W["analysis"].process_partition(*read_partition(ref))
    return ref.start, p, os.getpid(), _maxrss_mib()


def child_ours_count(a: Dict[str, Any]) -> Dict[str, Any]:
    import multiprocessing as mp

    from analyses.sources import partitions, read_partition
    from analyses.sources.dataset import dataset_geometry
    from stem4d.counting import sample_indices, sampled_thresholds

    g = dataset_geometry(a["h5"], "/frames", "bench")
    refs = list(partitions(a["h5"], g.frames, a["k"]))
    params = {"mode": "count", "rule": "stempy", "dark": a["dark"],
              "background_threshold": a["bg"], "xray_threshold": a["xr"]}
    warm = read_partition(refs[0])
    warm = (warm[0][:2], warm[1][:2], warm[2][:2])
    ctx = mp.get_context("spawn")
    with ctx.Pool(a["workers"], initializer=_init_worker, initargs=(params, a["h5"], warm)) as pool:
        while len(set(pool.map(_pid, range(4 * a["workers"]), chunksize=1))) < a["workers"]:
            pass                                         # every worker up and warm
        t0 = time.perf_counter()
        got = pool.map(_count_task, refs, chunksize=1)
        sec = time.perf_counter() - t0
    # our own threshold sampling of 40 frames (stempy's time includes its own)
    import h5py

    with h5py.File(a["h5"], "r") as h:
        d = h["/frames"]
        idx = sample_indices(g.frames, 40)
        lead = d.shape[:-2]
        t1 = time.perf_counter()
        s = np.stack([d[np.unravel_index(int(i), lead)] for i in idx])
        sampled_thresholds(s, np.load(a["dark"]), None, 4.0, 10.0)
        sample_s = time.perf_counter() - t1
    rss: Dict[int, float] = {}
    for _, _, pid, r in got:
        rss[pid] = max(rss.get(pid, 0.0), r)
    if a.get("events"):
        got.sort(key=lambda x: x[0])
        cs, fl = [], []
        for _, p, _, _ in got:
            c, f = p.chunks[0].ragged["events"]
            cs.append(c)
            fl.append(f)
        np.savez(a["events"], counts=np.concatenate(cs), flat=np.concatenate(fl))
    return {"seconds": sec, "sample_seconds": sample_s,
            "worker_maxrss_mib": sorted(rss.values()), "driver_maxrss_mib": _maxrss_mib()}


def child_ours_virtual(a: Dict[str, Any]) -> Dict[str, Any]:
    from kernels import virtual_detector

    frames = np.load(a["frames"], mmap_mode="r")
    frames = np.ascontiguousarray(frames)
    masks = np.load(a["masks"])
    virtual_detector(frames[:4], masks)         # compile / load the cache
    base = _maxrss_mib()
    ts = []
    for _ in range(a["repeat"]):
        t0 = time.perf_counter()
        out = virtual_detector(frames, masks)
        ts.append(time.perf_counter() - t0)
    if a.get("result"):
        np.save(a["result"], out)
    return {"seconds": statistics.median(ts), "all": ts, "maxrss_mib": _maxrss_mib(),
            "frames_rss_mib": base}


def child_libertem_virtual(a: Dict[str, Any]) -> Dict[str, Any]:
    from libertem.api import Context
    from libertem.udf.masks import ApplyMasksUDF

    frames = np.ascontiguousarray(np.load(a["frames"], mmap_mode="r"))
    masks = np.load(a["masks"])
    ctx = Context.make_with("inline")
    ds = ctx.load("memory", data=frames.reshape(*a["scan"], *frames.shape[1:]), sig_dims=2)

    def udf():
        return ApplyMasksUDF(mask_factories=[lambda i=i: masks[i] for i in range(len(masks))],
                             mask_dtype=np.float64)

    ctx.run_udf(ds, udf())                      # warm-up
    ts = []
    for _ in range(a["repeat"]):
        t0 = time.perf_counter()
        res = ctx.run_udf(ds, udf())
        ts.append(time.perf_counter() - t0)
    if a.get("result"):
        np.save(a["result"], np.asarray(res["intensity"].data, np.float64).reshape(len(frames), -1))
    return {"seconds": statistics.median(ts), "all": ts, "maxrss_mib": _maxrss_mib()}


def _kernels_time(frames: np.ndarray, an: Any, t: Any, clock: Any = time.perf_counter) -> float:
    """The time of the flow's kernels alone on ``frames`` in memory (this code's own)."""
    from kernels import stem

    masks = np.stack([m.weights for m in an.masks(frames.shape[1:])])
    dark = (an._dark if isinstance(an._dark, np.ndarray) else
            np.full(frames.shape[1:], float(an._dark), np.float64))
    bg, xr = t.background_threshold, t.x_ray_threshold
    if hasattr(stem, "count_events_kernel"):                 # batched (issue 42)
        runs = stem.mask_runs(masks)
        k = an.params.get("partition_frames", 64)
        t0 = clock()
        for s in range(0, len(frames), k):
            fr = frames[s:s + k]
            out = np.empty((len(fr), len(masks)))
            stem.virtual_detector_kernel(fr, *runs, out)
            stem.count_stack(fr, dark, bg, xr, None, "raw")
            stem.frame_sums(fr)
        return clock() - t0
    ptr, idx, wts = stem.sparse_masks(masks)
    inv = np.ones(frames.shape[1:])
    work = np.empty(frames.shape[1:])
    hits = np.empty(frames.shape[1:], np.uint8)
    t0 = clock()
    out = np.empty((len(frames), len(masks)))
    stem.virtual_detector_kernel(frames, ptr, idx, wts, out)
    for f in frames:
        stem.count_electrons_kernel(f, dark, inv, bg, xr, False, False, False, work, hits)
    frames.reshape(len(frames), -1).sum(axis=1, dtype=np.float64)
    return clock() - t0


def child_overhead(a: Dict[str, Any]) -> Dict[str, Any]:
    from analyses.sources import partitions, read_partition
    from analyses.sources.dataset import dataset_geometry
    from stem4d.analysis import Stem4D

    g = dataset_geometry(a["h5"], "/frames", "bench")

    def flow(clock: Any = time.perf_counter) -> tuple:
        t0 = clock()
        an = Stem4D(mode="both", dark=a["dark"], background_threshold=40.0,
                    xray_threshold=2000.0)
        an.prepare(g)
        parts = [an.process_partition(*read_partition(ref))
                 for ref in partitions(a["h5"], g.frames, a["k"])]
        while len(parts) > 1:
            parts = [an.merge(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        img = an.images(parts[0].compact(), g)
        return clock() - t0, an, img

    _, an, img = flow()                                      # warm-up (numba cache)
    import h5py

    with h5py.File(a["h5"], "r") as h:
        frames = h["/frames"][()].reshape(g.frames, *g.shape)
    _kernels_time(frames[:8], an, an.thresholds())
    fl, kr, flc, krc = [], [], [], []
    for i in range(a["repeat"]):
        for which in (("flow", "kernels") if i % 2 == 0 else ("kernels", "flow")):
            if which == "flow":
                fl.append(flow()[0])
                flc.append(flow(time.process_time)[0])
            else:
                kr.append(_kernels_time(frames, an, an.thresholds()))
                krc.append(_kernels_time(frames, an, an.thresholds(), time.process_time))
    return {"flow_seconds": statistics.median(fl), "kernel_seconds": statistics.median(kr),
            "flow_cpu_seconds": statistics.median(flc),
            "kernel_cpu_seconds": statistics.median(krc),
            "flow_all": fl, "kernel_all": kr, "events": int(img["electron_counts"].sum()),
            "maxrss_mib": _maxrss_mib()}


CHILDREN = {"stempy": child_stempy, "ours-count": child_ours_count,
            "ours-virtual": child_ours_virtual, "libertem-virtual": child_libertem_virtual,
            "overhead": child_overhead}


def run_child(name: str, args: Dict[str, Any], code: str | None = None) -> Dict[str, Any]:
    env = {**os.environ, **ONE_THREAD}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name,
           "--child-args", json.dumps(args)] + (["--code", code] if code else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"{name} ({code or 'this checkout'}) failed:\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- driver

def _equal_events(a: str, b: str) -> List[int]:
    x, y = np.load(a), np.load(b)
    if not np.array_equal(x["counts"], y["counts"]):
        return [int((x["counts"] == y["counts"]).sum()), len(x["counts"])]
    return [len(x["counts"]) if np.array_equal(x["flat"], y["flat"]) else -1, len(x["counts"])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count-frames", type=int, default=1024)
    ap.add_argument("--virtual-frames", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--partition-frames", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["count", "virtual", "overhead"], action="append")
    ap.add_argument("--before", default=None, help="also measure this commit (git archive)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--name", default="stem4d_speed")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-args", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--code", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, a.code or str(ROOT))
        print(json.dumps(CHILDREN[a.child](json.loads(a.child_args))))
        return 0
    sys.path.insert(0, str(HERE))
    from loadavg import LoadSampler

    only = a.only or ["count", "virtual", "overhead"]
    res: Dict[str, Any] = {"rounds": a.rounds, "before": a.before,
                           "head": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short",
                                                   "HEAD"], capture_output=True,
                                                  text=True).stdout.strip(),
                           "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d, \
            LoadSampler(5.0) as load:
        tmp = Path(d)
        codes = {"after": None}
        if a.before:
            old = tmp / "before"
            old.mkdir()
            arch = subprocess.run(["git", "-C", str(ROOT), "archive", a.before, "kernels",
                                   "stem4d", "analyses", "streams", "core", "workflows",
                                   "stager", "hooks"], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=arch, check=True)
            codes = {"before": str(old), "after": None}
        rounds: Dict[str, List[Dict[str, Any]]] = {}

        def add(key: str, v: Dict[str, Any]) -> None:
            rounds.setdefault(key, []).append(v)

        if "count" in only:
            frames, dark = camera(a.count_frames, 576)
            scan = (a.count_frames // 32, 32)
            files = write_sectors(tmp, frames, scan)
            write_h5(tmp / "count.h5", frames, scan)
            np.save(tmp / "dark.npy", dark)
            del frames
            for r in range(a.rounds):
                sides = ["stempy"] + list(codes)
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    ev = str(tmp / f"ev_{side}.npz") if r == 0 else None
                    if side == "stempy":
                        v = run_child("stempy", {"files": files, "dark": str(tmp / "dark.npy"),
                                                 "threads": a.threads, "events": ev})
                        thr = (v["background_threshold"], v["x_ray_threshold"])
                    else:
                        if r == 0 and "thr" not in res:
                            raise SystemExit("stempy runs first in round 0")
                        v = run_child("ours-count", {
                            "h5": str(tmp / "count.h5"), "dark": str(tmp / "dark.npy"),
                            "bg": res["thr"][0], "xr": res["thr"][1], "workers": a.workers,
                            "k": a.partition_frames, "events": ev}, codes[side])
                    if side == "stempy" and "thr" not in res:
                        res["thr"] = thr
                    add(f"count/{side}", v)
                if r == 0:
                    res["count_events_equal"] = {
                        s: _equal_events(str(tmp / "ev_stempy.npz"), str(tmp / f"ev_{s}.npz"))
                        for s in codes}
        if "virtual" in only:
            n = a.virtual_frames
            frames = np.random.default_rng(1).poisson(20, (n, 256, 256)).astype(np.uint16)
            np.save(tmp / "vframes.npy", frames)
            from kernels import circular_mask

            c = 127.5
            masks = np.stack([circular_mask((256, 256), c, c, 256 / 8),
                              circular_mask((256, 256), c, c, 256 / 2, 256 / 6)])
            np.save(tmp / "masks.npy", masks)
            del frames
            side_scan = [64, n // 64]
            for r in range(a.rounds):
                sides = ["libertem"] + list(codes)
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    out = str(tmp / f"v_{side}.npy") if r == 0 else None
                    args = {"frames": str(tmp / "vframes.npy"), "masks": str(tmp / "masks.npy"),
                            "repeat": 3, "result": out, "scan": side_scan}
                    v = (run_child("libertem-virtual", args) if side == "libertem" else
                         run_child("ours-virtual", args, codes[side]))
                    add(f"virtual/{side}", v)
                if r == 0:
                    ref = np.load(tmp / "v_libertem.npy")
                    res["virtual_equal"] = {s: bool(np.array_equal(np.load(tmp / f"v_{s}.npy"),
                                                                   ref)) for s in codes}
        if "overhead" in only:
            frames, dark = camera(4096, 128, seed=2)
            write_h5(tmp / "small.h5", frames, (64, 64))
            np.save(tmp / "small_dark.npy", dark)
            del frames
            for r in range(a.rounds):
                for side in (list(codes) if r % 2 == 0 else list(codes)[::-1]):
                    add(f"overhead/{side}", run_child("overhead", {
                        "h5": str(tmp / "small.h5"), "dark": str(tmp / "small_dark.npy"),
                        "k": a.partition_frames, "repeat": 5},
                        codes[side]))
    res["load"] = load.summary()
    res["rounds_raw"] = rounds
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]
               if isinstance(v[0][f], (int, float))} for k, v in rounds.items()}
    res["median"] = med
    lines = [f"# 4D-STEM speed against stempy and LiberTEM (issue 42), {a.rounds} alternating "
             f"rounds, {os.cpu_count()} cores", "",
             f"HEAD {res['head']}" + (f", before = {a.before}" if a.before else "") + "; "
             + load.text() + ". Ratio = the peer's time / ours (>= 1: we are faster).", ""]
    sides = list(codes)
    if "count" in only:
        st = med["count/stempy"]
        lines += [f"## Counting: {a.count_frames} x 576x576 uint16, stempy multi-pass "
                  f"({a.threads} threads) vs {a.workers} worker processes", "",
                  "| | seconds | frames/s | ratio | peak RSS MiB |", "|---|---|---|---|---|",
                  f"| stempy 3.6 `electron_count` (its thresholds included) | {st['seconds']:.3f} "
                  f"| {a.count_frames / st['seconds']:.0f} | 1 | {st['maxrss_mib']:.0f} |"]
        for s in sides:
            o = med[f"count/{s}"]
            rss = [max(x["worker_maxrss_mib"]) for x in rounds[f"count/{s}"]]
            tot = o["seconds"] + o["sample_seconds"]
            ratio = st["seconds"] / o["seconds"]
            lines.append(f"| ours ({s}), counting | {o['seconds']:.3f} | "
                         f"{a.count_frames / o['seconds']:.0f} | **{ratio:.2f}** "
                         f"| {statistics.median(rss):.0f} per worker (+ driver "
                         f"{o['driver_maxrss_mib']:.0f}) |")
            lines.append(f"| ours ({s}), counting + sampling 40 frames | {tot:.3f} | "
                         f"{a.count_frames / tot:.0f} | {st['seconds'] / tot:.2f} | |")
        lines += ["", f"Thresholds (stempy's, used by ours): background {res['thr'][0]:.3f}, "
                  f"X-ray {res['thr'][1]:.3f}. Frames with events equal to stempy's: "
                  + ", ".join(f"{s} {v[0]} of {v[1]}" for s, v in
                              res["count_events_equal"].items()) + ".", ""]
    if "virtual" in only:
        lt = med["virtual/libertem"]
        lines += [f"## Virtual images: {a.virtual_frames} x 256x256 uint16 in memory, 2 masks, "
                  "one core", "", "| | seconds | frames/s | ratio | peak RSS MiB |",
                  "|---|---|---|---|---|",
                  f"| LiberTEM inline `ApplyMasksUDF` (memory dataset) | {lt['seconds']:.3f} | "
                  f"{a.virtual_frames / lt['seconds']:.0f} | 1 | {lt['maxrss_mib']:.0f} |"]
        for s in sides:
            o = med[f"virtual/{s}"]
            lines.append(f"| ours ({s}) `virtual_detector` | {o['seconds']:.3f} | "
                         f"{a.virtual_frames / o['seconds']:.0f} | "
                         f"**{lt['seconds'] / o['seconds']:.2f}** | {o['maxrss_mib']:.0f} |")
        lines += ["", "Both hold the frames in memory (512 MiB of the RSS). Results equal "
                  f"LiberTEM's: {res['virtual_equal']}.", ""]
    if "overhead" in only:
        lines += ["## Per-frame overhead: 4,096 x 128x128 uint16 from HDF5, mode=both, one core "
                  "(flow: read + process_partition + merge + images; kernels: the same frames "
                  "in memory)",
                  "", "| | flow s (CPU s) | its kernels s (CPU s) | flow / kernels, CPU "
                  "(wall) | peak RSS MiB |", "|---|---|---|---|---|"]
        for s in sides:
            o = med[f"overhead/{s}"]
            lines.append(f"| {s} | {o['flow_seconds']:.3f} ({o['flow_cpu_seconds']:.3f}) | "
                         f"{o['kernel_seconds']:.3f} ({o['kernel_cpu_seconds']:.3f}) | "
                         f"**{o['flow_cpu_seconds'] / o['kernel_cpu_seconds']:.2f}** "
                         f"({o['flow_seconds'] / o['kernel_seconds']:.2f}) | "
                         f"{o['maxrss_mib']:.0f} |")
        lines.append("")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{a.name}.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, f"{a.name}.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
