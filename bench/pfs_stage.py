"""Staging benchmark against the simulated shared parallel filesystem (issue 8).

Reproduces, on one machine, the effect behind the paper's headline (collective
staging 4.7x faster at 8,192 nodes): independent per-node reads congest a shared
filesystem in bandwidth and in metadata operations; reading each byte once and
exchanging it over MPI does not. For each dataset (large frames, many small
files), each emulated node count N and each method (``naive``, ``cp``,
``readall``, ``stripe``, ``bcast``) it

1. mounts a fresh simulated PFS (``bench.pfs``: aggregate bandwidth cap,
   metadata service time, per-file counters, busy window) over the on-disk source,
2. runs ``mpirun -n N*R python -m stager stage SPEC --method M --emulate-nodes N``
   with every node's destination under ``--dest-dir`` (``%n`` in the spec), or
   for ``cp`` N independent ``cp -r MNT/DATASET DEST/node<k>/`` started together
   (each node lists, stats, opens and reads every file itself: no stager at all),
3. unmounts, and records wall time, the PFS's busy time (first request in to
   last request out: the paper's "input time"), delivered GB/s, PFS bytes read
   / dataset bytes, opens and stats per file -- from the PFS's counters, not
   the stager's.

Node destinations go to tmpfs (``/dev/shm``, node-local RAM disk as in the
paper) when memory allows N x dataset plus a margin, else to disk (recorded).
For each N the run also times N ``cp -r`` of the page-cached source into the
destination with no PFS at all ("local copy"): what merely making N copies
costs on this machine, a floor under every method's wall time.

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

from bench.loadavg import LoadSampler  # noqa: E402
from bench.pfs import PFSConfig, SimulatedPFS  # noqa: E402
from bench.pfs_report import evaluate, fmt, plot, write_markdown  # noqa: E402

MiB = 1 << 20
METHODS = ("naive", "cp", "readall", "stripe", "bcast")
GiB = 1 << 30


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


# --- destinations ---------------------------------------------------------------
def _mem_available() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def fs_type(path: str) -> str:
    """Filesystem type of the mount holding ``path`` (longest mount-point prefix)."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            point = left.split()[4]
            if (real == point or real.startswith(point.rstrip("/") + "/")) and \
                    len(point) >= len(best):
                best, kind = point, right.split()[0]
    return kind


def choose_dest(requested: str, work: Path, need: int) -> tuple[Path, str]:
    """The directory under which each run's N node copies go, and why.

    ``auto``: tmpfs (/dev/shm) if both its free space and the memory available
    exceed ``need`` (the largest run's N x dataset) plus a margin, else disk.
    A fresh subdirectory is used and removed at the end.
    """
    margin = GiB + need // 10
    if requested == "auto":
        shm = Path("/dev/shm")
        if shm.is_dir():
            free = shutil.disk_usage(shm).free
            avail = _mem_available()
            if min(free, avail) >= need + margin:
                return (shm / f"mpistage-pfs-bench-{os.getpid()}",
                        f"tmpfs /dev/shm (node-local RAM disk; {need / GiB:.1f} GiB needed at "
                        f"most, {avail / GiB:.1f} GiB memory available)")
            reason = (f"only {min(free, avail) / GiB:.1f} GiB of /dev/shm/memory available for "
                      f"{(need + margin) / GiB:.1f} GiB")
        else:
            reason = "no /dev/shm"
        return (work / "dest",
                f"local disk {work / 'dest'} ({fs_type(str(work))}): FALLBACK, {reason}; all "
                "emulated nodes then share one disk's write bandwidth")
    base = Path(requested)
    base.mkdir(parents=True, exist_ok=True)
    return base / f"mpistage-pfs-bench-{os.getpid()}", f"{base} ({fs_type(str(base))})"


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


def _run_cps(sources: list[str], dests: list[Path], timeout: float, log: Path) -> int:
    """N ``cp -r`` started together; the worst exit code once the last one ends."""
    procs: list[subprocess.Popen[bytes]] = []
    with open(log, "wb") as out:
        try:
            for src, d in zip(sources, dests):
                procs.append(subprocess.Popen(["cp", "-r", src, str(d)], stdout=out,
                                              stderr=subprocess.STDOUT))
            deadline = time.monotonic() + timeout
            return max(p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs)
        except BaseException:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            raise


def local_copy(ds: dict[str, Any], nodes: int, dest: Path, work: Path) -> dict[str, Any]:
    """N ``cp -r`` of the page-cached source into the node directories, no PFS: the floor."""
    if dest.exists():
        shutil.rmtree(dest)
    dirs = [dest / f"node{k}" for k in range(nodes)]
    for d in dirs:
        d.mkdir(parents=True)
    warm(ds)
    t0 = time.monotonic()
    rc = _run_cps([ds["dir"]] * nodes, dirs, 600, work / f"log-{ds['name']}-local-{nodes}.txt")
    wall = time.monotonic() - t0
    problem = f"exit code {rc}" if rc else check_copies(dest, nodes, ds)
    shutil.rmtree(dest)
    return {"dataset": ds["name"], "nodes": nodes, "wall_s": wall,
            "local_gbps": nodes * ds["bytes"] / wall / 1e9, "ok": problem is None,
            **({"error": problem} if problem else {})}


def run_one(args: argparse.Namespace, ds: dict[str, Any], method: str, nodes: int,
            work: Path, dest: Path) -> dict[str, Any]:
    mnt = work / "mnt"
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
    node_dirs = [dest / f"node{k}" for k in range(nodes)]
    if method == "cp":
        ranks = nodes  # N cp processes, no MPI
        cmd = ["cp", "-r", f"{mnt}/{ds['name']}", f"{dest}/node<k>/  (x{nodes}, at once)"]
        for d in node_dirs:
            d.mkdir()
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    if args.stager_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.stager_path, env.get("PYTHONPATH")]))
    # Expected seconds if the PFS were the only cost, naive being the worst case.
    est = (nodes * ds["bytes"] / args.bandwidth
           + (1 + 4 * nodes) * ds["count"] * args.latency)
    timeout = 60 + 6 * est
    warm(ds)
    cfg = PFSConfig(bandwidth=args.bandwidth, latency=args.latency, mds_slots=args.mds_slots)
    row: dict[str, Any] = {"dataset": ds["name"], "method": method, "nodes": nodes,
                           "ranks": ranks, "command": " ".join(cmd)}
    log = work / f"log-{ds['name']}-{method}-{nodes}.txt"
    with SimulatedPFS(str(Path(ds["dir"]).parent), str(mnt), cfg) as pfs:
        t0_epoch, t0 = time.time(), time.monotonic()
        if method == "cp":
            rc = _run_cps([f"{mnt}/{ds['name']}"] * nodes, node_dirs, timeout, log)
        else:
            rc = _run(cmd, env, timeout, log)
        wall = time.monotonic() - t0
    counters = pfs.counters
    row.update(file_stats(counters, f"/{ds['name']}/", ds["count"]))
    row["wall_s"] = wall
    timing = counters.get("timing", {})
    # PFS busy ("input") time: first request in to last request out, as the servers saw it.
    row["pfs_busy_s"] = timing.get("busy_s")
    row["pfs_active_s"] = timing.get("active_s")
    row["pfs_first_op_after_start_s"] = (timing["first_op"] - t0_epoch
                                         if timing.get("first_op") is not None else None)
    row["pfs_last_op_before_end_s"] = (t0_epoch + wall - timing["last_op"]
                                       if timing.get("last_op") is not None else None)
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
    shutil.rmtree(dest)  # N copies of the dataset must not pile up (RAM or shared disk)
    return row


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
    p.add_argument("--dest-dir", default="auto",
                   help="where the N node copies go (a fresh subdirectory, removed after each "
                        "run); 'auto' = /dev/shm if memory allows N x dataset + margin, else "
                        "WORK/dest on disk")
    p.add_argument("--no-local-copy", action="store_true",
                   help="skip timing N cp -r of the page-cached source (the no-PFS floor)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "pfs_stage"))
    p.add_argument("--stager-commit", default="HEAD",
                   help="measure the stager as committed at this git revision (exported to "
                        "WORK/stager-snapshot); 'worktree' = the files as they are now")
    p.add_argument("--rerender", action="store_true",
                   help="measure nothing: recompute targets, OUT.md and OUT.png from OUT.json")
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
    if a.rerender:
        return rerender(Path(a.out))
    # SIGTERM/SIGHUP anywhere (not only while a PFS is mounted) must still clean up.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    specs = {"frames": (a.frames_bytes // a.frame_size, a.frame_size),
             "small": (a.small_files, a.small_size)}
    datasets = [make_dataset(work / "src", name, *specs[name]) for name in a.datasets]
    a.stager_path, stager_rev = None, "worktree"
    if a.stager_commit != "worktree":
        a.stager_path, stager_rev = snapshot_stager(a.stager_commit, work)
    need = max(a.nodes) * max(d["bytes"] for d in datasets)
    dest, dest_note = choose_dest(a.dest_dir, work, need)
    print(f"node destinations: {dest_note}", flush=True)
    transport = {"sm": "shared memory (--mca btl vader,self)",
                 "tcp": "TCP loopback (--mca btl tcp,self)",
                 "default": "Open MPI default selection"}[a.btl]
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "transport": transport,
        "destination": dest_note,
        "stager_commit": stager_rev,
        "config": {"bandwidth": a.bandwidth, "latency": a.latency, "mds_slots": a.mds_slots,
                   "nodes": a.nodes, "methods": a.methods, "ranks_per_node": a.ranks_per_node,
                   "btl": a.btl, "tiny": a.tiny, "datasets": a.datasets},
        "datasets": [{k: v for k, v in d.items() if k != "dir"} for d in datasets],
        "runs": [],
        "local_copy": [],
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    load = LoadSampler()
    try:
        with load:
            _run_all(a, datasets, work, dest, result)
    except KeyboardInterrupt:
        print("interrupted: mounts removed, partial results not written", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    result["load_average"], result["load_text"] = load.summary(), load.text()
    result["targets"] = evaluate(result)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    write_markdown(result, out.with_suffix(".md"))
    plot(result, out.with_suffix(".png"))
    for t in result["targets"]:
        print(f"[{'met' if t['met'] else 'NOT MET'}] {t['target']}: {fmt(t['measured'])}")
    return 0 if all(r["ok"] for r in result["runs"]) else 1


def rerender(out: Path) -> int:
    """Recompute the derived parts of a recorded run (targets, tables, plot) from its JSON."""
    result = json.loads(out.with_suffix(".json").read_text())
    result["targets"] = evaluate(result)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    write_markdown(result, out.with_suffix(".md"))
    plot(result, out.with_suffix(".png"))
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _run_all(a: argparse.Namespace, datasets: list[dict[str, Any]], work: Path, dest: Path,
             result: dict[str, Any]) -> None:
    for ds in datasets:
        for n in a.nodes:
            if not a.no_local_copy:
                loc = local_copy(ds, n, dest, work)
                result["local_copy"].append(loc)
                print(f"{ds['name']:6s} {'local':7s} N={n}: {loc['wall_s']:7.2f} s "
                      f"({loc['local_gbps']:.2f} GB/s, no PFS)", flush=True)
            for method in a.methods:
                row = run_one(a, ds, method, n, work, dest)
                result["runs"].append(row)
                busy = row["pfs_busy_s"]
                print(f"{ds['name']:6s} {method:7s} N={n}: {row['wall_s']:7.2f} s, "
                      f"PFS busy {busy if busy is None else round(busy, 2)} s, "
                      f"PFS read {row['pfs_read_over_dataset']:.3f}x, "
                      f"opens/file max {row['opens_per_file_max']}, "
                      f"stats/file {row['stats_per_file_mean']:.2f}"
                      + ("" if row["ok"] else f"  FAILED: {row['error']}"), flush=True)


if __name__ == "__main__":
    sys.exit(main())
