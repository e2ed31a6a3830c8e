"""ASI TPX3: frames/s and bytes/s of one receiver here vs LiberTEM-live's, same stream.

One stream file (our simulator's ``--dump``: one acquisition of F frames of ROWS x COLS,
about E events per frame, in chunks of C frames; byte for byte what
``libertem_asi_tpx3.make_sim_data`` writes) is served from memory by LiberTEM-live's own
``TpxCameraSim`` in a process of its own, as a detector is (``--sim-in-process``: its
threads in this one, where they share the GIL with our receiver but not with
LiberTEM-live's Rust one) (``cached="mem"``, ``sleep=0``: it repeats the file back to back while
a client is connected; each receiver takes the first acquisition and disconnects) into,
in turn and alternating ``--repeat``
times, one receiver in this process:

- **libertem-live**: ``libertem_asi_tpx3.ASITpx3Connection`` (its Rust receiver: the
  socket, the chunks into shared memory) and a ``CamClient`` taking every chunk stack,
  as its workers do, without a UDF; from the arm (its acquisition start header) to the
  last frame's stack;
- **mpistage**: :class:`streams.protocols.asi_tpx3.receiver.Tpx3Receiver` (Python and
  numpy: every size checked, every chunk's pointers and indices checked, frames into
  its sparse assembler's CSR partitions, delivered to a no-op); the scan report's
  seconds (first message to the scan end);
- **mpistage, a frame at a time**: the same receiver handing its assembler one frame per
  call (what it did before ``SparseAssembler.chunk``: about 100 us a frame of Python);
- **mpistage, dense partitions**: the same receiver densifying every frame into a dense
  assembler's partitions (what it did before partitions could be CSR).

Memory: the stream's bytes per frame (CSR) against a dense ``uint32`` frame, and the
most the receiver's partitions held, CSR and dense. Load average beside.

    .venv/bin/python bench/asi_tpx3_bench.py --scan 64 64 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from loadavg import LoadSampler  # noqa: E402


def libertem_live(port: int, frames: int) -> float:
    """Seconds from the arm to the last frame's chunk stack, LiberTEM-live's receiver."""
    import libertem_asi_tpx3 as m

    d = tempfile.mkdtemp()
    conn = m.ASITpx3Connection(uri=f"127.0.0.1:{port}", chunks_per_stack=24,
                               handle_path=os.path.join(d, "sock"), num_slots=2048,
                               bytes_per_chunk=16 * 1024)
    try:
        conn.start_passive()
        assert conn.wait_for_arm(30.0) is not None
        t0 = time.perf_counter()
        cc = m.CamClient(conn.get_socket_path())
        got = 0
        while got < frames:
            st = conn.get_next_stack(max_size=frames - got)
            assert st is not None, f"stream ended after {got} frames"
            got += len(st)
            cc.get_chunks(handle=st)
            cc.done(st)
        t1 = time.perf_counter()
        cc.close()
    finally:
        conn.close()
    return t1 - t0


def mpistage(port: int, dense: bool, partition_frames: int, per_frame: bool = False) -> dict:
    """Seconds (the scan report's: first message to the scan end) and the bytes its
    partitions held at most: CSR (the receiver as it is), or the same frames dense."""
    import numpy as np

    from analyses.sparse import densify
    from streams.assemble import Assembler
    from streams.protocol import Data
    from streams.protocols.asi_tpx3 import receiver, wire

    class Dense(receiver.Tpx3Receiver):
        """The receiver before sparse partitions: every frame densified into a dense
        assembler's partition (zeroed frames reused, only written pixels zeroed again)."""

        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            self.assembler = Assembler(self.assembler.deliver, routing="any",
                                       partition_frames=partition_frames,
                                       memory_bytes=kw["memory_bytes"], on_close=self._closed)
            self.scratch = None

        def _payload(self, c, payload):
            scan, acq, f0 = self._scan, self._acq, self._frame
            self._frame += c.frames
            indptr, indices, values = wire.check_csr(c, acq, payload)
            rows, cols = acq.sig_shape
            if self.scratch is None:
                self.scratch = np.zeros((1, rows * cols), np.uint32)
            for i in range(c.frames):
                a, b = int(indptr[i]), int(indptr[i + 1])
                pos = densify(self.scratch, indptr[i:i + 2] - a, indices[a:b], values[a:b])
                self.assembler.data(Data(scan, f0 + i, 0, 0, rows, "raw"),
                                    self.scratch[0].view(np.uint8))
                self.scratch.reshape(-1)[pos] = 0

    class PerFrame(receiver.Tpx3Receiver):
        """The receiver before chunks: one ``data`` call per frame."""

        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            a = self.assembler

            def chunk(scan, f0, indptr, indices, values, where):
                rows = a.scans[scan].g.shape[0]
                for i in range(len(indptr) - 1):
                    x, y = int(indptr[i]), int(indptr[i + 1])
                    a.data(Data(scan, f0 + i, 0, 0, rows, "csr"), (indices[x:y], values[x:y]),
                           where=f"{where} frame {f0 + i}")
            a.chunk = chunk

    cls = Dense if dense else PerFrame if per_frame else receiver.Tpx3Receiver
    r = cls(lambda p: None, "127.0.0.1", port, partition_frames=partition_frames,
            memory_bytes=1 << 30)
    try:
        (rep,) = r.serve(1, timeout=300)
    finally:
        r.close()
    d = rep.to_dict()
    assert d["ok"], d
    held = d["buffer_bytes"] if dense else r.assembler.peak_bytes
    return {"seconds": d["seconds"], "held_bytes": held}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int) -> None:
    """Until the simulator listens (it closes the probe: a client that took nothing)."""
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            time.sleep(0.5)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the simulator did not listen on port {port}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scan", type=int, nargs=2, default=(64, 64))
    ap.add_argument("--shape", type=int, nargs=2, default=(512, 512))
    ap.add_argument("--events", type=float, default=300.0)
    ap.add_argument("--chunk-frames", type=int, default=64)
    ap.add_argument("--partition-frames", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dense-repeat", type=int, default=1,
                    help="runs of the dense variant (slow; its figure is far from the others)")
    ap.add_argument("--sim-in-process", action="store_true",
                    help="TpxCameraSim as threads of this process (default: its own process)")
    ap.add_argument("--out", default=str(HERE / "results" / "asi_tpx3"))
    ap.add_argument("--one", help=argparse.SUPPRESS)     # one receiver run (a child)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        import resource

        got = mpistage(a.port, "dense" in a.one, a.partition_frames,
                       per_frame="a frame" in a.one)
        got["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(got))
        return
    from libertem_live.detectors.asi_tpx3.sim import TpxCameraSim

    from streams.protocols.asi_tpx3.simulator import sparse_scan
    from streams.protocols.asi_tpx3.wire import encode_scan

    nav, sig = tuple(a.scan), tuple(a.shape)
    frames = nav[0] * nav[1]
    ip, ix, v = sparse_scan(nav, sig, a.events)
    blob = encode_scan(nav, sig, ip, ix, v, chunk_frames=a.chunk_frames)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "scan.tpx3").write_bytes(blob)
    if a.sim_in_process:
        sim = TpxCameraSim(cached="mem", port=0, sleep=0.0, paths=[str(tmp / "scan.tpx3")])
        sim.start()
        sim.wait_for_listen()
        port = sim.server_t.port
    else:       # its own process, as a detector is (in-process it shares our GIL)
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "libertem_live.detectors.asi_tpx3.sim",
                                 str(tmp / "scan.tpx3"), "--port", str(port), "--cached",
                                 "MEM", "--sleep", "0"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        sim = SimpleNamespace(stop=lambda: (proc.terminate(), proc.wait(30)))
        _wait_for(port)
    runs: dict = {"libertem-live": [], "mpistage": [], "mpistage, a frame at a time": [],
                  "mpistage, dense partitions": []}
    held: dict = {}
    rss: dict = {}
    try:
        with LoadSampler() as load:
            for _ in range(a.repeat):
                runs["libertem-live"].append(libertem_live(port, frames))
                for name in list(runs)[1:]:
                    if "dense" in name and len(runs[name]) >= a.dense_repeat:
                        continue
                    # each receiver in a process of its own: its peak RSS is its own
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", name, "--port", str(port),
                         "--partition-frames", str(a.partition_frames)],
                        check=True, capture_output=True, text=True).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    runs[name].append(got["seconds"])
                    held[name] = got["held_bytes"]
                    rss[name] = max(rss.get(name, 0.0), got["rss_mib"])
    finally:
        sim.stop()
    dense = sig[0] * sig[1] * 4
    res = {
        "frames": frames, "shape": list(sig), "events_per_frame": len(ix) / frames,
        "stream_bytes": len(blob), "stream_bytes_per_frame": len(blob) / frames,
        "dense_bytes_per_frame": dense, "chunk_frames": a.chunk_frames,
        "partition_frames": a.partition_frames,
        "partitions_held_bytes": held, "receiver_peak_rss_mib": rss,
        "seconds": runs,
        "frames_per_s": {k: [frames / s for s in v] for k, v in runs.items()},
        "load": {"before": load.before, "min": min(load.samples), "max": max(load.samples),
                 "mean": statistics.mean(load.samples)},
    }
    med = {k: statistics.median(v) for k, v in res["frames_per_s"].items()}
    lines = [f"# ASI TPX3: one receiver here vs LiberTEM-live ({frames} frames {sig[0]}x{sig[1]}, "
             f"{res['events_per_frame']:.0f} events/frame, {a.chunk_frames} frames/chunk, "
             "LiberTEM-live's TpxCameraSim from memory, "
             + ("in this process)" if a.sim_in_process else "in a process of its own)"), "",
             "| | frames/s (median) | MB/s of stream (median) | runs (frames/s) |",
             "|---|---|---|---|"]
    for k, v in res["frames_per_s"].items():
        lines.append(f"| {k} | {med[k]:,.0f} | {med[k] * len(blob) / frames / 1e6:,.1f} | "
                     + ", ".join(f"{x:,.0f}" for x in v) + " |")
    ratio = {k: med[k] / med["libertem-live"] for k in med}
    pairs = [statistics.median(lv / m for m, lv in zip(runs["mpistage"], runs["libertem-live"]))]
    lines += ["", f"ratio mpistage / LiberTEM-live: **{ratio['mpistage']:.2f}** of the medians, "
              f"{pairs[0]:.2f} the median of each run's (a frame at a time: "
              f"{ratio['mpistage, a frame at a time']:.2f}; dense partitions: "
              f"{ratio['mpistage, dense partitions']:.3f})", "",
              f"memory: the stream carries {res['stream_bytes_per_frame']:,.0f} bytes per frame, "
              f"a dense uint32 frame is {dense:,} bytes "
              f"(**{dense / res['stream_bytes_per_frame']:,.0f}x**); the receiver's partitions "
              f"({a.partition_frames} frames each) held at most {held['mpistage']:,} bytes as "
              f"CSR, {held['mpistage, dense partitions']:,} bytes dense (**"
              f"{held['mpistage, dense partitions'] / max(1, held['mpistage']):,.0f}x**); "
              "the receiver process's peak RSS (each run in a process of its own, the "
              "interpreter and numpy included): "
              + ", ".join(f"{k} {v:,.0f} MiB" for k, v in rss.items())
              + f" (dense / CSR **{rss['mpistage, dense partitions'] / rss['mpistage']:.1f}x**)",
              f"load average {load.before:.2f} before the run, {min(load.samples):.1f}-"
              f"{max(load.samples):.1f} (mean {statistics.mean(load.samples):.1f}) during it"]
    Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
