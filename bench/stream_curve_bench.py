"""The cost of CURVE on native-protocol ingest: the same receiver, plain and CURVE, one run.

One producer process sends the same valid ``mpistage-stream/1`` messages (F
frames of ROWS x COLS uint16 in S sectors, raw) over loopback to

- a bare pyzmq PULL socket that only receives, plain and CURVE (what libsodium's
  encryption costs ZeroMQ itself, with no protocol work), and
- a :class:`streams.Receiver` (check, assemble, deliver to a no-op), built
  with ``--insecure``'s security (plain) and with a job's CURVE security (server
  key pair, the client certificate written as the job writes it, ZAP, the
  handshake monitor),

alternating the four, ``--repeat`` times each, in the same run. Reported: GB/s
and frames/s (first message to last, median of the repeats), the ratio CURVE /
plain for each, the CPU seconds per GB of the receiving process (all its threads:
libzmq's I/O thread decrypts) and of the producer process (it encrypts), and the
load average. On a shared 2-CPU machine producer and receiver compete for the
same cores, so the loopback ratio also pays the producer's encryption, which on a
cluster runs on the detector's own servers: the CPU figures separate the two.

    .venv/bin/python bench/stream_curve_bench.py              # 576x576 frames, 4 sectors
    .venv/bin/python bench/stream_curve_bench.py --frames 500 --repeat 5
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loadavg import LoadSampler  # noqa: E402


def produce(endpoint: str, frames: int, shape, sectors: int, hwm: int,
            keys: Optional[tuple], me: int = 0, producers: int = 1) -> None:
    """Producer ``me`` of ``producers`` (own process): begin, the S sectors of frames
    ``me, me + P, ...``, end; a CURVE client if ``keys`` (server public key, certificate)."""
    import zmq

    from streams.protocol import ScanGeometry
    from streams.protocols.native.headers import encode_begin, encode_data, encode_end
    from streams.security import client_keys

    g = ScanGeometry("bench", producers, frames, sectors, tuple(shape), "<u2", (1, frames))
    rng = np.random.default_rng(0)
    img = rng.integers(0, 1000, g.shape).astype("<u2")
    payloads = [img[slice(*g.sector_rows(s))].tobytes() for s in range(sectors)]
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, hwm)
    if keys is not None:
        client_keys(s, *keys)
    s.connect(endpoint)
    s.send_multipart([encode_begin(g, me), b""])
    mine = range(me, frames, producers)
    for f in mine:
        for k in range(sectors):
            s.send_multipart([encode_data("bench", f, k, g.sector_rows(k)), payloads[k]],
                             copy=False)
    s.send_multipart([encode_end("bench", me, len(mine) * sectors), b""])
    s.close(linger=-1)
    ctx.term()


def _start(a: Any, ep: str, keys: Optional[tuple]) -> list:
    ps = [mp.Process(target=produce, args=(ep, a.frames, a.shape, a.sectors, a.hwm, keys, i,
                                            a.producers)) for i in range(a.producers)]
    for p in ps:
        p.start()
    return ps


def run_bare(a: Any, sec: Any) -> tuple:
    """A bare PULL socket (plain, or a CURVE server with the job's keys) that only receives."""
    import zmq

    ctx = zmq.Context(io_threads=a.io_threads)
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, a.hwm)
    keys = None
    if sec.curve:
        s.setsockopt(zmq.CURVE_SERVER, 1)
        s.setsockopt(zmq.CURVE_SECRETKEY, sec.server_secret.encode())
        keys = (sec.server_public, sec.client_certificate)
    s.bind("tcp://127.0.0.1:*")
    ep = s.getsockopt(zmq.LAST_ENDPOINT).decode()
    c0, k0, th0 = time.process_time(), _children_cpu(), _threads_cpu()
    ps = _start(a, ep, keys)
    s.recv_multipart(copy=False)
    t0 = time.perf_counter()
    for _ in range(a.frames * a.sectors + 2 * a.producers - 1):
        s.recv_multipart(copy=False)
    dt = time.perf_counter() - t0
    cpu, busiest = time.process_time() - c0, _busiest(th0, _threads_cpu())
    for p in ps:
        p.join()
    s.close(linger=0)
    ctx.term()
    return dt, cpu, _children_cpu() - k0, busiest


def _threads_cpu() -> dict:
    """CPU seconds (user + system) of each thread of this process (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _busiest(before: dict, after: dict) -> float:
    return max((t - before.get(tid, 0.0) for tid, t in after.items()), default=0.0)


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_receiver(a: Any, sec: Any) -> tuple:
    from streams import Receiver

    delivered = [0]

    def deliver(part: Any) -> None:
        delivered[0] += len(part.frames)

    import zmq

    ctx = zmq.Context(io_threads=a.io_threads)
    rx = Receiver(deliver, rcvhwm=a.hwm, partition_frames=a.partition_frames, security=sec,
                  context=ctx)
    ep = rx.bind()
    keys = (sec.server_public, sec.client_certificate) if sec.curve else None
    c0, k0, th0 = time.process_time(), _children_cpu(), _threads_cpu()
    ps = _start(a, ep, keys)
    (rep,) = rx.serve(1, timeout=600)
    cpu, busiest = time.process_time() - c0, _busiest(th0, _threads_cpu())
    for p in ps:
        p.join()
    rx.close()
    ctx.term()
    if not rep.ok or delivered[0] != a.frames or rep.refused:
        raise SystemExit(f"receiver lost data or refused: {rep.summary()}")
    return rep.last_message - rep.first_message, cpu, _children_cpu() - k0, busiest


def main() -> int:
    import zmq

    from streams.security import StreamSecurity

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--shape", type=int, nargs=2, default=(576, 576))
    ap.add_argument("--sectors", type=int, default=4)
    ap.add_argument("--partition-frames", type=int, default=16)
    ap.add_argument("--hwm", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--producers", type=int, default=1, help="producer processes")
    ap.add_argument("--io-threads", type=int, default=1,
                    help="ZeroMQ I/O threads of the receiving context (both modes)")
    ap.add_argument("--name", default="stream_curve", help="result file name")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    if not zmq.has("curve"):
        raise SystemExit("this libzmq has no CURVE (zmq.has('curve') is False)")
    frame_bytes = a.shape[0] * a.shape[1] * 2
    nbytes = a.frames * frame_bytes
    names = ("bare_plain", "bare_curve", "receiver_plain", "receiver_curve")
    times: dict = {k: [] for k in names}
    rcpu: dict = {k: [] for k in names}
    pcpu: dict = {k: [] for k in names}
    tcpu: dict = {k: [] for k in names}
    with tempfile.TemporaryDirectory() as d:
        curve = StreamSecurity.for_job(os.path.join(d, "rv.json"))
        plain = StreamSecurity.insecure()
        with LoadSampler(interval=2.0) as load:
            for _ in range(a.repeat):
                for name in names:
                    fn = run_bare if name.startswith("bare") else run_receiver
                    t, rc, pc, tc = fn(a, curve if name.endswith("curve") else plain)
                    times[name].append(t)
                    tcpu[name].append(tc)
                    rcpu[name].append(rc)
                    pcpu[name].append(pc)
    med = {k: statistics.median(v) for k, v in times.items()}
    res: dict = {
        "frames": a.frames, "shape": list(a.shape), "sectors": a.sectors,
        "message_bytes": frame_bytes // a.sectors, "partition_frames": a.partition_frames,
        "hwm": a.hwm, "repeat": a.repeat, "producers": a.producers,
        "io_threads": a.io_threads, "seconds": times,
        "GBps": {k: nbytes / t / 1e9 for k, t in med.items()},
        "frames_per_s": {k: a.frames / t for k, t in med.items()},
        "ratio_receiver_curve_to_plain": med["receiver_plain"] / med["receiver_curve"],
        "ratio_bare_curve_to_plain": med["bare_plain"] / med["bare_curve"],
        # per repeat, each pair measured back to back: the spread of the ratio under load
        "ratio_receiver_per_repeat": [p / c for p, c in zip(times["receiver_plain"],
                                                            times["receiver_curve"])],
        "receiver_cpu_s_per_GB": {k: statistics.median(v) / (nbytes / 1e9)
                                  for k, v in rcpu.items()},
        "producer_cpu_s_per_GB": {k: statistics.median(v) / (nbytes / 1e9)
                                  for k, v in pcpu.items()},
        "busiest_thread_cpu_s_per_GB": {k: statistics.median(v) / (nbytes / 1e9)
                                        for k, v in tcpu.items()},
        "load": load.summary(), "cpus": os.cpu_count(),
        "libzmq": zmq.zmq_version(), "pyzmq": zmq.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    g, fps = res["GBps"], res["frames_per_s"]
    rr = res["ratio_receiver_curve_to_plain"]
    md = [
        "# The cost of CURVE on native-protocol ingest (loopback, "
        "`bench/stream_curve_bench.py`)", "",
        f"{a.frames} frames of {a.shape[0]}x{a.shape[1]} uint16 in {a.sectors} sectors "
        f"({res['message_bytes'] / 1024:.0f} KiB messages), {a.producers} producer "
        f"process(es), {a.io_threads} ZeroMQ I/O thread(s) receiving, raw; "
        f"median of {a.repeat} runs of each, the four alternating; libzmq "
        f"{res['libzmq']}, pyzmq {res['pyzmq']}; {load.text()} "
        f"({res['cpus']} CPUs shared with other jobs: absolute figures move with the load, "
        "the ratios are taken from runs back to back).", "",
        "| receiver | plain GB/s | plain frames/s | CURVE GB/s | CURVE frames/s | "
        "CURVE / plain |", "|---|---|---|---|---|---|",
        f"| bare pyzmq PULL (receive only) | {g['bare_plain']:.2f} | {fps['bare_plain']:.0f} | "
        f"{g['bare_curve']:.2f} | {fps['bare_curve']:.0f} | "
        f"{res['ratio_bare_curve_to_plain']:.2f} |",
        f"| streams.Receiver (check, assemble, deliver) | {g['receiver_plain']:.2f} | "
        f"{fps['receiver_plain']:.0f} | {g['receiver_curve']:.2f} | "
        f"{fps['receiver_curve']:.0f} | **{rr:.2f}** |", "",
        f"Target: CURVE >= 0.8x plain for the receiver: **{'met' if rr >= 0.8 else 'NOT met'}**"
        f" ({rr:.2f}; per repeat: "
        + ", ".join(f"{x:.2f}" for x in res["ratio_receiver_per_repeat"]) + ").", "",
        "CPU seconds per GB received (median; receiving process: every thread, "
        "libzmq's I/O thread included; producer: its whole process):", "",
        "| | receiving process, plain | receiving process, CURVE | producer, plain | "
        "producer, CURVE |", "|---|---|---|---|---|",
    ]
    rc_, pc_ = res["receiver_cpu_s_per_GB"], res["producer_cpu_s_per_GB"]
    bt = res["busiest_thread_cpu_s_per_GB"]
    for kind, label in (("bare", "bare pyzmq PULL"), ("receiver", "streams.Receiver")):
        md.append(f"| {label} | {rc_[kind + '_plain']:.2f} | {rc_[kind + '_curve']:.2f} | "
                  f"{pc_[kind + '_plain']:.2f} | {pc_[kind + '_curve']:.2f} |")
    res["ratio_receiver_busiest_thread"] = bt["receiver_plain"] / bt["receiver_curve"]
    md += ["", "The receiving process's busiest thread (libzmq's I/O thread decrypts, the "
           "Python thread checks and assembles; each could have a core of its own on a "
           f"receiving node): Receiver plain {bt['receiver_plain']:.2f}, CURVE "
           f"{bt['receiver_curve']:.2f} CPU s/GB, so a receiver whose threads each have a "
           f"core, fed by producers on other hosts, would ingest at about "
           f"**{res['ratio_receiver_busiest_thread']:.2f}x** plain with CURVE (an estimate "
           "from CPU time, not a measured rate)."]
    (out / f"{a.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / f"{a.name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
