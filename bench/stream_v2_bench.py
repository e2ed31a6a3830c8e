"""DECTRIS Stream V2 receiving: how far parallel clients scale past one decoding client.

One sender process binds a PUSH socket (as a DECTRIS detector does) and sends F
image messages of ROWS x COLS uint16, bslz4-compressed (sparse counts, as in
4D-STEM), built once; the same bytes go to every configuration, alternating,
``--repeat`` times each, in the same run:

- ``bare x1`` / ``bare x2``: 1 or 2 processes with a bare pyzmq PULL socket that
  only receive (the transport's ceiling);
- ``decode x1``: one process that receives, parses the CBOR
  (:func:`streams.protocols.stream2.streamv2.decode_message`) and decodes each payload into a
  frame buffer -- the "single decoding client" of issue 28;
- ``StreamV2Receiver x1, 2 decode threads``: one receiver whose payloads are decoded
  on 2 threads (``--v2-decode-threads 2``);
- ``StreamV2Receiver x1`` / ``x2`` (/ ``x3``): 1, 2 (3) processes each running the
  receiver of ``stager stream receive --stream2`` (decode, check, assemble,
  deliver to a no-op): what 1 or 2 receiving ranks on a node run
  (``--receivers-per-node 2``). Each applies the series' start itself, as the MPI
  layer shares it.

Rate = frames over the time from the first message received anywhere to the last
one. Per-core rate = frames / CPU seconds of the receiving processes
(``time.process_time`` around their loops). Also measured, without sockets:
decoding the same payloads in 1 and 2 threads of one process (does the decoder
release the GIL?). The machine has 2 cores, shared with other work and with the
sender: the load average is recorded beside the figures.

    .venv/bin/python bench/stream_v2_bench.py                  # 2000 x 512x512, 3 repeats
    .venv/bin/python bench/stream_v2_bench.py --frames 500 --repeat 1
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loadavg import LoadSampler  # noqa: E402

UID = "BENCH"
IDLE = 1.0     # a client stops after this long without a message (not timed)


def frames_cache(shape, distinct: int = 16):
    rng = np.random.default_rng(0)
    out = []
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    disk = ((yy - shape[0] / 2) ** 2 + (xx - shape[1] / 2) ** 2) < (shape[0] / 8) ** 2
    for _ in range(distinct):
        a = rng.poisson(0.05, shape) + disk * rng.poisson(20, shape)
        out.append(a.astype("<u2"))
    return out


def messages(n: int, shape):
    """n image messages (bytes), payloads built once for ``distinct`` frames."""
    import cbor2

    from streams.codecs import bslz4_encode
    from streams.protocols.stream2.streamv2 import COMPRESSION, MULTI_DIM, SELF_DESCRIBE

    payloads = [bslz4_encode(a) for a in frames_cache(shape)]
    out = []
    for i in range(n):
        p = payloads[i % len(payloads)]
        data = {"threshold_1": cbor2.CBORTag(MULTI_DIM, [list(shape), cbor2.CBORTag(
            69, cbor2.CBORTag(COMPRESSION, ["bslz4", 2, p]))])}
        m = {"type": "image", "series_id": 1, "series_unique_id": UID, "image_id": i,
             "real_time": [1, 50_000_000], "start_time": [i, 50_000_000],
             "stop_time": [i + 1, 50_000_000], "user_data": None, "data": data}
        out.append(cbor2.dumps(cbor2.CBORTag(SELF_DESCRIBE, m)))
    return out, sum(len(p) for p in payloads) / len(payloads)


def sender(endpoint_q, go, n: int, shape, hwm: int) -> None:
    import zmq

    msgs, _ = messages(n, shape)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, hwm)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    endpoint_q.put(f"tcp://127.0.0.1:{port}")
    go.wait()
    for m in msgs:
        s.send(m, copy=False)
    s.close(linger=-1)
    ctx.term()


def client(kind: str, endpoint: str, ready, results, shape, frames: int, hwm: int,
           threads: int = 0) -> None:
    """One receiving process; puts (count, t_first, t_last, cpu_s) in ``results``."""
    import zmq

    from streams.protocols.stream2.streamv2 import decode_message, encode_start

    count, first, last = 0, None, None
    if kind == "rx":
        from streams.protocols.stream2.receiver import StreamV2Receiver

        got = [0]

        def deliver(part):
            got[0] += len(part.frames)

        rx = StreamV2Receiver(deliver, endpoint, partition_frames=16, rcvhwm=hwm,
                              idle_timeout=600, decode_threads=threads)
        rx.apply_start(decode_message(encode_start(1, UID, frames, shape)))
        rx.connect()
        ready.put(1)
        cpu0 = time.process_time()
        while True:
            # poll here, not in step(): the clock starts when the first message is there
            ready_now = rx._sock.poll(50)
            now = time.perf_counter()
            if ready_now:
                first = first or now
                count += rx.step(0, max_messages=200)
                last = time.perf_counter()
            elif last is not None and now - last > IDLE:
                break
        rx.assembler.close_all()
        cpu = time.process_time() - cpu0
        rx.close()
        results.put((got[0], first, last, cpu))
        return
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, hwm)
    s.connect(endpoint)
    buf = np.empty(shape, "<u2")
    ready.put(1)
    cpu0 = time.process_time()
    while True:
        if not s.poll(50):
            if last is not None and time.perf_counter() - last > IDLE:
                break
            continue
        m = s.recv(copy=False)
        now = time.perf_counter()
        first = first or now
        if kind == "decode":
            im = decode_message(m.buffer)
            ch = im.data["threshold_1"]
            from streams.codecs import decode_into

            decode_into(ch.encoding, ch.payload, buf)
        last = time.perf_counter()
        count += 1
    cpu = time.process_time() - cpu0
    s.close(linger=0)
    ctx.term()
    results.put((count, first, last, cpu))


def run_once(kind: str, clients: int, frames: int, shape, hwm: int, threads: int = 0):
    ctx = mp.get_context("fork")
    eq, go, ready, results = ctx.Queue(), ctx.Event(), ctx.Queue(), ctx.Queue()
    snd = ctx.Process(target=sender, args=(eq, go, frames, shape, hwm))
    snd.start()
    ep = eq.get(timeout=120)
    procs = [ctx.Process(target=client, args=(kind, ep, ready, results, shape, frames, hwm,
                                              threads))
             for _ in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=60)
    time.sleep(0.5)         # every client connected: PUSH deals round-robin to peers
    go.set()
    outs = [results.get(timeout=600) for _ in procs]
    for p in procs + [snd]:
        p.join(60)
    n = sum(o[0] for o in outs)
    t = max(o[2] for o in outs) - min(o[1] for o in outs)
    cpu = sum(o[3] for o in outs)
    return {"frames": n, "seconds": t, "fps": n / t, "cpu_s": cpu,
            "per_client": [o[0] for o in outs]}


def job_once(np_: int, per_node: int, frames: int, shape, hwm: int, tmp: Path):
    """A real receiving job (``mpirun -n NP stager stream receive --stream2``, one
    emulated node, ``--receivers-per-node``): frames / (last - first message) from
    its report, and the job's own summary."""
    import subprocess

    import zmq

    from streams.protocols.stream2.streamv2 import encode_end, encode_start

    msgs, _ = messages(frames, shape)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, hwm)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    out = tmp / f"job-{np_}-{per_node}-{time.monotonic_ns()}"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    cmd = ["mpirun", "-n", str(np_), "--oversubscribe", sys.executable, "-m", "stager",
           "stream", "receive", "--stream2", f"tcp://127.0.0.1:{port}", "--rendezvous",
           str(out / "rv.json"), "--out", str(out / "out"), "--emulate-nodes", "1",
           "--receivers-per-node", str(per_node), "--bind", "127.0.0.1", "--local",
           str(out / "local" / "%n"), "--hwm", str(hwm), "--v2-grace", "0.5",
           "--partition-frames", "16"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    while not (out / "rv.json").exists():
        if p.poll() is not None:
            raise RuntimeError(p.communicate())
        time.sleep(0.1)
    time.sleep(1.0)
    s.send(encode_start(1, UID, frames, shape))
    for m in msgs:
        s.send(m, copy=False)
    s.send(encode_end(1, UID))
    o, e = p.communicate(timeout=600)
    s.close(linger=0)
    ctx.term()
    rep = json.loads((out / "out" / f"series-1-{UID}.json").read_text())
    t = rep["seconds"]
    return {"frames": rep["frames_complete"], "seconds": t,
            "fps": rep["frames_complete"] / t if t else 0.0, "rc": p.returncode,
            "receivers": rep["receivers"]}


def gil_check(shape, n: int = 400):
    """Decode the same payloads in 1 thread, then split over 2 threads."""
    from streams.codecs import bslz4_encode, decode_into

    payloads = [bslz4_encode(a) for a in frames_cache(shape)]

    def work(k, out):
        for i in range(k):
            decode_into("bslz4", payloads[i % len(payloads)], out)

    bufs = [np.empty(shape, "<u2") for _ in range(2)]
    t0 = time.perf_counter()
    work(n, bufs[0])
    one = time.perf_counter() - t0
    th = [threading.Thread(target=work, args=(n // 2, bufs[j])) for j in range(2)]
    t0 = time.perf_counter()
    for x in th:
        x.start()
    for x in th:
        x.join()
    two = time.perf_counter() - t0
    return {"frames": n, "one_thread_fps": n / one, "two_threads_fps": n / two,
            "speedup": one / two}


CONFIGS = [("bare x1", "bare", 1, 0), ("bare x2", "bare", 2, 0),
           ("decode x1", "decode", 1, 0), ("StreamV2Receiver x1", "rx", 1, 0),
           ("StreamV2Receiver x2", "rx", 2, 0),
           ("StreamV2Receiver x1, 2 decode threads", "rx", 1, 2)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--shape", type=int, nargs=2, default=(512, 512))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hwm", type=int, default=1000)
    ap.add_argument("--three", action="store_true", help="also 3 receiver processes")
    ap.add_argument("--jobs", action="store_true",
                    help="also real mpirun jobs: -n 2 with 1 receiver (+1 worker) and with "
                         "2 receivers on the node")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    shape = tuple(a.shape)
    configs = CONFIGS + ([("StreamV2Receiver x3", "rx", 3, 0)] if a.three else [])
    _, mean_payload = messages(1, shape)
    runs = {name: [] for name, _, _, _ in configs}
    with LoadSampler(interval=2.0) as load:
        for _ in range(a.repeat):
            for name, kind, k, threads in configs:
                runs[name].append(run_once(kind, k, a.frames, shape, a.hwm, threads))
            if a.jobs:
                import tempfile

                with tempfile.TemporaryDirectory(prefix="v2bench-") as d:
                    for per_node in (1, 2):
                        runs.setdefault(f"job -n 2, {per_node} receiver(s)", []).append(
                            job_once(2, per_node, a.frames, shape, a.hwm, Path(d)))
        gil = gil_check(shape)
    res = {"frames": a.frames, "shape": list(shape), "dtype": "uint16", "encoding": "bslz4",
           "mean_payload_bytes": round(mean_payload), "repeat": a.repeat,
           "cpu_count": os.cpu_count(),
           "load": {"before": load.before, "min": min(load.samples),
                    "mean": statistics.mean(load.samples), "max": max(load.samples)},
           "runs": runs, "gil": gil, "median_fps": {}, "per_core_fps": {}}
    for name, rs in runs.items():
        res["median_fps"][name] = statistics.median(r["fps"] for r in rs)
        cores = [r["frames"] / r["cpu_s"] for r in rs if r.get("cpu_s")]
        if cores:
            res["per_core_fps"][name] = statistics.median(cores)
    med = res["median_fps"]
    res["ratios"] = {
        "rx2 / decode1": med["StreamV2Receiver x2"] / med["decode x1"],
        "rx1 / decode1": med["StreamV2Receiver x1"] / med["decode x1"],
        "rx2 / bare1": med["StreamV2Receiver x2"] / med["bare x1"],
        "rx2 / rx1": med["StreamV2Receiver x2"] / med["StreamV2Receiver x1"],
        "rx1 2 threads / decode1": med["StreamV2Receiver x1, 2 decode threads"] /
        med["decode x1"]}
    if a.jobs:
        res["ratios"]["job 2 receivers / decode1"] = \
            med["job -n 2, 2 receiver(s)"] / med["decode x1"]
        res["ratios"]["job 2 receivers / job 1 receiver"] = \
            med["job -n 2, 2 receiver(s)"] / med["job -n 2, 1 receiver(s)"]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stream_v2.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("median_fps", "per_core_fps", "ratios", "gil",
                                          "load")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
