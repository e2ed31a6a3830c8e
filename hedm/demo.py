"""``make demo``: the main job, end to end, on one machine.

1. **dataset** -- a synthetic NF-HEDM dataset on the "shared filesystem"
   (``OUT/dataset/nf``): a TIFF series ``stem_%06d.tif`` with planted spots
   whose true positions are kept (``truth.npy``), and ``nf.params``;
2. **compile** -- the numba kernels are compiled once into a node-local cache
   (``kernels.numba_cache.warm_cache``; kept between runs, so only the first
   run on a machine pays it), so the workers only load them;
3. **the job** -- ``mpirun -n NP --oversubscribe python -m workflows run
   hedm/nf.py --stage hedm/hooks/nf.hook --emulate-nodes K``: the
   stager replicates the dataset into every emulated node's directory under
   ``--stage-root``, the NF workflow runs on the ``mpi`` executor, results are
   written node-locally and drained into ``OUT``;
4. **clean** -- ``stager clean`` removes the staged copies from every node;
5. **report** -- printed, and written to ``OUT/demo_report.txt`` / ``.json``:
   staging (bytes, delivered GB/s, amplification), tasks, wall time per phase,
   spots found versus planted, output paths. ``--record-phases DIR`` also
   writes ``DIR/demo_phases.json`` and ``.md``.

Sizes: 300 frames of 512x512 uint16 (150 MiB) by default; a run takes about a
minute on a 2-core machine. A dataset already generated with the same model is
reused.
"""
from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any, Dict, List, Optional

__all__ = ["main", "build_parser", "demo_model"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NF_HOOK = os.path.join(ROOT, "hedm", "hooks", "nf.hook")
NF_FLOW = os.path.join(ROOT, "hedm", "nf.py")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hedm.demo",
                                description="Generate a synthetic NF-HEDM dataset, stage it to "
                                            "emulated nodes and reduce it under mpirun.")
    p.add_argument("--np", type=int, default=4, help="MPI ranks (default 4)")
    p.add_argument("--nodes", type=int, default=2, help="emulated nodes (default 2)")
    p.add_argument("--out", default="demo-out", help="output directory (default demo-out)")
    p.add_argument("--frames", type=int, default=300, help="frames (default 300)")
    p.add_argument("--size", type=int, default=512, help="frame side in pixels (default 512)")
    p.add_argument("--spots", type=int, default=None,
                   help="planted spots (default: 2 per frame)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--stage-root", default=None,
                   help="node-local root (default /dev/shm/mpistage-demo-$USER; %%n is added)")
    p.add_argument("--numba-cache", default=None, metavar="DIR",
                   help="node-local numba cache, kept between runs "
                        "(default $TMPDIR/mpistage-numba-$USER)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed for the job")
    p.add_argument("--keep-staged", action="store_true",
                   help="leave the staged copies on the nodes (default: stager clean)")
    p.add_argument("--record-phases", default=None, metavar="DIR",
                   help="also write DIR/demo_phases.json and DIR/demo_phases.md")
    return p


def demo_model(frames: int, size: int, spots: Optional[int], seed: int):
    """The detector model of the demo dataset (spots persist over 3 frames, as grains do)."""
    from kernels.synth import DetectorModel

    return DetectorModel(shape=(size, size), n_frames=frames, seed=seed,
                         n_spots=spots if spots is not None else 2 * frames, frames_per_spot=3)


def _dataset(folder: str, model) -> Dict[str, Any]:
    from hedm.synth import make_nf_dataset

    t0 = time.perf_counter()
    marker = os.path.join(folder, "model.json")
    wanted = {"kind": "nf", **json.loads(json.dumps(asdict(model)))}
    try:
        with open(marker) as fh:
            reused = json.load(fh) == wanted and os.path.isfile(os.path.join(folder, "nf.params"))
    except (OSError, ValueError):
        reused = False
    if not reused:
        shutil.rmtree(folder, ignore_errors=True)
        make_nf_dataset(folder, model)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.endswith(".tif"))
    return {"folder": folder, "reused": reused, "seconds": time.perf_counter() - t0,
            "tiff_bytes": size}


def _env(stage_root: str, data: str, numba_dir: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", HEDM_STAGE=stage_root, HEDM_NF_DATA=data,
               NUMBA_CACHE_DIR=numba_dir, STAGER_PROGRESS="0")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _mpirun(np_: int, argv: List[str], env: Dict[str, str], log: str, timeout: float) -> float:
    cmd = ["mpirun", "-n", str(np_), "--oversubscribe", sys.executable] + argv
    t0 = time.perf_counter()
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired as exc:
            raise SystemExit(f"demo: {' '.join(argv[:3])} took over {timeout:.0f} s; "
                             f"see {log}") from exc
    if proc.returncode != 0:
        with open(log) as fh:
            tail = "".join(fh.readlines()[-25:])
        raise SystemExit(f"demo: step failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         f"--- last lines of {log} ---\n{tail}")
    return time.perf_counter() - t0


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.np < 2 or not 1 <= args.nodes <= args.np:
        print("demo: need --np >= 2 (one rank runs the graph) and 1 <= --nodes <= --np",
              file=sys.stderr)
        return 2
    if shutil.which("mpirun") is None:
        print("demo: mpirun not found; run `make setup` (installs openmpi-bin)", file=sys.stderr)
        return 2
    from kernels.numba_cache import warm_cache

    from hedm.demo_report import collect, render, write_phases

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    stage_root = args.stage_root or f"/dev/shm/mpistage-demo-{getpass.getuser()}"
    log = os.path.join(out, "demo.log")
    open(log, "w").close()
    model = demo_model(args.frames, args.size, args.spots, args.seed)
    print(f"demo: dataset of {model.n_frames} frames {model.shape[0]}x{model.shape[1]} "
          f"in {out}/dataset/nf ...", flush=True)
    data = _dataset(os.path.join(out, "dataset", "nf"), model)
    print("demo: compiling the kernels into a node-local numba cache ...", flush=True)
    t0 = time.perf_counter()
    numba_dir = args.numba_cache or os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                 f"mpistage-numba-{getpass.getuser()}")
    warm = warm_cache(numba_dir)
    compile_s = time.perf_counter() - t0
    env = _env(stage_root, data["folder"], warm.cache_dir)
    for stale in ("nf_run.json", "run.json"):
        if os.path.exists(os.path.join(out, stale)):
            os.unlink(os.path.join(out, stale))
    print(f"demo: mpirun -n {args.np}: stage to {args.nodes} emulated nodes under {stage_root}, "
          "reduce, drain ...", flush=True)
    job_s = _mpirun(args.np, [
        "-m", "workflows", "run", NF_FLOW, "--stage", NF_HOOK, "--emulate-nodes", str(args.nodes),
        "--out", out, "--report", os.path.join(out, "run.json"), "--",
        "--params", os.path.join(stage_root, "%n", "nf", "nf.params"),
        "--results", os.path.join(stage_root, "%n", "results")], env, log, args.timeout)
    clean_s = None
    if not args.keep_staged:
        clean_s = _mpirun(args.np, ["-m", "stager", "clean", NF_HOOK, "--emulate-nodes",
                                    str(args.nodes)], env, log, args.timeout)
        shutil.rmtree(stage_root, ignore_errors=True)
    facts = collect(out, data, model, {"compile": compile_s, "job": job_s, "clean": clean_s},
                    np_=args.np, nodes=args.nodes, stage_root=stage_root)
    text = render(facts)
    print(text)
    with open(os.path.join(out, "demo_report.txt"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(out, "demo_report.json"), "w") as fh:
        json.dump(facts, fh, indent=1, default=str)
    if args.record_phases:
        write_phases(args.record_phases, facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
