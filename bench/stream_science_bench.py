"""Time to science, time to the first partial result and memory per receiver of a live scan.

The same 4D-STEM scan (synthetic frames, :func:`stem4d.synth.frames_array`, made
once in memory) reaches a ``/sum_image`` + virtual images + counted electrons
result (``OUT/<scan>.h5``, :mod:`stem4d`) in two ways, alternating, ``--repeat``
times each, in the same run:

- **streamed**: a receiving job (``mpirun -n NP stager stream receive --analysis
  stem4d.flow --emulate-nodes 2``) is already waiting, as in an NCEM streaming
  session; 4 producer threads x 4 sectors send the frames over loopback; the clock
  runs from the first frame sent to the scan's report written (result drained).
  The job's start-up (mpirun to rendezvous file) is reported apart: a session
  pays it once for many scans.
- **files**: the frames are written to an HDF5 file in a "shared" directory (what
  the detector's file writer does), then ``mpirun -n NP python -m workflows run
  stem4d/flow.py --stage SPEC --emulate-nodes 2 --executor mpi`` stages the file to
  every node's RAM disk (``/dev/shm``) and runs the same flow on the staged copy;
  the clock runs from the first frame written to the job's exit (start-up
  included: the file path starts its job after the data exists; no batch-queue
  wait is counted for either).

Both at full speed (``rate=None``), and both paced at ``--rate`` frames/s, the
detector's pace (a file writer cannot finish before the last frame either).
The results of the two paths are checked equal (``/sum_image``, electron counts).

Also measured, on the paced streamed runs: the time from the first frame sent to
the first live partial result arriving at a ``LiveView`` subscriber (and the job's
own figure from its report), and each rank's peak RSS (from the report). With
``--picture FILE`` the live image of the first paced run is saved when about half
the scan is in (the README's picture).

    .venv/bin/python bench/stream_science_bench.py                      # 24x24 x 256x256
    .venv/bin/python bench/stream_science_bench.py --scan 32 32 --repeat 3 \\
        --picture docs/live-scan.png
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from loadavg import LoadSampler  # noqa: E402


def _env() -> Dict[str, str]:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "OMPI_MCA_ess", "OMPI_MCA_orte")):
            env.pop(k)
    return env


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float) -> float:
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None and not path.exists():
            out, err = proc.communicate()
            raise SystemExit(f"the job ended without {path}: {out}\n{err}")
        if time.monotonic() > end:
            proc.kill()
            raise SystemExit(f"timeout waiting for {path}")
        time.sleep(0.005)
    return time.perf_counter()


class Subscriber(threading.Thread):
    """Times of live messages (perf_counter), and the image when ``half`` is reached."""

    def __init__(self, rv: Any, half: Optional[int]) -> None:
        super().__init__(daemon=True)
        from streams.job.live import LiveView

        self.view = LiveView(rv.live, rv.server_key, rv.client_certificate)
        self.half = half
        self.times: List[float] = []
        self.png: Optional[bytes] = None
        self.progress: Dict[str, Any] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            m = self.view.receive(0.05)
            if m is None:
                continue
            self.times.append(time.perf_counter())
            if self.half is not None and self.png is None and not m.final and \
                    m.progress.get("complete", 0) >= self.half:
                self.png, self.progress = m.png(), dict(m.progress)
            if m.final:
                break
        self.view.close()


def streamed(a: Any, frames: np.ndarray, tmp: Path, rate: Optional[float],
             picture: bool) -> Dict[str, Any]:
    from streams import ScanGeometry, SimulatedScan
    from streams.protocols.native.rendezvous import wait_for_rendezvous
    from streams.simulate import run_producers

    out, rv = tmp / "out", tmp / "rv.json"
    t_launch = time.perf_counter()
    job = subprocess.Popen(
        ["mpirun", "-n", str(a.np), "--oversubscribe", sys.executable, "-m", "stager",
         "stream", "receive", "--rendezvous", str(rv), "--out", str(out), "--emulate-nodes",
         "2", "--bind", "127.0.0.1", "--local", str(tmp / "local" / "%n"),
         "--live-interval", str(a.live_interval), "--analysis", "stem4d.flow",
         "--partition-frames", str(a.partition_frames)],
        cwd=tmp, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        r = wait_for_rendezvous(rv, timeout=120)
    except Exception:
        job.kill()
        raise SystemExit(f"no rendezvous: {job.communicate()}") from None
    t_ready = time.perf_counter()
    ny, nx = a.scan
    sub = Subscriber(r, ny * nx // 2 if picture else None)
    sub.start()
    time.sleep(0.5)             # the subscription reaches the publisher
    g = ScanGeometry("s1", 4, ny * nx, 4, tuple(frames.shape[1:]), "<u2", (ny, nx))
    scan = SimulatedScan(g, source=lambda i: frames[i], rate=rate)
    t0 = time.perf_counter()
    run_producers(scan, r, send_timeout=120.0)
    t_sent = time.perf_counter()
    t_done = _wait_file(out / "s1.json", job, 300)
    try:
        _, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        raise SystemExit("the receiving job did not exit") from None
    sub.stop.set()
    sub.join(5)
    rep = json.loads((out / "s1.json").read_text())
    if not rep["ok"]:
        raise SystemExit(f"streamed scan lost data: {rep}")
    return {"startup_s": t_ready - t_launch, "send_s": t_sent - t0, "science_s": t_done - t0,
            "first_live_s": (sub.times[0] - t0) if sub.times else None,
            "first_live_job_s": rep["timing"]["first_live_after_first_message_s"],
            "live_messages": len(sub.times), "memory": rep["memory"],
            "png": sub.png, "png_progress": sub.progress, "h5": str(out / "s1.h5")}


def files(a: Any, frames: np.ndarray, tmp: Path, rate: Optional[float]) -> Dict[str, Any]:
    import h5py

    shared, out = tmp / "shared", tmp / "out"
    shared.mkdir()
    local = Path(tempfile.mkdtemp(prefix="stream2-bench-", dir="/dev/shm"))
    ny, nx = a.scan
    try:
        t0 = time.perf_counter()
        with h5py.File(shared / "s1.h5", "w") as f:
            d = f.create_dataset("frames", (ny, nx, *frames.shape[1:]), "<u2",
                                 chunks=(1, 1, *frames.shape[1:]))
            for i in range(len(frames)):
                if rate:
                    delay = t0 + i / rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                d[divmod(i, nx)] = frames[i]
        t_written = time.perf_counter()
        spec = tmp / "stage.hook"
        spec.write_text(f"broadcast to {local}/%n files {{\n  {shared}/s1.h5\n}}\n")
        p = subprocess.run(
            ["mpirun", "-n", str(a.np), "--oversubscribe", sys.executable, "-m", "workflows",
             "run", str(ROOT / "stem4d/flow.py"), "--stage", str(spec), "--emulate-nodes", "2",
             "--executor", "mpi", "--out", str(out), "--", "--frames",
             f"{local}/node0/s1.h5:/frames", "--scan", "s1", "--partition-frames",
             str(a.partition_frames)],
            cwd=tmp, env=_env(), capture_output=True, text=True, timeout=600)
        t_done = time.perf_counter()
        if p.returncode != 0:
            raise SystemExit(f"file path failed: {p.stdout}\n{p.stderr}")
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return {"write_s": t_written - t0, "stage_process_s": t_done - t_written,
            "science_s": t_done - t0, "h5": str(out / "s1.h5")}


def _same(h5a: str, h5b: str) -> None:
    import h5py

    with h5py.File(h5a, "r") as fa, h5py.File(h5b, "r") as fb:
        for name in ("sum_image", "electron_counts", "frames_complete"):
            if not np.array_equal(fa[name][()], fb[name][()]):
                raise SystemExit(f"streamed and file results differ in /{name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scan", type=int, nargs=2, default=(24, 24), metavar=("NY", "NX"))
    ap.add_argument("--shape", type=int, nargs=2, default=(256, 256))
    ap.add_argument("--rate", type=float, default=200.0, help="paced runs: frames/s")
    ap.add_argument("--np", type=int, default=4, help="ranks (2 emulated nodes)")
    ap.add_argument("--partition-frames", type=int, default=16)
    ap.add_argument("--live-interval", type=float, default=0.25)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--picture", metavar="PNG", help="save the live image at half the scan")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    from stem4d.synth import frames_array

    frames = frames_array(tuple(a.scan), tuple(a.shape))
    runs: Dict[str, List[Dict[str, Any]]] = {"stream_full": [], "files_full": [],
                                             "stream_paced": [], "files_paced": []}
    picture: Optional[bytes] = None
    picture_progress: Dict[str, Any] = {}
    with LoadSampler(interval=2.0) as load:
        for _ in range(a.repeat):
            for rate, tag in ((None, "full"), (a.rate, "paced")):
                with tempfile.TemporaryDirectory(prefix="stream2-bench-") as d1, \
                        tempfile.TemporaryDirectory(prefix="stream2-bench-") as d2:
                    s = streamed(a, frames, Path(d1), rate, picture=(
                        tag == "paced" and picture is None and bool(a.picture)))
                    f = files(a, frames, Path(d2), rate)
                    _same(s["h5"], f["h5"])
                if s["png"] is not None:
                    picture = s["png"]
                    picture_progress = s["png_progress"]
                for r in (s, f):
                    r.pop("h5")
                s.pop("png")
                runs[f"stream_{tag}"].append(s)
                runs[f"files_{tag}"].append(f)
                print(tag, f"stream {s['science_s']:.2f} s, files {f['science_s']:.2f} s",
                      flush=True)

    def med(key: str, field: str) -> float:
        return statistics.median(r[field] for r in runs[key])

    nbytes = frames.nbytes
    res: Dict[str, Any] = {
        "scan_shape": list(a.scan), "shape": list(a.shape), "frames": len(frames),
        "bytes": nbytes, "ranks": a.np, "nodes": 2, "producers": 4, "sectors": 4,
        "partition_frames": a.partition_frames, "rate": a.rate, "repeat": a.repeat,
        "runs": runs, "load": load.summary(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    for tag in ("full", "paced"):
        res[f"science_ratio_{tag}"] = med(f"files_{tag}", "science_s") / \
            med(f"stream_{tag}", "science_s")
    fl = [r["first_live_s"] for r in runs["stream_paced"] if r["first_live_s"] is not None]
    flj = [r["first_live_job_s"] for r in runs["stream_paced"]
           if r["first_live_job_s"] is not None]
    res["first_live_s"] = statistics.median(fl) if fl else None
    res["first_live_job_s"] = statistics.median(flj) if flj else None
    mem = [r["memory"] for r in runs["stream_full"] + runs["stream_paced"]]
    res["receiver_peak_rss_mib"] = max(m["receiver_peak_rss_mib"] for m in mem)
    res["worker_peak_rss_mib"] = max(max(m["peak_rss_mib"]) for m in mem)
    res["assembler_bound_mib"] = mem[0]["assembler_bound_mib"]
    res["outbox_bound_mib"] = mem[0]["outbox_bound_mib"]
    if picture is not None and a.picture:
        Path(a.picture).write_bytes(picture)
        res["picture"] = {"path": a.picture, "progress": picture_progress}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stream_science.json").write_text(json.dumps(res, indent=1) + "\n")
    mb = nbytes / 1e6
    md = [
        "# Time to science, first partial result, memory (`bench/stream_science_bench.py`)", "",
        f"Scan {a.scan[0]}x{a.scan[1]} of {a.shape[0]}x{a.shape[1]} uint16 frames "
        f"({len(frames)} frames, {mb:.0f} MB), stem4d (sum, counting, virtual detectors); "
        f"{a.np} ranks on 2 emulated nodes of this {os.cpu_count()}-core machine; 4 producer "
        f"threads x 4 sectors over loopback; median of {a.repeat} alternating runs; "
        f"{load.text()}.", "",
        "| acquisition | streamed (s) | files: write (s) | files: stage+process job (s) "
        "| files total (s) | files / streamed |", "|---|---|---|---|---|---|",
    ]
    for tag, what in (("full", "as fast as possible"), ("paced", f"paced at {a.rate:.0f} "
                                                              "frames/s")):
        md.append(f"| {what} | {med(f'stream_{tag}', 'science_s'):.2f} | "
                  f"{med(f'files_{tag}', 'write_s'):.2f} | "
                  f"{med(f'files_{tag}', 'stage_process_s'):.2f} | "
                  f"{med(f'files_{tag}', 'science_s'):.2f} | "
                  f"**{res[f'science_ratio_{tag}']:.2f}** |")
    md += [
        "", f"Streamed: from the first frame sent to the scan's report written (result "
        f"drained); the receiving job was started before (start-up "
        f"{statistics.median(r['startup_s'] for r in runs['stream_full']):.1f} s, paid once "
        "per session). Files: from the first frame written to the stage+process job's exit "
        "(its start-up included). No batch-queue wait in either.", "",
        f"First live partial result after the first frame (paced runs, live interval "
        f"{a.live_interval} s): **{res['first_live_s']:.2f} s** at a subscriber "
        f"({res['first_live_job_s']} s by the job's own clock)." if fl else
        "No live message arrived before the end of the scan (scan too short?).", "",
        f"Peak RSS per receiver rank: **{res['receiver_peak_rss_mib']:.0f} MiB** (worker "
        f"ranks, with numba and the analysis: up to {res['worker_peak_rss_mib']:.0f} MiB); "
        f"bounds: assembler {res['assembler_bound_mib']:.0f} MiB per open scan + outbox "
        f"{res['outbox_bound_mib']:.0f} MiB per receiver.",
    ]
    (out / "stream_science.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
