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

End to end (on by default, ``--no-e2e`` skips it): LiberTEM-live's
``ctx.run_udf(SumUDF)`` from its arm (the ``on_ready_for_data`` hook) to ``run_udf``
returning, against ours from the SIMPLON arm (the bench's ``PUT .../arm``) to the
scan's report appearing in ``--out`` (merged, written, drained): frames over each.
``--baseline DIR`` (a ``git archive`` of an earlier commit) runs that tree's job too,
alternating, so before and after come from one run. Peak RSS: LiberTEM-live's main
process (its receiver thread) and its worker process, against the job report's
receiver and worker ranks; LiberTEM-live's main process and the receiver alone by
``VmHWM`` (an exec'd child's ``ru_maxrss`` starts at its parent's RSS), its worker by
``RUSAGE_CHILDREN`` (an upper bound for that reason). Our job's CPU seconds (its ranks
and mpirun, start to exit: ``RUSAGE_CHILDREN`` around it) and its scan end (the
report's ``finalized_after_last_message_s``; the job's exit after the report) are
recorded beside (issue 42).

    .venv/bin/python bench/dectris_legacy_bench.py --frames 8000 --repeat 2
    .venv/bin/python bench/dectris_legacy_bench.py --baseline /tmp/base --repeat 3
    .venv/bin/python bench/dectris_legacy_bench.py --baseline /tmp/base --pairs 6  # jobs only
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


def _libertem_live(dump: str, frames: int, udf: str = "stamp") -> dict:
    """LiberTEM-live's run (in a subprocess: its executor's workers): ``udf`` ``stamp``
    (the ingest rate) or ``sum`` (``SumUDF``, arm to result)."""
    code = f"""
import resource, sys, time, json
T0 = []
sys.path.insert(0, {str(HERE)!r})
from dectris_legacy_stamp import StampUDF
from libertem.udf.sum import SumUDF
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
            udf = StampUDF() if {udf!r} == "stamp" else SumUDF()
            r = ctx.run_udf(dataset=aq, udf=udf)
            t_end = time.perf_counter()
    sim.stop()
    rss = {{"main_mib": int(open("/proc/self/status").read().split("VmHWM:")[1]
                           .split()[0]) / 1024,
            "worker_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}
    if {udf!r} == "stamp":
        t = r["t"].data.ravel()
        print(json.dumps({{"n": int((t > 0).sum()), "s": float(t.max() - T0[0]),
                          "stamps_s": float(t.max() - t[t > 0].min()), "rss": rss}}))
    else:
        print(json.dumps({{"n": {frames}, "e2e_s": t_end - T0[0], "rss": rss}}))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=900, env=env)
    line = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode or not line:
        raise RuntimeError(f"LiberTEM-live run failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    d = json.loads(line[-1])
    assert d["n"] == frames, d
    return d


def _mpistage(dump: str, frames: int, root: Path = ROOT, ranks: int = 2) -> dict:
    """One job of the tree at ``root``: its receive rate (the report's first to last
    message), arm to the report in ``--out``, the ranks' peak RSS."""
    from libertem_live.detectors.dectris.sim import DectrisSim
    import urllib.request

    sim = DectrisSim(path=dump, port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, PYTHONPATH=str(root), OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            rv = Path(tmp) / "rv.json"
            report = Path(tmp) / "out" / "series-1.json"
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.Popen(
                ["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable, "-m", "stager",
                 "stream", "receive", "--rendezvous", str(rv), "--out", f"{tmp}/out",
                 "--local", f"{tmp}/local/%n", "--bind", "127.0.0.1", "--protocol",
                 "dectris-legacy", "--dectris-endpoint", f"tcp://127.0.0.1:{sim.zmqport}",
                 "--analysis", "udf:libertem.udf.sum:SumUDF", "--partition-frames", "128",
                 "--live-interval", "5"], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=tmp)
            while not rv.exists():
                if p.poll() is not None:
                    raise RuntimeError(p.communicate())
                time.sleep(0.1)
            time.sleep(1.0)
            t_arm = time.perf_counter()
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{sim.port}/detector/api/1.8.0/command/arm", method="PUT"),
                timeout=10).read()
            while not report.exists() and p.poll() is None:
                time.sleep(0.002)
            t_result = time.perf_counter()
            out, err = p.communicate(timeout=900)
            t_exit = time.perf_counter()
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode:
                raise RuntimeError(out + err)
            rep = json.loads(report.read_text())
            assert rep["frames_complete"] == frames, rep
            rss = rep["memory"]["peak_rss_mib"]
            return {"rate": frames / rep["timing"]["receive_s"],
                    "e2e_rate": frames / (t_result - t_arm),
                    "receiver_rss_mib": rep["memory"]["receiver_peak_rss_mib"],
                    "worker_rss_mib": max(r for i, r in enumerate(rss) if i != 0),
                    "cpu_s": ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime,
                    "timing": dict(rep["timing"], exit_after_report_s=round(t_exit - t_result, 3))}
    finally:
        sim.stop()


_INGEST = """
import json, resource, sys, time
from streams.protocols.dectris_legacy.receiver import LegacyReceiver
from streams.codecs import decoder_name
frames = []
rx = LegacyReceiver(lambda p: frames.append(len(p.frames)), sys.argv[1], partition_frames=128,
                    memory_bytes=256 << 20, idle_timeout=60)
rx.connect()
print("ready", flush=True)
c0 = time.process_time()
(rep,) = rx.serve(1, timeout=600)
cpu = time.process_time() - c0
try:
    name = decoder_name(True)
except TypeError:
    name = decoder_name()
print(json.dumps({"n": int(rep.frames_complete.sum()), "s": rep.last_message - rep.first_message,
                  "cpu_s": cpu, "decoder": name,
                  "rss_mib": int(open("/proc/self/status").read().split("VmHWM:")[1]
                                 .split()[0]) / 1024}))
"""


def _ingest(dump: str, frames: int, root: Path = ROOT) -> dict:
    """One legacy receiver process alone (the tree at ``root``): LiberTEM-live's simulator
    -> socket -> frames decoded into partitions, delivered to nothing. Frames/s over its
    first to last message and per CPU second of the receiving process."""
    from libertem_live.detectors.dectris.sim import DectrisSim
    import urllib.request

    sim = DectrisSim(path=dump, port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    try:
        env = dict(os.environ, PYTHONPATH=str(root))
        p = subprocess.Popen([sys.executable, "-c", _INGEST, f"tcp://127.0.0.1:{sim.zmqport}"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=tempfile.gettempdir())
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(p.communicate())
        time.sleep(0.5)
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{sim.port}/detector/api/1.8.0/command/arm", method="PUT"),
            timeout=10).read()
        out, err = p.communicate(timeout=900)
        line = [x for x in out.splitlines() if x.startswith("{")]
        if p.returncode or not line:
            raise RuntimeError(out + err)
        d = json.loads(line[-1])
        assert d["n"] == frames, d
        return {"rate": frames / d["s"], "per_cpu_s": frames / d["cpu_s"],
                "decoder": d["decoder"], "rss_mib": d["rss_mib"]}
    finally:
        sim.stop()


def _pairs(a: argparse.Namespace) -> int:
    """``--pairs N``: this tree's job against ``--baseline``'s, alternating, in one run."""
    roots = {"this tree": ROOT, "baseline": Path(a.baseline)}
    runs: dict = {k: [] for k in roots}
    with tempfile.TemporaryDirectory() as tmp, LoadSampler() as load:
        dump = Path(tmp) / "bench.dump"
        make_dump(dump, a.frames, tuple(a.shape))
        for i in range(a.pairs):
            for k in (list(roots) if i % 2 == 0 else list(roots)[::-1]):
                d = _mpistage(str(dump), a.frames, roots[k])
                runs[k].append({"rate": d["rate"], "e2e_rate": d["e2e_rate"],
                                "job_cpu_s": d["cpu_s"], **d["timing"]})
    keys = ("rate", "e2e_rate", "job_cpu_s", "finalized_after_last_message_s", "write_s",
            "exit_after_report_s")
    med = {k: {m: statistics.median(r[m] for r in v) for m in keys} for k, v in runs.items()}
    pair = {m: [x[m] / y[m] for x, y in zip(runs["this tree"], runs["baseline"])]
            for m in ("rate", "e2e_rate")}
    res = {"frames": a.frames, "pairs": a.pairs, "baseline": a.baseline, "runs": runs,
           "median": med, "pair_ratios": pair, "load": load.summary()}
    Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# DECTRIS legacy job: this tree against {a.baseline}, {a.pairs} alternating "
             f"pairs ({a.frames} frames {a.shape[0]}x{a.shape[1]} uint16 bslz4)", "",
             "| medians | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(f"{v[m]:,.0f}" if "rate" in m else f"{v[m]:.3f}"
                                       for m in keys) + " |" for k, v in med.items()]
    lines += [""] + [f"this tree / baseline, {m}: median **{statistics.median(v):.2f}x**, "
                     f"pairs {', '.join(f'{x:.2f}' for x in v)}" for m, v in pair.items()]
    lines += ["", load.text()]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=8000)
    ap.add_argument("--shape", type=int, nargs=2, default=(256, 256))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--baseline", help="another tree (git archive) whose job runs too")
    ap.add_argument("--no-e2e", dest="e2e", action="store_false",
                    help="skip LiberTEM-live's SumUDF runs (arm to result)")
    ap.add_argument("--ingest", action="store_true",
                    help="also one receiver process alone (no worker, no MPI): frames/s "
                    "and frames per CPU second, this tree and --baseline")
    ap.add_argument("--pairs", type=int, default=0,
                    help="only N alternating pairs of jobs, this tree and --baseline (no "
                    "LiberTEM-live): receiving and end-to-end rates, job CPU, scan end")
    ap.add_argument("--out", default=str(HERE / "results" / "dectris_legacy"))
    a = ap.parse_args()
    if a.pairs:
        return _pairs(a)
    ingest: dict = {}
    ours = ["mpistage"] + (["mpistage (baseline)"] if a.baseline else [])
    rates: dict = {"libertem-live": [], "libertem-live (stamps)": [], **{k: [] for k in ours}}
    e2e: dict = {"libertem-live run_udf(SumUDF)": [], **{k: [] for k in ours}}
    rss: dict = {"libertem-live": [], **{k: [] for k in ours}}
    timing: dict = {k: [] for k in ours}
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "bench.dump"
        size = make_dump(dump, a.frames, tuple(a.shape))
        with LoadSampler() as load:
            for rnd in range(a.repeat):
                sides = ["ll"] + ours
                if rnd % 2:                 # alternate who goes first
                    sides.reverse()
                for side in sides:
                    if side == "ll":
                        d = _libertem_live(str(dump), a.frames)
                        rates["libertem-live"].append(a.frames / d["s"])
                        rates["libertem-live (stamps)"].append(a.frames / d["stamps_s"])
                        rss["libertem-live"].append(d["rss"])
                        if a.e2e:
                            d = _libertem_live(str(dump), a.frames, "sum")
                            e2e["libertem-live run_udf(SumUDF)"].append(a.frames / d["e2e_s"])
                        continue
                    root = Path(a.baseline) if side.endswith("(baseline)") else ROOT
                    if a.ingest:
                        ingest.setdefault(side, []).append(_ingest(str(dump), a.frames, root))
                    d = _mpistage(str(dump), a.frames, root)
                    rates[side].append(d["rate"])
                    e2e[side].append(d["e2e_rate"])
                    timing[side].append(dict(d["timing"], job_cpu_s=round(d["cpu_s"], 3)))
                    rss[side].append({"receiver_mib": d["receiver_rss_mib"],
                                      "worker_mib": d["worker_rss_mib"]})
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    emed = {k: statistics.median(v) for k, v in e2e.items() if v}
    ll = med["libertem-live"]
    res = {"frames": a.frames, "shape": list(a.shape), "dump_bytes": size,
           "rates_frames_per_s": rates, "median": med,
           "ratio_mpistage_over_libertem_live": med["mpistage"] / ll,
           "ratio_mpistage_over_libertem_live_stamps":
               med["mpistage"] / med["libertem-live (stamps)"],
           "e2e_frames_per_s": e2e, "e2e_median": emed, "peak_rss": rss,
           "job_timing": timing, "ingest_alone": ingest,
           "load": load.summary()}
    if a.e2e:
        res["e2e_ratio"] = emed["mpistage"] / emed["libertem-live run_udf(SumUDF)"]
    if a.baseline:
        res["baseline"] = a.baseline
        res["ratio_baseline_over_libertem_live"] = med["mpistage (baseline)"] / ll
        res["speedup_over_baseline"] = med["mpistage"] / med["mpistage (baseline)"]
        if a.e2e:
            res["e2e_speedup_over_baseline"] = emed["mpistage"] / emed["mpistage (baseline)"]
    Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# DECTRIS legacy stream: one receiver here vs LiberTEM-live "
             f"({a.frames} frames {a.shape[0]}x{a.shape[1]} uint16 bslz4, "
             f"{size / a.frames / 1024:.1f} KiB/frame)", "",
             "Receiving (ours: the report's first to last message at the receiver, one "
             "worker beside it; LiberTEM-live: arm to its last frame, and first to last "
             "stamp):", "", "| | frames/s (median) | runs |", "|---|---|---|"]
    for k, v in rates.items():
        lines.append(f"| {k} | {med[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
    lines += ["", "ratio mpistage / LiberTEM-live: "
              f"**{res['ratio_mpistage_over_libertem_live']:.2f}** (over its stamps window: "
              f"{res['ratio_mpistage_over_libertem_live_stamps']:.2f})"]
    if a.baseline:
        lines.append(f"baseline ({a.baseline}) / LiberTEM-live: "
                     f"{res['ratio_baseline_over_libertem_live']:.2f}; this tree / baseline: "
                     f"**{res['speedup_over_baseline']:.2f}x**")
    if a.e2e:
        lines += ["", "End to end with SumUDF (arm to result):", "",
                  "| | frames/s (median) | runs |", "|---|---|---|"]
        for k, v in e2e.items():
            lines.append(f"| {k} | {emed[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
        lines += ["", f"ratio mpistage / LiberTEM-live run_udf: **{res['e2e_ratio']:.2f}**"]
        if a.baseline:
            lines.append(f"this tree / baseline: {res['e2e_speedup_over_baseline']:.2f}x")
    if ingest:
        lines += ["", "One receiver process alone (no worker, no MPI; delivered partitions "
                  "dropped):", "", "| | frames/s (median) | frames per CPU second (median) "
                  "| runs (frames/s) | decoder | peak RSS MiB |", "|---|---|---|---|---|---|"]
        for k, v in ingest.items():
            runs = ", ".join(f"{x['rate']:,.0f}" for x in v)
            lines.append(f"| {k} | {statistics.median(x['rate'] for x in v):,.0f} | "
                         f"{statistics.median(x['per_cpu_s'] for x in v):,.0f} | {runs} | "
                         f"{v[0]['decoder']} | {max(x['rss_mib'] for x in v):.0f} |")
    lines += ["", "Scan end, seconds (medians; the report's last message to its write, and "
              "the job's exit after the report appeared): " + "; ".join(
                  f"{k}: {statistics.median(t['finalized_after_last_message_s'] for t in v):.3f}"
                  f", exit {statistics.median(t['exit_after_report_s'] for t in v):.2f}"
                  for k, v in timing.items() if v)]
    lines += ["", "CPU seconds of the whole job (its ranks and mpirun, start to exit; the "
              "figure least bent by the load) per 1,000 frames, medians: " + "; ".join(
                  f"{k}: {statistics.median(t['job_cpu_s'] for t in v) * 1000 / a.frames:.2f}"
                  for k, v in timing.items() if v)]
    lines += ["", "Peak RSS (MiB, largest of the runs): "
              + "; ".join(f"{k}: " + ", ".join(f"{n} {max(r[n] for r in v):.0f}"
                                              for n in v[0]) for k, v in rss.items() if v)]
    lines += ["", load.text()]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
