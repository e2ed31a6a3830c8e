"""Ingest of the native-protocol receiver against a bare pyzmq PUSH/PULL pair (loopback).

One producer process sends the same valid ``mpistage-stream/1`` messages (a scan
of F frames of ROWS x COLS uint16 in S sectors, raw) to

- a bare PULL socket that only receives (``recv_multipart(copy=False)``) and counts,
- the same, plus one copy of each payload into a frame buffer (what any receiver
  that keeps the data must do: it separates the protocol's cost from the copy's),
- a :class:`streams.Receiver` that checks every header, assembles every
  sector into its partition and delivers the partitions (to a no-op consumer),

alternating, ``--repeat`` times each, in the same run. Reported: GB/s and
frames/s (from the first message to the last), the ratio receiver / bare (the
issue's target: >= 0.70), the assembler's memory bound, the peak RSS of this
process, and the load average. ``--codecs`` adds the bslz4 decode time per frame
with dectris-compression and with the numpy+lz4 fallback.

    .venv/bin/python bench/stream_bench.py                 # 576x576 frames, 4 sectors
    .venv/bin/python bench/stream_bench.py --frames 500 --repeat 2 --codecs
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loadavg import LoadSampler  # noqa: E402


def produce(endpoint: str, frames: int, shape, sectors: int, hwm: int) -> None:
    """The sender (own process): begin, F x S data messages, end -- built once, sent raw."""
    import zmq

    from streams.protocol import ScanGeometry
    from streams.protocols.native.headers import encode_begin, encode_data, encode_end

    g = ScanGeometry("bench", 1, frames, sectors, tuple(shape), "<u2", (1, frames))
    rng = np.random.default_rng(0)
    img = rng.integers(0, 1000, g.shape).astype("<u2")
    payloads = [img[slice(*g.sector_rows(s))].tobytes() for s in range(sectors)]
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, hwm)
    s.connect(endpoint)
    s.send_multipart([encode_begin(g, 0), b""])
    for f in range(frames):
        for k in range(sectors):
            s.send_multipart([encode_data("bench", f, k, g.sector_rows(k)), payloads[k]],
                             copy=False)
    s.send_multipart([encode_end("bench", 0, frames * sectors), b""])
    s.close(linger=-1)
    ctx.term()


def run_bare(a, copy: bool = False) -> float:
    """Receive only; with ``copy``, also copy each payload into one frame buffer (the one
    copy any receiver that keeps the data must make)."""
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, a.hwm)
    s.bind("tcp://127.0.0.1:*")
    ep = s.getsockopt(zmq.LAST_ENDPOINT).decode()
    p = mp.Process(target=produce, args=(ep, a.frames, a.shape, a.sectors, a.hwm))
    p.start()
    total = a.frames * a.sectors + 2
    rows = a.shape[0] // a.sectors
    buf = np.empty((a.partition_frames, a.shape[0], a.shape[1]), "<u2")
    s.recv_multipart(copy=False)
    t0 = time.perf_counter()
    for i in range(total - 1):
        parts = s.recv_multipart(copy=False)
        if copy and len(parts[1]):
            k = i % a.sectors
            dst = buf[(i // a.sectors) % a.partition_frames, k * rows:(k + 1) * rows]
            dst.reshape(-1).view(np.uint8)[:] = np.frombuffer(parts[1], np.uint8)
    dt = time.perf_counter() - t0
    p.join()
    s.close(linger=0)
    ctx.term()
    return dt


def run_receiver(a) -> tuple:
    from streams import Receiver

    delivered = [0]

    def deliver(part):
        delivered[0] += len(part.frames)

    rx = Receiver(deliver, rcvhwm=a.hwm, partition_frames=a.partition_frames)
    ep = rx.bind()
    p = mp.Process(target=produce, args=(ep, a.frames, a.shape, a.sectors, a.hwm))
    p.start()
    (rep,) = rx.serve(1, timeout=600)
    p.join()
    rx.close()
    if not rep.ok or delivered[0] != a.frames:
        raise SystemExit(f"receiver lost data: {rep.summary()}")
    return rep.last_message - rep.first_message, rep.buffer_bytes


def codec_times(shape, reps: int = 20) -> dict:
    from streams import codecs

    rng = np.random.default_rng(1)
    img = (rng.poisson(0.05, shape) * 100).astype("<u2")
    payload = codecs.encode("bslz4", img)
    out = np.empty_like(img)
    res = {"ratio": img.nbytes / len(payload)}
    for name in ("dectris-compression", "numpy+lz4"):
        saved = codecs._dectris
        if name == "numpy+lz4":
            codecs._dectris = lambda: None
        elif codecs._dectris() is None:
            continue
        try:
            t = time.perf_counter()
            for _ in range(reps):
                codecs.decode_into("bslz4", payload, out)
            res[name + "_ms"] = (time.perf_counter() - t) / reps * 1e3
        finally:
            codecs._dectris = saved
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--shape", type=int, nargs=2, default=(576, 576))
    ap.add_argument("--sectors", type=int, default=4)
    ap.add_argument("--partition-frames", type=int, default=16)
    ap.add_argument("--hwm", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--codecs", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    frame_bytes = a.shape[0] * a.shape[1] * 2
    nbytes = a.frames * frame_bytes
    bare, copied, ours = [], [], []
    with LoadSampler(interval=2.0) as load:
        for _ in range(a.repeat):
            bare.append(run_bare(a))
            copied.append(run_bare(a, copy=True))
            dt, pool = run_receiver(a)
            ours.append(dt)
        codecs = codec_times(tuple(a.shape)) if a.codecs else None
    tb, tc, to = statistics.median(bare), statistics.median(copied), statistics.median(ours)
    res = {
        "frames": a.frames, "shape": list(a.shape), "sectors": a.sectors,
        "message_bytes": frame_bytes // a.sectors, "partition_frames": a.partition_frames,
        "hwm": a.hwm, "repeat": a.repeat, "bare_s": bare, "receiver_s": ours,
        "bare_GBps": nbytes / tb / 1e9, "receiver_GBps": nbytes / to / 1e9,
        "bare_frames_per_s": a.frames / tb, "receiver_frames_per_s": a.frames / to,
        "bare_copy_s": copied, "bare_copy_GBps": nbytes / tc / 1e9,
        "bare_copy_frames_per_s": a.frames / tc,
        "ratio": tb / to, "ratio_to_bare_copy": tc / to, "assembler_buffer_bytes": pool,
        "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": load.summary(), "cpus": os.cpu_count(), "codecs": codecs,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stream.json").write_text(json.dumps(res, indent=1) + "\n")
    md = [
        "# Native-protocol ingest (loopback, `bench/stream_bench.py`)", "",
        f"{a.frames} frames of {a.shape[0]}x{a.shape[1]} uint16 in {a.sectors} sectors "
        f"({res['message_bytes'] / 1024:.0f} KiB messages), 1 producer process, raw; "
        f"median of {a.repeat} alternating runs; {load.text()}.", "",
        "| receiver | GB/s | frames/s |", "|---|---|---|",
        f"| bare pyzmq PULL (receive only) | {res['bare_GBps']:.2f} | "
        f"{res['bare_frames_per_s']:.0f} |",
        f"| bare pyzmq PULL + one copy of each payload into a frame buffer | "
        f"{res['bare_copy_GBps']:.2f} | {res['bare_copy_frames_per_s']:.0f} |",
        f"| streams.Receiver (check, assemble, deliver) | {res['receiver_GBps']:.2f} | "
        f"{res['receiver_frames_per_s']:.0f} |", "",
        f"Receiver / bare: **{res['ratio']:.2f}** (target >= 0.70); receiver / bare with the "
        f"copy: {res['ratio_to_bare_copy']:.2f}. Partition memory the "
        f"assembler allocated: {pool / 2**20:.1f} MiB (bound: 256 MiB per open scan); peak "
        f"RSS of the benchmark process {res['peak_rss_MiB']:.0f} MiB.",
    ]
    if codecs:
        md += ["", f"bslz4 decode of one frame (compression ratio {codecs['ratio']:.1f}): "
               + ", ".join(f"{k[:-3]} {v:.2f} ms" for k, v in codecs.items() if k != "ratio")]
    (out / "stream.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
