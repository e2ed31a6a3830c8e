"""Partitions through core.mpi.link.Link: pickled in band against out of band (protocol 5).

Run: ``mpirun -n 2 python bench/link_bench.py [--mib 16] [--count 40] [--reps 3]
[--out bench/results]``

Rank 0 plays a stream receiver, rank 1 its worker: rank 0 copies a partition
out of a reused buffer (as ``ReceiverLoop.deliver`` does) and sends it as the
stream job sends one (a :class:`streams.job.messages.Part`) with a window of two
unacknowledged partitions; rank 1 receives it, sums it (touching every byte, as an
analysis would) and acknowledges it. Both ways alternate in the same run, ``--reps``
times each; the time is rank 0's, first send to last acknowledgement. Writes
``link.json`` and ``link.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loadavg import LoadSampler
from core.mpi.link import OUT_OF_BAND, TAGS, Link
from streams.job.messages import Ack, Part

WORK, ACK = TAGS["stream"]["WORK"], TAGS["stream"]["ACK"]


def one_way(comm, link: Link, mib: int, count: int) -> float:
    frames = max(1, (mib << 20) // (576 * 576 * 2))
    reused = np.random.default_rng(0).integers(0, 4000, (frames, 576, 576), dtype=np.uint16)
    comm.Barrier()
    t0 = time.perf_counter()
    if comm.rank == 0:
        held = sent = acked = 0
        while acked < count:
            if sent < count and held < 2:
                item = Part(None, sent, np.arange(frames),  # type: ignore[arg-type]
                            np.ones(frames, bool), reused.copy())
                link.send(1, WORK, item)
                sent += 1
                held += 1
            for _src, tag, _msg in iter(link.poll, None):
                assert tag == ACK
                held -= 1
                acked += 1
            link.reap()
    else:
        got = 0
        while got < count:
            for src, _tag, item in iter(link.poll, None):
                assert int(item.data[-1].sum()) == int(reused[-1].sum())
                link.send(src, ACK, Ack("scan"))
                got += 1
            link.reap()
    link.flush()
    comm.Barrier()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=16)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    if comm.size != 2:
        raise SystemExit("run with mpirun -n 2")
    ways = {"in band": None, "out of band": OUT_OF_BAND}
    times = {w: [] for w in ways}
    with LoadSampler(1.0) as load:
        for _ in range(a.reps):
            for name, oob in ways.items():
                times[name].append(one_way(comm, Link(comm, "stream", out_of_band=oob),
                                           a.mib, a.count))
    if comm.rank == 0:
        med = {w: statistics.median(t) for w, t in times.items()}
        per = {w: 1e3 * m / a.count for w, m in med.items()}
        rate = {w: a.mib * a.count / m for w, m in med.items()}
        ratio = med["in band"] / med["out of band"]
        res = {"mib": a.mib, "count": a.count, "reps": a.reps, "seconds": times,
               "ms_per_partition": per, "mib_per_s": rate, "in_over_out": ratio,
               "load": load.summary(), "host": os.uname().nodename}
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "link.json"), "w") as f:
            json.dump(res, f, indent=1)
        lines = ["# Partitions through `core.mpi.link.Link`: in band vs out of band",
                 "", f"`mpirun -n 2 python bench/link_bench.py --mib {a.mib} --count {a.count} "
                 f"--reps {a.reps}` (both ranks on one host: shared memory). Median of "
                 f"{a.reps} runs each, alternated; {load.text()}. The machine was shared with "
                 "other work: ratios are from the same run.", "",
                 "| way | ms per partition | MiB/s |", "|---|---|---|"]
        lines += [f"| {w} | {per[w]:.1f} | {rate[w]:.0f} |" for w in ways]
        lines += ["", f"In band / out of band time: {ratio:.2f}x. In band is what the stream job "
                  "paid before (mpi4py's `comm.isend`/`recv` pickle in band the same way: one "
                  "copy into the pickle, one out of it); out of band is `Link`'s default."]
        with open(os.path.join(a.out, "link.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))
    comm.Free()


if __name__ == "__main__":
    main()
