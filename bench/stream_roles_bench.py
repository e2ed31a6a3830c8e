"""What the duplicate digests and the job's token cost native-protocol ingest: this tree
against a commit before them (default ``365c5db``), alternating, in one run.

The old commit is exported with ``git archive``; each measurement runs in a fresh
child process whose ``PYTHONPATH`` is one tree or the other:

``feed``
    every message of a scan (``begin`` with the job's token where the tree has one,
    F x S raw ``data``, ``end``) built in memory first, then handed to an
    :class:`~streams.assemble.Assembler` through the native ``feed`` (header decode,
    checks, decode into the partition, digest, delivery to a no-op): the assembler's
    own cost, nothing hides it;
``feed, every sector twice``
    the same with every data message sent twice (a hostile or broken producer): the
    old tree rejects the second copy unread, this one decodes it aside and compares
    digests;
``loopback``
    :func:`bench.stream_bench.run_receiver`: a producer process, a real
    :class:`~streams.protocols.native.receiver.Receiver` over TCP loopback.

Reported per case: GB/s of each tree (median of ``--repeat``), the ratio new / old,
and the load average. Two frame shapes: 576x576 uint16 in 4 sectors (162 KiB
messages) and 128x128 uint16 in 1 sector (32 KiB), where per-message costs weigh more.

    .venv/bin/python bench/stream_roles_bench.py [--base 365c5db] [--repeat 5]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from loadavg import LoadSampler  # noqa: E402

SHAPES = [((576, 576), 4, 600), ((128, 128), 1, 6000)]   # shape, sectors, frames


def child(shape, sectors: int, frames: int, twice: bool) -> float:
    """Seconds to feed one scan's messages to an Assembler (in this tree)."""
    import inspect

    import numpy as np

    from streams.assemble import Assembler
    from streams.protocol import ScanGeometry
    from streams.protocols.native import headers

    g = ScanGeometry("bench", 1, frames, sectors, tuple(shape), "<u2", (1, frames))
    img = np.random.default_rng(0).integers(0, 1000, g.shape).astype("<u2")
    payloads = [img[slice(*g.sector_rows(s))].tobytes() for s in range(sectors)]
    token = "ab" * 16
    has_token = "token" in inspect.signature(headers.encode_begin).parameters
    begin = headers.encode_begin(g, 0, token) if has_token else headers.encode_begin(g, 0)
    msgs = [[begin, b""]]
    for f in range(frames):
        for k in range(sectors):
            m = [headers.encode_data("bench", f, k, g.sector_rows(k)), payloads[k]]
            msgs.append(m)
            if twice:
                msgs.append(m)
    msgs.append([headers.encode_end("bench", 0, frames * sectors), b""])
    a = Assembler(lambda p: None, partition_frames=16)
    feed = (lambda parts: headers.feed(a, parts, token)) if has_token else \
        (lambda parts: headers.feed(a, parts))
    t0 = time.perf_counter()
    for m in msgs:
        feed(m)
    dt = time.perf_counter() - t0
    rep = a.closed["bench"]
    assert rep.ok and rep.accepted == frames * sectors, rep.summary()
    return dt


def loopback(shape, sectors: int, frames: int) -> float:
    import stream_bench

    a = argparse.Namespace(shape=shape, sectors=sectors, frames=frames, hwm=100,
                           partition_frames=16)
    return stream_bench.run_receiver(a)[0]


def export(commit: str, dest: str) -> str:
    full = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    arch = subprocess.Popen(["git", "archive", full, "streams", "stager"], cwd=ROOT,
                            stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dest], stdin=arch.stdout, check=True)
    if arch.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")
    return full


def run_in(tree: str, case: str, shape, sectors: int, frames: int) -> float:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{HERE}")
    r = subprocess.run([sys.executable, __file__, "--child", case, str(shape[0]), str(shape[1]),
                        str(sectors), str(frames)], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tree)
    if r.returncode != 0:
        raise RuntimeError(f"{case} in {tree}: {r.stderr[-2000:]}")
    return float(r.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        case, r, c, s, f = sys.argv[2], *map(int, sys.argv[3:7])
        if case == "loopback":
            print(loopback((r, c), s, f))
        else:
            print(child((r, c), s, f, twice=case == "twice"))
        return 0
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="365c5db", help="the commit before the change")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as old, LoadSampler(interval=2.0) as load:
        base = export(a.base, old)
        for shape, sectors, frames in SHAPES:
            nbytes = frames * shape[0] * shape[1] * 2
            for case in ("feed", "twice", "loopback"):
                if case == "loopback" and sectors == 1:
                    continue
                times = {"old": [], "new": []}
                for i in range(a.repeat):
                    order = ("old", "new") if i % 2 == 0 else ("new", "old")
                    for which in order:
                        tree = old if which == "old" else str(ROOT)
                        times[which].append(run_in(tree, case, shape, sectors, frames))
                mo, mn = statistics.median(times["old"]), statistics.median(times["new"])
                rows.append({"case": case, "shape": list(shape), "sectors": sectors,
                             "frames": frames, "old_s": times["old"], "new_s": times["new"],
                             "old_GBps": nbytes / mo / 1e9, "new_GBps": nbytes / mn / 1e9,
                             "ratio_new_old": mo / mn})
                print(rows[-1], flush=True)
    res = {"base": base, "head": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                                capture_output=True, text=True).stdout.strip(),
           "repeat": a.repeat, "rows": rows, "load": load.summary(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M")}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stream_roles.json").write_text(json.dumps(res, indent=1) + "\n")
    names = {"feed": "feed (assembler only)", "twice": "feed, every sector twice",
             "loopback": "Receiver over loopback"}
    md = ["# Duplicate digests and the job's token on ingest (`bench/stream_roles_bench.py`)",
          "", f"This tree (`{res['head'][:7]}`, uncommitted changes included) against "
          f"`{base[:7]}`, each measurement in a fresh process, old and new alternating, "
          f"median of {a.repeat}; {load.text()}.", "",
          "| case | frames | GB/s before | GB/s now | now / before |", "|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {names[r['case']]} | {r['frames']} x {r['shape'][0]}x{r['shape'][1]} "
                  f"u2, {r['sectors']} sector(s) | {r['old_GBps']:.2f} | {r['new_GBps']:.2f} "
                  f"| **{r['ratio_new_old']:.2f}** |")
    (out / "stream_roles.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
