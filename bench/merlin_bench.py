"""Quantum Detectors Merlin: frames/s of one receiver here vs LiberTEM-live, same frames.

One MIB file of F frames (ROWS x COLS, 12-bit counter depth: ``MQ1`` frames of big-endian
``U16``, written with our encoder, which the tests check against LiberTEM's own MIB
reader) is served by LiberTEM-live's own Merlin simulator
(``libertem_live.detectors.merlin.sim.CameraSim``: the MIB file replayed over the data
port once ``STARTACQUISITION`` and ``SOFTTRIGGER`` arrive on its control port; from
memory, ``cached="MEM"``, its cache filled by one acquisition drained first
(:func:`warm`): its file-reading sender, with a progress bar, sends only a few hundred
frames/s here and would be what both measure) into, in turn and alternating
``--repeat`` times:

- **LiberTEM-live**: ``LiveContext`` with one worker process (``PipelinedExecutor``,
  ``cpus=range(1)``) and its ``libertem_qd_mpx`` receiver, armed and triggered from its
  ``on_ready_for_data`` hook through its own ``MerlinControl``; ``run_udf`` of a UDF that
  stamps ``time.perf_counter()`` per frame. The rate: frames over the hook's trigger to
  the last stamp (its receiver buffers ahead of the UDF into shared memory, so the
  first-to-last stamp window -- recorded too, ``libertem-live (stamps)`` -- can be a
  burst of buffered frames, not the receiving rate; the trigger-to-last window adds
  its start latency, a few ms);
- **mpistage**: ``mpirun -n 2 stager stream receive --protocol merlin --control
  merlin://`` (one receiver, one worker) with LiberTEM's ``SumUDF``; the rate: frames
  over the job report's ``receive_s`` (first to last message at the receiver, the
  worker running beside it).

Both run two processes on the same 2 cores (plus the simulator's sender thread). The
ratio of the two rates in one run is the figure (load average recorded beside it).
``--baseline DIR`` (a ``git archive`` of an earlier commit) runs that tree's job too,
alternating, so before and after come from one run. ``--ingest`` adds one receiver
process alone (no worker, no MPI): frames/s and frames per CPU second, ours and
LiberTEM-live's (``libertem_qd_mpx``'s receiver, its frame stacks decoded into a buffer as
its workers do: the per-core comparison of the two receivers). Peak RSS:
LiberTEM-live's main process (its receiver, and also the simulator with its in-memory
copy of the MIB file) and the receiver alone by ``VmHWM`` (an exec'd child's
``ru_maxrss`` starts at its parent's RSS), the job's ranks from its report,
LiberTEM-live's worker by ``RUSAGE_CHILDREN`` (an upper bound for that reason).

    .venv/bin/python bench/merlin_bench.py --frames 4000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from loadavg import LoadSampler  # noqa: E402

DEPTH = 12


def make_mib(tmp: Path, frames: int, shape, nx: int) -> Path:
    """``scan.mib`` + ``scan.hdr``: 16 distinct sparse frames, repeated (4D-STEM-like)."""
    from streams.protocols.merlin.mpx import encode_frame, encode_hdr

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    disk = ((yy - shape[0] / 2) ** 2 + (xx - shape[1] / 2) ** 2) < (shape[0] / 8) ** 2
    distinct = [np.minimum(rng.poisson(0.05, shape) + disk * rng.poisson(20, shape), 4095)
                for _ in range(16)]
    encoded = [encode_frame(1, a, DEPTH) for a in distinct]
    with open(tmp / "scan.mib", "wb") as f:
        for i in range(frames):
            # the sequence number is the 2nd field: "MQ1,000001,..."
            f.write(encoded[i % 16].replace(b"MQ1,000001,", f"MQ1,{i + 1:06d},".encode(), 1))
    hdr = tmp / "scan.hdr"
    hdr.write_bytes(encode_hdr(frames, nx, DEPTH))
    return hdr


def warm(data_port: int, control_port: int, nbytes: int) -> None:
    """One acquisition of the simulator drained and dropped: its ``cached="MEM"`` copy
    is filled, and the next acquisitions are sent from memory."""
    import socket
    import time

    from libertem_live.detectors.merlin.control import MerlinControl

    with socket.create_connection(("127.0.0.1", data_port)) as s:
        with MerlinControl(host="127.0.0.1", port=control_port) as c:
            c.cmd("STARTACQUISITION")
            c.cmd("SOFTTRIGGER")
        s.settimeout(20.0)      # its first, file-reading acquisition stalls under load
        got, end = 0, time.monotonic() + 600
        while got < nbytes and time.monotonic() < end:
            b = s.recv(1 << 20)
            if not b:
                break
            got += len(b)
    time.sleep(0.5)          # the simulator sees the connection closed


def _libertem_live(hdr: str, nav, nbytes: int) -> tuple:
    """LiberTEM-live's rate (in a subprocess: its executor's workers)."""
    code = f"""
import resource, sys, json, time
T0 = []
sys.path.insert(0, {str(HERE)!r})
from dectris_legacy_stamp import StampUDF
from merlin_bench import warm
from libertem.executor.pipelined import PipelinedExecutor
from libertem_live.api import LiveContext
from libertem_live.hooks import Hooks
from libertem_live.detectors.merlin.control import MerlinControl
from libertem_live.detectors.merlin.sim import CameraSim


class Trigger(Hooks):
    def __init__(self, port):
        self.port = port

    def on_ready_for_data(self, env):
        with MerlinControl(host="127.0.0.1", port=self.port) as c:
            T0.append(time.perf_counter())     # CLOCK_MONOTONIC: the workers' clock too
            c.cmd("STARTACQUISITION")
            c.cmd("SOFTTRIGGER")


if __name__ == "__main__":
    sim = CameraSim(path={hdr!r}, nav_shape={tuple(nav)!r}, host="127.0.0.1", data_port=0,
                    control_port=0, trigger_port=0, wait_trigger=True, cached="MEM")
    sim.start(); sim.wait_for_listen()
    warm(sim.server_t.port, sim.control_t.port, {nbytes})
    ex = PipelinedExecutor(spec=PipelinedExecutor.make_spec(cpus=range(1), cudas=[]))
    with LiveContext(executor=ex) as ctx:
        with ctx.make_connection("merlin").open(
                api_host="127.0.0.1", api_port=sim.control_t.port, data_host="127.0.0.1",
                data_port=sim.server_t.port) as conn:
            aq = ctx.make_acquisition(conn=conn, nav_shape={tuple(nav)!r},
                                      hooks=Trigger(sim.control_t.port))
            r = ctx.run_udf(dataset=aq, udf=StampUDF())
    t = r["t"].data.ravel()
    sim.stop()
    rss = {{"main_mib": int(open("/proc/self/status").read().split("VmHWM:")[1]
                           .split()[0]) / 1024,
            "worker_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}
    print(json.dumps({{"n": int((t > 0).sum()), "s": float(t.max() - T0[0]),
                      "stamps_s": float(t.max() - t[t > 0].min()), "rss": rss}}))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=900, env=env)
    line = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode or not line:
        raise RuntimeError(f"LiberTEM-live run failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    d = json.loads(line[-1])
    frames = nav[0] * nav[1]
    assert d["n"] == frames, d
    return frames / d["s"], frames / d["stamps_s"], d["rss"]


def _mpistage(hdr: str, nav, nbytes: int, root: Path = ROOT) -> tuple:
    from libertem_live.detectors.merlin.sim import CameraSim

    frames = nav[0] * nav[1]
    sim = CameraSim(path=hdr, nav_shape=tuple(nav), host="127.0.0.1", data_port=0,
                    control_port=0, trigger_port=0, wait_trigger=True, cached="MEM")
    sim.start()
    sim.wait_for_listen()
    warm(sim.server_t.port, sim.control_t.port, nbytes)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, PYTHONPATH=str(root), OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            r = subprocess.run(
                ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "stager",
                 "stream", "receive", "--rendezvous", f"{tmp}/rv.json", "--out",
                 f"{tmp}/out", "--local", f"{tmp}/local/%n", "--bind", "127.0.0.1",
                 "--insecure", "--protocol", "merlin", "--merlin-endpoint",
                 f"127.0.0.1:{sim.server_t.port}", "--control",
                 f"merlin://127.0.0.1:{sim.control_t.port}", "--merlin-scan-shape",
                 f"{nav[0]},{nav[1]}", "--analysis", "udf:libertem.udf.sum:SumUDF",
                 "--partition-frames", "128", "--live-interval", "5", "--timeout", "600"],
                env=env, capture_output=True, text=True, timeout=900)
            if r.returncode:
                raise RuntimeError(r.stdout + r.stderr)
            (rep_path,) = Path(tmp, "out").glob("acquisition-*.json")
            rep = json.loads(rep_path.read_text())
            assert rep["frames_complete"] == frames, rep
            rss = rep["memory"]["peak_rss_mib"]
            return frames / rep["timing"]["receive_s"], {
                "receiver_mib": rep["memory"]["receiver_peak_rss_mib"],
                "worker_mib": max(x for i, x in enumerate(rss) if i != 0)}
    finally:
        sim.stop()


_INGEST = """
import json, resource, sys, time
from streams.protocols.merlin.receiver import MerlinReceiver
rx = MerlinReceiver(lambda p: None, "127.0.0.1", int(sys.argv[1]), partition_frames=128,
                    memory_bytes=256 << 20, idle_timeout=60, scan_shape=(-1, 100))
rx._connect()
print("ready", flush=True)
c0 = time.process_time()
(rep,) = rx.serve(1, timeout=600)
cpu = time.process_time() - c0
print(json.dumps({"n": int(rep.frames_complete.sum()), "s": rep.last_message - rep.first_message,
                  "cpu_s": cpu,
                  "rss_mib": int(open("/proc/self/status").read().split("VmHWM:")[1]
                                 .split()[0]) / 1024}))
"""


_LL_INGEST = """
import json, os, shutil, sys, tempfile, time
import numpy as np
import libertem_qd_mpx
frames, where = int(sys.argv[2]), tempfile.mkdtemp()
conn = libertem_qd_mpx.QdConnection(data_host="127.0.0.1", data_port=int(sys.argv[1]),
                                    frame_stack_size=16,
                                    shm_handle_path=os.path.join(where, "qd-shm-socket"))
conn.start_passive()
print("ready", flush=True)
assert conn.wait_for_arm(timeout=600) is not None
c0, t0 = time.process_time(), time.perf_counter()
cam = libertem_qd_mpx.CamClient(conn.get_socket_path())
buf = np.empty((128, 256, 256), np.uint16)
n = 0
while n < frames:
    st = conn.get_next_stack(max_size=128)
    if st is None:
        break
    k = len(st)
    cam.decode_range_into_buffer(st, buf[:k], 0, k)
    cam.done(st)
    n += k
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
print(json.dumps({"n": n, "s": wall, "cpu_s": cpu,
                  "rss_mib": int(open("/proc/self/status").read().split("VmHWM:")[1]
                                 .split()[0]) / 1024}))
cam.close()
conn.close()
shutil.rmtree(where, ignore_errors=True)
"""


def _ingest(hdr: str, nav, nbytes: int, root: Optional[Path] = ROOT) -> dict:
    """One Merlin receiver process alone (the tree at ``root``; None: LiberTEM-live's
    ``libertem_qd_mpx`` receiver, its frame stacks decoded into one 128-frame buffer as
    its workers do): LiberTEM-live's simulator -> TCP -> frames into partitions,
    delivered to nothing. Frames/s over its first to last message (LiberTEM-live's: from
    its arm, the acquisition header, to its last frame decoded) and per CPU second of
    the receiving process (all its threads)."""
    from libertem_live.detectors.merlin.control import MerlinControl
    from libertem_live.detectors.merlin.sim import CameraSim

    frames = nav[0] * nav[1]
    sim = CameraSim(path=hdr, nav_shape=tuple(nav), host="127.0.0.1", data_port=0,
                    control_port=0, trigger_port=0, wait_trigger=True, cached="MEM")
    sim.start()
    sim.wait_for_listen()
    warm(sim.server_t.port, sim.control_t.port, nbytes)
    try:
        env = dict(os.environ, PYTHONPATH=str(root or ROOT))
        code = [_INGEST] if root is not None else [_LL_INGEST]
        p = subprocess.Popen([sys.executable, "-c", *code, str(sim.server_t.port), str(frames)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=tempfile.gettempdir())
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(p.communicate())
        import time
        time.sleep(0.5)
        with MerlinControl(host="127.0.0.1", port=sim.control_t.port) as c:
            c.cmd("STARTACQUISITION")
            c.cmd("SOFTTRIGGER")
        out, err = p.communicate(timeout=900)
        line = [x for x in out.splitlines() if x.startswith("{")]
        if p.returncode or not line:
            raise RuntimeError(out + err)
        d = json.loads(line[-1])
        assert d["n"] == frames, d
        return {"rate": frames / d["s"], "per_cpu_s": frames / d["cpu_s"],
                "rss_mib": d["rss_mib"]}
    finally:
        sim.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=4000, help="a multiple of 100")
    ap.add_argument("--shape", type=int, nargs=2, default=(256, 256))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another tree (git archive) whose job runs too")
    ap.add_argument("--ingest", action="store_true",
                    help="also one receiver process alone (no worker, no MPI): frames/s "
                    "and frames per CPU second, this tree, --baseline and LiberTEM-live's "
                    "libertem_qd_mpx receiver")
    ap.add_argument("--only-ingest", action="store_true",
                    help="only that (no LiberTEM-live, no job)")
    ap.add_argument("--out", default=str(HERE / "results" / "merlin"))
    a = ap.parse_args()
    ingest: dict = {}
    nav = (a.frames // 100, 100)
    frames = nav[0] * nav[1]
    ours = ["mpistage"] + (["mpistage (baseline)"] if a.baseline else [])
    rates: dict = {"libertem-live": [], "libertem-live (stamps)": [], **{k: [] for k in ours}}
    rss: dict = {"libertem-live": [], **{k: [] for k in ours}}
    with tempfile.TemporaryDirectory() as tmp:
        hdr = make_mib(Path(tmp), frames, tuple(a.shape), nav[1])
        size = (Path(tmp) / "scan.mib").stat().st_size
        with LoadSampler() as load:
            for rnd in range(a.repeat):
                sides = ["ll"] + ours
                if rnd % 2:                 # alternate who goes first
                    sides.reverse()
                for side in sides:
                    if side == "ll" and (a.ingest or a.only_ingest):
                        ingest.setdefault("libertem-live", []).append(
                            _ingest(str(hdr), nav, size, None))
                    if a.only_ingest and side == "ll":
                        continue
                    if side == "ll":
                        rate, stamps, mem = _libertem_live(str(hdr), nav, size)
                        rates["libertem-live"].append(rate)
                        rates["libertem-live (stamps)"].append(stamps)
                        rss["libertem-live"].append(mem)
                        continue
                    root = Path(a.baseline) if side.endswith("(baseline)") else ROOT
                    if a.ingest or a.only_ingest:
                        ingest.setdefault(side, []).append(_ingest(str(hdr), nav, size, root))
                    if a.only_ingest:
                        continue
                    rate, mem = _mpistage(str(hdr), nav, size, root)
                    rates[side].append(rate)
                    rss[side].append(mem)
    if a.only_ingest:
        lines = _ingest_lines(ingest)
        Path(a.out + "_ingest.json").write_text(json.dumps(
            {"frames": frames, "ingest_alone": ingest, "load": load.summary()}, indent=1) + "\n")
        Path(a.out + "_ingest.md").write_text("\n".join(
            [f"# Merlin: one receiver process alone ({frames} frames)", ""] + lines
            + ["", load.text()]) + "\n")
        print("\n".join(lines + [load.text()]))
        return 0
    med = {k: statistics.median(v) for k, v in rates.items()}
    res = {"frames": frames, "shape": list(a.shape), "depth": DEPTH, "mib_bytes": size,
           "rates_frames_per_s": rates, "median": med,
           "ratio_mpistage_over_libertem_live": med["mpistage"] / med["libertem-live"],
           "peak_rss": rss, "ingest_alone": ingest, "load": load.summary()}
    if a.baseline:
        res["baseline"] = a.baseline
        res["ratio_baseline_over_libertem_live"] = \
            med["mpistage (baseline)"] / med["libertem-live"]
        res["speedup_over_baseline"] = med["mpistage"] / med["mpistage (baseline)"]
    Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# Merlin: one receiver here vs LiberTEM-live ({frames} frames "
             f"{a.shape[0]}x{a.shape[1]}, counter depth {DEPTH} (U16), "
             f"{size / frames / 1024:.1f} KiB/frame, LiberTEM-live's CameraSim)", "",
             "| | frames/s (median) | runs |", "|---|---|---|"]
    for k, v in rates.items():
        lines.append(f"| {k} | {med[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
    ratio = res["ratio_mpistage_over_libertem_live"]
    lines += ["", f"ratio mpistage / LiberTEM-live: **{ratio:.2f}**"]
    if a.baseline:
        lines.append(f"baseline ({a.baseline}) / LiberTEM-live: "
                     f"{res['ratio_baseline_over_libertem_live']:.2f}; this tree / baseline: "
                     f"**{res['speedup_over_baseline']:.2f}x**")
    lines += _ingest_lines(ingest)
    lines += ["", "Peak RSS (MiB, largest of the runs): "
              + "; ".join(f"{k}: " + ", ".join(f"{n} {max(r[n] for r in v):.0f}"
                                              for n in v[0]) for k, v in rss.items() if v)]
    lines += ["", load.text()]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _ingest_lines(ingest: dict) -> list:
    if not ingest:
        return []
    lines = ["", "One receiver process alone (no worker, no MPI; delivered partitions "
             "dropped):", "", "| | frames/s (median) | frames per CPU second (median) | "
             "runs (frames/s) | peak RSS MiB |", "|---|---|---|---|---|"]
    for k, v in ingest.items():
        runs = ", ".join(f"{x['rate']:,.0f}" for x in v)
        lines.append(f"| {k} | {statistics.median(x['rate'] for x in v):,.0f} | "
                     f"{statistics.median(x['per_cpu_s'] for x in v):,.0f} | {runs} | "
                     f"{max(x['rss_mib'] for x in v):.0f} |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
