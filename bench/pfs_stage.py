"""Staging benchmark against the simulated shared parallel filesystem (issue 8).

Reproduces, on one machine, the effect behind the paper's headline (collective
staging 4.7x faster at 8,192 nodes): independent per-node reads congest a shared
filesystem in bandwidth and in metadata operations; reading each byte once and
exchanging it over MPI does not. For each dataset (large frames, many small
files), each emulated node count N and each method (``naive``, ``readall``,
``stripe``, ``bcast``) it

1. mounts a fresh simulated PFS (``bench.pfs``: aggregate bandwidth cap,
   metadata service time, per-file counters) over the on-disk source,
2. runs ``mpirun -n N*R python -m stager stage SPEC --method M --emulate-nodes N``
   with every node's destination on disk (``%n`` in the spec),
3. unmounts, and records wall time, delivered GB/s, PFS bytes read / dataset
   bytes, opens and stats per file -- from the PFS's counters, not the stager's.

Writes ``OUT.json``, ``OUT.md`` and ``OUT.png``. One command: ``make bench-pfs``.
Mounts are removed even when interrupted (Ctrl-C, SIGTERM, SIGHUP).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pfs import PFSConfig, SimulatedPFS  # noqa: E402

MiB = 1 << 20
METHODS = ("naive", "readall", "stripe", "bcast")


# --- datasets ----------------------------------------------------------------
def make_dataset(root: Path, name: str, count: int, size: int) -> dict[str, Any]:
    """Create (or reuse, if identical in shape) ``count`` random files of ``size`` bytes."""
    d = root / name
    stamp = root / f".{name}.shape.json"
    shape = {"count": count, "size": size}
    if stamp.exists() and json.loads(stamp.read_text()) == shape:
        return {"name": name, "dir": str(d), **shape, "bytes": count * size}
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    width = len(str(count - 1))
    for i in range(count):
        # Random bytes: nothing downstream may compress or deduplicate its way out.
        (d / f"{name}_{i:0{width}d}.bin").write_bytes(os.urandom(size))
    stamp.write_text(json.dumps(shape))
    return {"name": name, "dir": str(d), **shape, "bytes": count * size}


def warm(ds: dict[str, Any]) -> None:
    """Read the source once outside FUSE so every run starts from page cache, not disk."""
    for p in sorted(Path(ds["dir"]).iterdir()):
        with open(p, "rb") as fh:
            while fh.read(8 * MiB):
                pass


# --- one run -----------------------------------------------------------------
def _mpirun(ranks: int, btl: str) -> list[str]:
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", "--bind-to", "none"]
    if btl == "tcp":
        cmd += ["--mca", "btl", "tcp,self"]
    elif btl == "sm":
        cmd += ["--mca", "btl", "vader,self"]
    return cmd


def _run(cmd: list[str], env: dict[str, str], timeout: float, log: Path) -> int:
    """Run ``cmd``; on any interruption stop it (SIGTERM, then SIGKILL) before re-raising."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout=timeout)
        except BaseException:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def file_stats(counters: dict[str, Any], mount_prefix: str, count: int) -> dict[str, Any]:
    """Per-file PFS counters of the dataset's files -> the figures we report."""
    files = {p: c for p, c in counters.get("files", {}).items() if p.startswith(mount_prefix)}
    opens = [c["opens"] for c in files.values()] + [0] * (count - len(files))
    stats = [c["stats"] for c in files.values()] + [0] * (count - len(files))
    return {
        "pfs_bytes_read": sum(c["bytes_read"] for c in files.values()),
        "opens_per_file_max": max(opens),
        "opens_per_file_mean": sum(opens) / count,
        "stats_per_file_max": max(stats),
        "stats_per_file_mean": sum(stats) / count,
        "readdirs": counters.get("totals", {}).get("readdirs", 0),
        "dir_stats": counters.get("totals", {}).get("dir_stats", 0),
        "metadata_ops": counters.get("metadata_server", {}).get("ops", 0),
        "bucket_seconds_waited": counters.get("bucket", {}).get("seconds_waited", 0.0),
    }


def check_copies(dest: Path, nodes: int, ds: dict[str, Any]) -> str | None:
    """Every node directory holds ``count`` files of ``size`` bytes (the stager checksums)."""
    for k in range(nodes):
        d = dest / f"node{k}" / ds["name"]
        # Only the dataset's names: the stager keeps its own manifest beside them.
        sizes = ([e.stat().st_size for e in os.scandir(d) if e.name.startswith(ds["name"] + "_")]
                 if d.is_dir() else [])
        if len(sizes) != ds["count"] or any(s != ds["size"] for s in sizes):
            return f"node{k}: {len(sizes)} files, {sum(sizes)} bytes in {d}"
    return None


def run_one(args: argparse.Namespace, ds: dict[str, Any], method: str, nodes: int,
            work: Path) -> dict[str, Any]:
    mnt, dest = work / "mnt", work / "dest"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    spec = work / f"{ds['name']}.hook"
    spec.write_text(f"broadcast to {dest}/%n/{ds['name']} files {{\n"
                    f"  {mnt}/{ds['name']}/*\n}}\n")
    report = work / "report.json"
    report.unlink(missing_ok=True)
    ranks = nodes * args.ranks_per_node
    cmd = [*_mpirun(ranks, args.btl), sys.executable, "-m", "stager", "stage", str(spec),
           "--method", method, "--emulate-nodes", str(nodes), "--json", str(report)]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    if args.stager_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.stager_path, env.get("PYTHONPATH")]))
    # Expected seconds if the PFS were the only cost, naive being the worst case.
    est = (nodes * ds["bytes"] / args.bandwidth
           + (1 + 3 * nodes) * ds["count"] * args.latency)
    timeout = 60 + 6 * est
    warm(ds)
    cfg = PFSConfig(bandwidth=args.bandwidth, latency=args.latency, mds_slots=args.mds_slots)
    row: dict[str, Any] = {"dataset": ds["name"], "method": method, "nodes": nodes,
                           "ranks": ranks, "command": " ".join(cmd)}
    log = work / f"log-{ds['name']}-{method}-{nodes}.txt"
    with SimulatedPFS(str(Path(ds["dir"]).parent), str(mnt), cfg) as pfs:
        t0 = time.monotonic()
        rc = _run(cmd, env, timeout, log)
        wall = time.monotonic() - t0
    counters = pfs.counters
    row.update(file_stats(counters, f"/{ds['name']}/", ds["count"]))
    row["wall_s"] = wall
    row["exit_code"] = rc
    row["delivered_gbps"] = nodes * ds["bytes"] / wall / 1e9
    row["pfs_read_over_dataset"] = row["pfs_bytes_read"] / ds["bytes"]
    if report.exists():
        row["stager_report"] = json.loads(report.read_text())
    problem = f"exit code {rc}; see {log}" if rc else check_copies(dest, nodes, ds)
    row["ok"] = problem is None
    if problem:
        row["error"] = problem
        row["log_tail"] = log.read_text(errors="replace")[-2000:]
    shutil.rmtree(dest)  # N copies of the dataset must not pile up on a shared disk
    return row


# --- evaluation and output -----------------------------------------------------
def _get(rows: list[dict[str, Any]], ds: str, method: str, n: int) -> dict[str, Any] | None:
    for r in rows:
        if (r["dataset"], r["method"], r["nodes"]) == (ds, method, n) and r["ok"]:
            return r
    return None


def evaluate(rows: list[dict[str, Any]], datasets: list[str], nodes: list[int]) -> list[dict]:
    """The issue's targets, each with the measured figure and whether it was met."""
    targets = []
    for ds in datasets:
        stripe = [_get(rows, ds, "stripe", n) for n in nodes]
        ratios = [r["pfs_read_over_dataset"] if r else None for r in stripe]
        targets.append({
            "target": f"{ds}: stripe PFS bytes read / dataset = 1.00 +- 0.01 at every N",
            "measured": ratios,
            "met": all(x is not None and abs(x - 1) <= 0.01 for x in ratios)})
        opens = [(r["opens_per_file_max"], n) if r else None for r, n in zip(stripe, nodes)]
        targets.append({
            "target": f"{ds}: stripe opens each file at most once per reader (max opens <= N)",
            "measured": [o[0] if o else None for o in opens],
            "met": all(o is not None and o[0] <= o[1] for o in opens)})
        naive = [_get(rows, ds, "naive", n) for n in nodes]
        nratio = [r["pfs_read_over_dataset"] if r else None for r in naive]
        t1 = naive[0]["wall_s"] if naive[0] else None
        tscale = [r["wall_s"] / t1 if r and t1 else None for r in naive]
        targets.append({
            "target": f"{ds}: naive scales as N (PFS bytes read / dataset = N +- 2%)",
            "measured": {"read_ratio": nratio, "time_over_time_at_N1": tscale},
            "met": all(x is not None and abs(x / n - 1) <= 0.02 for x, n in zip(nratio, nodes))})
        nmax = max(nodes)
        s, v = _get(rows, ds, "stripe", nmax), _get(rows, ds, "naive", nmax)
        speedup = v["wall_s"] / s["wall_s"] if s and v else None
        targets.append({
            "target": f"{ds}: stripe at N={nmax} at least 6x faster than naive (wall time)",
            "measured": speedup, "met": speedup is not None and speedup >= 6})
    return targets


def write_markdown(result: dict[str, Any], path: Path) -> None:
    cfg = result["config"]
    lines = [
        "# Staging over the simulated PFS",
        "",
        f"Measured {result['date']} on {result['host']['cpus']} cores; simulated PFS: "
        f"{cfg['bandwidth'] / 1e6:.0f} MB/s aggregate cap, {cfg['latency'] * 1e3:g} ms per "
        f"metadata op, {cfg['mds_slots']} metadata slot(s). MPI transport: {result['transport']}; "
        f"{cfg['ranks_per_node']} rank(s) per emulated node; stager at commit "
        f"`{result['stager_commit'][:12]}`. Wall time is the whole "
        "`mpirun ... stager stage` (start-up included); delivered GB/s = N x dataset / wall.",
        "",
    ]
    for ds in result["datasets"]:
        lines += [f"## {ds['name']}: {ds['count']} files x {ds['size'] / MiB:g} MiB "
                  f"= {ds['bytes'] / MiB:.0f} MiB" if ds["size"] >= MiB else
                  f"## {ds['name']}: {ds['count']} files x {ds['size']} B "
                  f"= {ds['bytes'] / MiB:.1f} MiB", "",
                  "| method | N | wall s | GB/s delivered | PFS read / dataset | opens/file max "
                  "| stats/file mean | metadata ops | ok |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in result["runs"]:
            if r["dataset"] != ds["name"]:
                continue
            lines.append(f"| {r['method']} | {r['nodes']} | {r['wall_s']:.2f} | "
                         f"{r['delivered_gbps']:.3f} | {r['pfs_read_over_dataset']:.3f} | "
                         f"{r['opens_per_file_max']} | {r['stats_per_file_mean']:.2f} | "
                         f"{r['metadata_ops']} | {'yes' if r['ok'] else 'NO: ' + r['error']} |")
        lines.append("")
    lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {_fmt(t['measured'])} | {'yes' if t['met'] else 'NO'} |")
    path.write_text("\n".join(lines) + "\n")


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.2f}"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    if isinstance(x, dict):
        return "; ".join(f"{k}: {_fmt(v)}" for k, v in x.items())
    return "n/a" if x is None else str(x)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [d["name"] for d in result["datasets"]]
    fig, axes = plt.subplots(len(names), 2, figsize=(10, 3.6 * len(names)), squeeze=False)
    for row, ds in zip(axes, result["datasets"]):
        for method in result["config"]["methods"]:
            rs = sorted((r for r in result["runs"] if r["dataset"] == ds["name"]
                         and r["method"] == method and r["ok"]), key=lambda r: r["nodes"])
            if not rs:
                continue
            n = [r["nodes"] for r in rs]
            row[0].plot(n, [r["wall_s"] for r in rs], marker="o", label=method)
            row[1].plot(n, [r["pfs_bytes_read"] / 2**30 for r in rs], marker="o", label=method)
        row[0].set(title=f"{ds['name']}: staging time", xlabel="emulated nodes N",
                   ylabel="wall time (s)")
        row[1].set(title=f"{ds['name']}: bytes read from the PFS", xlabel="emulated nodes N",
                   ylabel="GiB read")
        for ax in row:
            ax.set_xscale("log", base=2)
            ax.set_xticks(result["config"]["nodes"], [str(v) for v in result["config"]["nodes"]])
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def snapshot_stager(commit: str, work: Path) -> tuple[str, str]:
    """Export the stager (and the packages it imports) at ``commit`` into ``work``.

    The benchmark then measures one fixed, recorded version of the stager even
    while the work tree is being edited. Returns (directory, full commit hash).
    """
    full = subprocess.run(["git", "-C", str(REPO), "rev-parse", commit], check=True,
                          capture_output=True, text=True).stdout.strip()
    dest = work / "stager-snapshot"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", full, "stager", "hooks"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return str(dest), full


# --- main ----------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames-bytes", type=int, default=2 << 30, help="frames dataset size")
    p.add_argument("--frame-size", type=int, default=8 * MiB)
    p.add_argument("--small-files", type=int, default=20000)
    p.add_argument("--small-size", type=int, default=4096)
    p.add_argument("--nodes", default="1,2,4,8", help="emulated node counts")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--datasets", default="frames,small")
    p.add_argument("--ranks-per-node", type=int, default=1)
    p.add_argument("--btl", choices=("default", "sm", "tcp"), default="sm",
                   help="MPI transport: sm = --mca btl vader,self; tcp = --mca btl tcp,self")
    p.add_argument("--bandwidth", type=float, default=400e6, help="PFS cap, bytes/s")
    p.add_argument("--latency", type=float, default=0.002, help="PFS s per metadata op")
    p.add_argument("--mds-slots", type=int, default=1)
    p.add_argument("--work", default=str(REPO / "bench" / "work" / "pfs"))
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "pfs_stage"))
    p.add_argument("--stager-commit", default="HEAD",
                   help="measure the stager as committed at this git revision (exported to "
                        "WORK/stager-snapshot); 'worktree' = the files as they are now")
    p.add_argument("--tiny", action="store_true",
                   help="smoke test: 32 MiB of 1 MiB frames, 100 small files, N=1,2")
    a = p.parse_args(argv)
    if a.tiny:
        a.frames_bytes, a.frame_size, a.small_files, a.nodes = 32 * MiB, MiB, 100, "1,2"
    a.nodes = [int(x) for x in a.nodes.split(",")]
    a.methods = [m for m in a.methods.split(",")]
    a.datasets = a.datasets.split(",")
    bad = [m for m in a.methods if m not in METHODS]
    if bad or a.frames_bytes % a.frame_size or min(a.nodes) < 1:
        p.error(f"unknown method(s) {bad}" if bad else
                "--frames-bytes must be a multiple of --frame-size and N >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    specs = {"frames": (a.frames_bytes // a.frame_size, a.frame_size),
             "small": (a.small_files, a.small_size)}
    datasets = [make_dataset(work / "src", name, *specs[name]) for name in a.datasets]
    a.stager_path, stager_rev = None, "worktree"
    if a.stager_commit != "worktree":
        a.stager_path, stager_rev = snapshot_stager(a.stager_commit, work)
    transport = {"sm": "shared memory (--mca btl vader,self)",
                 "tcp": "TCP loopback (--mca btl tcp,self)",
                 "default": "Open MPI default selection"}[a.btl]
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "transport": transport,
        "stager_commit": stager_rev,
        "config": {"bandwidth": a.bandwidth, "latency": a.latency, "mds_slots": a.mds_slots,
                   "nodes": a.nodes, "methods": a.methods, "ranks_per_node": a.ranks_per_node,
                   "btl": a.btl, "tiny": a.tiny},
        "datasets": [{k: v for k, v in d.items() if k != "dir"} for d in datasets],
        "runs": [],
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for ds in datasets:
            for n in a.nodes:
                for method in a.methods:
                    row = run_one(a, ds, method, n, work)
                    result["runs"].append(row)
                    print(f"{ds['name']:6s} {method:7s} N={n}: {row['wall_s']:7.2f} s, "
                          f"PFS read {row['pfs_read_over_dataset']:.3f}x, "
                          f"opens/file max {row['opens_per_file_max']}, "
                          f"stats/file {row['stats_per_file_mean']:.2f}"
                          + ("" if row["ok"] else f"  FAILED: {row['error']}"), flush=True)
    except KeyboardInterrupt:
        print("interrupted: mounts removed, partial results not written", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work / "dest", ignore_errors=True)
    result["targets"] = evaluate(result["runs"], a.datasets, a.nodes)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    write_markdown(result, out.with_suffix(".md"))
    plot(result, out.with_suffix(".png"))
    for t in result["targets"]:
        print(f"[{'met' if t['met'] else 'NOT MET'}] {t['target']}: {_fmt(t['measured'])}")
    return 0 if all(r["ok"] for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
