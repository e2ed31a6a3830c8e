"""``make demo``: the whole NF-HEDM chain, raw frames to a microstructure map, on one machine.

The steps (ground truth and raw frames, kernels compiled into a node-local cache,
stage 1, stage 2, the report against the truth) are docs/guide/hedm.md's "The main
job"; each stage is one staged workflow job (:func:`_job`) then ``stager clean``.
``--seeds ff`` runs FF-HEDM between the stages (:mod:`hedm.demo_ff`).
"""
from __future__ import annotations

import argparse
import getpass
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

__all__ = ["main", "build_parser"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hedm.demo",
                                description="Synthetic NF-HEDM layer -> raw frames -> staged "
                                            "reduction -> staged orientation fitting -> map, "
                                            "under mpirun, with a report against the truth.")
    p.add_argument("--np", type=int, default=4, help="MPI ranks (default 4)")
    p.add_argument("--nodes", type=int, default=2, help="emulated nodes (default 2)")
    p.add_argument("--out", default="demo-out", help="output directory (default demo-out)")
    p.add_argument("--frames", type=int, default=360,
                   help="frames per distance over 360 deg (default 360: 1 deg each)")
    p.add_argument("--rsample", type=float, default=50.0,
                   help="sample radius in um (default 50)")
    p.add_argument("--grains", type=int, default=15, help="grains (default 15)")
    p.add_argument("--seed", type=int, default=1, help="seed of the microstructure (default 1)")
    p.add_argument("--stage-root", default=None,
                   help="node-local root (default /dev/shm/mpistage-demo-$USER; %%n is added)")
    p.add_argument("--numba-cache", default=None, metavar="DIR",
                   help="node-local numba cache, kept between runs "
                        "(default $TMPDIR/mpistage-numba-$USER)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per job")
    p.add_argument("--keep-staged", action="store_true",
                   help="leave the staged copies on the nodes (default: stager clean)")
    p.add_argument("--seeds", choices=("simulator", "ff"), default="simulator",
                   help="NF stage 2's seed orientations: the simulator's (default) or the "
                        "grains FF-HEDM finds in raw FF frames of the same grains, FF stage 1 "
                        "and stage 2 staged and run between NF's stages (hedm.demo_ff; "
                        "`make demo-ff-nf`)")
    p.add_argument("--overwrite", action="store_true",
                   help="results may replace existing files in --out mpistage did not write "
                        "(as every flow's --overwrite)")
    p.add_argument("--record-phases", default=None, metavar="DIR",
                   help="also write DIR/demo_phases.json and DIR/demo_phases.md "
                        "(with --seeds ff: DIR/demo_ff_nf_phases.*, FF's phases too)")
    return p


def _env(stage_root: str, data: str, reduced: str, numba_dir: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", HEDM_STAGE=stage_root, HEDM_NF_DATA=data,
               HEDM_NF_REDUCED=reduced, NUMBA_CACHE_DIR=numba_dir, STAGER_PROGRESS="0")
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
            raise SystemExit(f"demo: {' '.join(argv[:4])} took over {timeout:.0f} s; "
                             f"see {log}") from exc
    if proc.returncode != 0:
        with open(log) as fh:
            tail = "".join(fh.readlines()[-25:])
        raise SystemExit(f"demo: step failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         f"--- last lines of {log} ---\n{tail}")
    return time.perf_counter() - t0


def _job(stage: str, name: str, out: str, report: str, params: str, results: str,
         args: argparse.Namespace, env: Dict[str, str], log: str) -> Dict[str, Optional[float]]:
    """One staged workflow job (``hedm/NAME.py`` with ``hedm/hooks/NAME.hook``), then
    ``stager clean``; returns the two wall times."""
    flow = os.path.join(ROOT, "hedm", name + ".py")
    hook = os.path.join(ROOT, "hedm", "hooks", name + ".hook")
    node = os.path.join(env["HEDM_STAGE"], "%n")
    for old in (report, f"{name}_run.json"):      # a previous run's records
        if os.path.exists(os.path.join(out, old)):
            os.unlink(os.path.join(out, old))
    print(f"demo: {stage}: mpirun -n {args.np}, {args.nodes} emulated nodes: stage "
          f"({os.path.basename(hook)}), run {os.path.basename(flow)}, drain ...", flush=True)
    job_s = _mpirun(args.np, ["-m", "workflows", "run", flow, "--stage", hook,
                              "--emulate-nodes", str(args.nodes), "--out", out,
                              *(["--overwrite"] if args.overwrite else []),
                              "--report", os.path.join(out, report), "--", "--params",
                              os.path.join(node, params), "--results",
                              os.path.join(node, results)], env, log, args.timeout)
    clean_s = None
    if not args.keep_staged:
        clean_s = _mpirun(args.np, ["-m", "stager", "clean", hook, "--emulate-nodes",
                                    str(args.nodes)], env, log, args.timeout)
    return {"job": job_s, "clean": clean_s}


def settle_outputs(out: str, reduced: str, args: argparse.Namespace) -> None:
    """Refuse (:class:`core.errors.OutputError`) a file of the demo's results in ``out``
    that mpistage did not write, unless ``--overwrite`` (:func:`core.outputs.check_outputs`):
    the report, both stages' records and results, FF's grains with ``--seeds ff``."""
    from core.outputs import check_outputs

    names = [os.path.join(out, n) for n in (
        "demo_report.json", "demo_report.txt", "demo_report.log", "run_fit.json",
        "nffit_run.json", "nf_map.h5", "nf_map.mic", "nf_map.png")]
    names += [os.path.join(reduced, n) for n in (
        "run.json", "nf_run.json", "nf_spots.h5", "nf_spots_binary.npy", "nf_spots.png")]
    if args.seeds == "ff":
        names += [os.path.join(out, "ff", n) for n in ("Grains.csv", "Grains.h5")]
    check_outputs(names, [], overwrite=args.overwrite, hint="choose another --out")


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
    from hedm.nfsynth import make_layer
    from hedm.run import write_json
    from core.errors import OutputError

    out = os.path.abspath(args.out)
    data = os.path.join(out, "dataset", "nf")
    reduced = os.path.join(out, "reduced")
    report = os.path.join(out, "demo_report")
    try:    # before anything: the demo's results replace no file mpistage did not write
        settle_outputs(out, reduced, args)
    except OutputError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    # the record first (marked): the log and report beside it are then this run's
    write_json(report + ".json", {"state": "running", "args": vars(args)})
    stage_root = args.stage_root or f"/dev/shm/mpistage-demo-{getpass.getuser()}"
    log = report + ".log"
    open(log, "w").close()
    t_start = time.perf_counter()
    load_before = os.getloadavg()[0]
    print(f"demo: ground truth ({args.grains} grains, {args.rsample:g} um) and raw frames "
          f"(2 distances x {args.frames}) in {data} ...", flush=True)
    layer = make_layer(data, frames=args.frames, rsample=args.rsample, grains=args.grains,
                       seed=args.seed)
    print("demo: compiling the kernels into a node-local numba cache ...", flush=True)
    t0 = time.perf_counter()
    numba_dir = args.numba_cache or os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                 f"mpistage-numba-{getpass.getuser()}")
    warm = warm_cache(numba_dir)
    compile_s = time.perf_counter() - t0
    env = _env(stage_root, data, reduced, warm.cache_dir)
    times: Dict[str, Any] = {"dataset": layer["seconds"], "compile": compile_s}
    times["stage1"] = _job("stage 1 (reduction)", "nf", reduced, "run.json", "nf/nf.params",
                           "results-nf", args, env, log)
    ff = None
    if args.seeds == "ff":
        from hedm.demo_ff import ff_seeds

        ff = ff_seeds(layer, out, args, env, log, _job)
        env = dict(env, HEDM_NF_DATA=ff["data"])
    times["stage2"] = _job("stage 2 (orientation fitting)", "nffit", out, "run_fit.json",
                           "nffit/nf.params", "results-fit", args, env, log)
    if not args.keep_staged:
        shutil.rmtree(stage_root, ignore_errors=True)
    times["total"] = time.perf_counter() - t_start
    times["load"] = (load_before, os.getloadavg()[0])
    facts = collect(out, layer, times, np_=args.np, nodes=args.nodes, stage_root=stage_root)
    text = render(facts)
    if ff is not None:
        from hedm.demo_ff import render_ff

        facts["ff"] = ff
        text += "\n" + render_ff(ff)
    print(text)
    with open(report + ".txt", "w") as fh:
        fh.write(text + "\n")
    write_json(report + ".json", facts)
    if args.record_phases:
        write_phases(args.record_phases, facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
