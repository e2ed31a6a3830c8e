"""DECTRIS legacy stream: frames/s of one receiver here vs LiberTEM-live, on the same frames.

One dump of F frames (ROWS x COLS uint16, bitshuffle+LZ4, sparse counts as in 4D-STEM;
written by our simulator, every part int64 LE length + bytes) is replayed by
LiberTEM-live's own DECTRIS simulator (``libertem_live.detectors.dectris.sim``) into, in
turn and alternating ``--repeat`` times:

- **LiberTEM-live**: ``LiveContext`` with one worker process (``PipelinedExecutor``,
  ``cpus=range(1)``) and its ``libertem_dectris`` receiver, ``run_udf`` of a UDF that
  stamps ``time.perf_counter()`` per frame. The rate: frames over its
  ``on_ready_for_data`` hook (right after its arm, when the simulator starts sending)
  to the last stamp. Its receiver buffers ahead of the UDF, so the first-to-last stamp
  window (recorded too, ``libertem-live (stamps)``; the only one before) can be a burst
  of buffered frames rather than the receiving rate;
- **mpistage**: ``mpirun -n 2 stager stream receive --protocol dectris-legacy`` (one
  receiver, one worker) with LiberTEM's ``SumUDF``; the rate: frames over the job
  report's ``receive_s`` (first to last message at the receiver, the worker running
  beside it).

Both run two processes on the same 2 cores (plus the simulator's sender). The ratio
of the two rates in one run is the figure (load average recorded beside it).

    .venv/bin/python bench/dectris_legacy_bench.py --frames 8000 --repeat 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from loadavg import LoadSampler  # noqa: E402


def make_dump(path: Path, frames: int, shape) -> int:
    from streams.protocols.dectris_legacy.simulator import series_messages, write_dump

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    disk = ((yy - shape[0] / 2) ** 2 + (xx - shape[1] / 2) ** 2) < (shape[0] / 8) ** 2
    distinct = [(rng.poisson(0.05, shape) + disk * rng.poisson(20, shape)).astype("<u2")
                for _ in range(16)]
    with open(path, "wb") as f:
        write_dump(f, series_messages(1, lambda i: distinct[i % 16], frames, shape))
    return path.stat().st_size


def _libertem_live(dump: str, frames: int) -> tuple:
    """LiberTEM-live's rate (in a subprocess: its executor's workers)."""
    code = f"""
import sys, time, json
T0 = []
sys.path.insert(0, {str(HERE)!r})
from dectris_legacy_stamp import StampUDF
from libertem.executor.pipelined import PipelinedExecutor
from libertem_live.api import LiveContext
from libertem_live.detectors.dectris.sim import DectrisSim
from libertem_live.hooks import Hooks


class Armed(Hooks):
    def on_ready_for_data(self, env):
        T0.append(time.perf_counter())      # CLOCK_MONOTONIC: the workers' clock too


if __name__ == "__main__":
    sim = DectrisSim(path={dump!r}, port=0, zmqport=0, verbose=False)
    sim.start(); sim.wait_for_listen()
    ex = PipelinedExecutor(spec=PipelinedExecutor.make_spec(cpus=range(1), cudas=[]))
    with LiveContext(executor=ex) as ctx:
        with ctx.make_connection("dectris").open(api_host="127.0.0.1", api_port=sim.port,
                data_host="127.0.0.1", data_port=sim.zmqport) as conn:
            aq = ctx.make_acquisition(conn=conn, nav_shape=(1, {frames}), hooks=Armed())
            r = ctx.run_udf(dataset=aq, udf=StampUDF())
    t = r["t"].data.ravel()
    sim.stop()
    print(json.dumps({{"n": int((t > 0).sum()), "s": float(t.max() - T0[0]),
                      "stamps_s": float(t.max() - t[t > 0].min())}}))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=900, env=env)
    line = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode or not line:
        raise RuntimeError(f"LiberTEM-live run failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    d = json.loads(line[-1])
    assert d["n"] == frames, d
    return frames / d["s"], frames / d["stamps_s"]


def _mpistage(dump: str, frames: int) -> float:
    from libertem_live.detectors.dectris.sim import DectrisSim
    import urllib.request

    sim = DectrisSim(path=dump, port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, PYTHONPATH=str(ROOT), OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            rv = Path(tmp) / "rv.json"
            p = subprocess.Popen(
                ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "stager",
                 "stream", "receive", "--rendezvous", str(rv), "--out", f"{tmp}/out",
                 "--local", f"{tmp}/local/%n", "--bind", "127.0.0.1", "--protocol",
                 "dectris-legacy", "--dectris-endpoint", f"tcp://127.0.0.1:{sim.zmqport}",
                 "--analysis", "udf:libertem.udf.sum:SumUDF", "--partition-frames", "128",
                 "--live-interval", "5"], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
            while not rv.exists():
                if p.poll() is not None:
                    raise RuntimeError(p.communicate())
                time.sleep(0.1)
            time.sleep(1.0)
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{sim.port}/detector/api/1.8.0/command/arm", method="PUT"),
                timeout=10).read()
            out, err = p.communicate(timeout=900)
            if p.returncode:
                raise RuntimeError(out + err)
            rep = json.loads((Path(tmp) / "out" / "series-1.json").read_text())
            assert rep["frames_complete"] == frames, rep
            return frames / rep["timing"]["receive_s"]
    finally:
        sim.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=8000)
    ap.add_argument("--shape", type=int, nargs=2, default=(256, 256))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "dectris_legacy"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "bench.dump"
        size = make_dump(dump, a.frames, tuple(a.shape))
        rates = {"libertem-live": [], "libertem-live (stamps)": [], "mpistage": []}
        with LoadSampler() as load:
            for _ in range(a.repeat):
                rate, stamps = _libertem_live(str(dump), a.frames)
                rates["libertem-live"].append(rate)
                rates["libertem-live (stamps)"].append(stamps)
                rates["mpistage"].append(_mpistage(str(dump), a.frames))
    med = {k: statistics.median(v) for k, v in rates.items()}
    res = {"frames": a.frames, "shape": list(a.shape), "dump_bytes": size,
           "rates_frames_per_s": rates, "median": med,
           "ratio_mpistage_over_libertem_live": med["mpistage"] / med["libertem-live"],
           "load": load.summary()}
    Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# DECTRIS legacy stream: one receiver here vs LiberTEM-live "
             f"({a.frames} frames {a.shape[0]}x{a.shape[1]} uint16 bslz4, "
             f"{size / a.frames / 1024:.1f} KiB/frame)", "",
             "| | frames/s (median) | runs |", "|---|---|---|"]
    for k, v in rates.items():
        lines.append(f"| {k} | {med[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
    ratio = res["ratio_mpistage_over_libertem_live"]
    lines += ["", f"ratio mpistage / LiberTEM-live: **{ratio:.2f}**", load.text()]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
