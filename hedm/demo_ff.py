"""``make demo-ff-nf``: FF-HEDM's grains seed the NF demo's fit (``hedm.demo --seeds ff``).

Between NF's stages (docs/guide/hedm.md): the layer's grains rendered into raw FF
frames (:func:`hedm.ffsynth.make_sweep`), FF stage 1 and stage 2 each staged, drained
and cleaned, and FF's orientations written as the layer's ``SeedOrientations``
(:func:`hedm.nffit.write_seeds`) beside ``nf.params`` and ``grid.txt`` in
``OUT/dataset/nf-ffseeds``; FF's grains are scored against the truth.
"""
from __future__ import annotations

import os
import shutil
import time
from typing import Any, Callable, Dict

__all__ = ["ff_seeds", "render_ff"]

#: FF frames over a full turn (:data:`hedm.ffsynth.SWEEP_GEOMETRY`: 1 deg each)
FF_FRAMES = 360


def _seeded_layer(layer: str, folder: str, u) -> str:
    """``folder`` holding the layer's ``nf.params`` and ``grid.txt`` with ``u`` as seeds."""
    from hedm.nffit import write_seeds

    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(os.path.join(layer, "grid.txt"), os.path.join(folder, "grid.txt"))
    with open(os.path.join(layer, "nf.params")) as fh:
        lines = fh.read().splitlines()
    lines = [f"NrOrientations {len(u)}" if t.split()[:1] == ["NrOrientations"] else t
             for t in lines]
    with open(os.path.join(folder, "nf.params"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    write_seeds(os.path.join(folder, "seeds.txt"), u)
    return folder


def ff_seeds(layer: Dict[str, Any], out: str, args: Any, env: Dict[str, str], log: str,
             job: Callable[..., Dict[str, Any]]) -> Dict[str, Any]:
    """The module docstring's steps with ``job`` (``hedm.demo``'s); returns the
    seeded layer's folder, the wall times and FF's grains against the truth.
    SystemExit when a job fails or FF finds no grain."""
    import numpy as np

    from hedm.ffsynth import load_sweep_truth, make_sweep, score_grains
    from hedm.grainscsv import read_grains_csv
    from hedm.nfsynth import load_truth

    micro, _ = load_truth(layer["folder"])
    data = os.path.join(out, "dataset", "ff")
    ff_out = os.path.join(out, "ff")
    os.makedirs(ff_out, exist_ok=True)
    if os.path.exists(os.path.join(ff_out, "Grains.csv")):
        os.unlink(os.path.join(ff_out, "Grains.csv"))
    print(f"demo: FF sweep of the same {micro.n_grains} grains (raw frames) in {data} ...",
          flush=True)
    t0 = time.perf_counter()
    pos = np.c_[micro.centres, np.zeros(len(micro.centres))]
    info = make_sweep(data, given={"u": micro.orientations, "pos": pos}, seed=args.seed,
                      n_frames=FF_FRAMES)
    times: Dict[str, Any] = {"sweep": time.perf_counter() - t0}
    env_ff = dict(env, HEDM_FF_DATA=data, HEDM_FF_REDUCED=ff_out)
    times["ff1"] = job("FF stage 1 (peaks)", "ff", ff_out, "run.json", "ff/ff.params",
                       "results-ff", args, env_ff, log)
    times["ff2"] = job("FF stage 2 (indexing, refinement)", "ffgrains", ff_out,
                       "run_grains.json", "ffgrains/ff.params", "results-ffgrains", args, env_ff,
                       log)
    rows = read_grains_csv(os.path.join(ff_out, "Grains.csv"))["rows"]
    if not len(rows):
        raise SystemExit(f"demo: FF stage 2 found no grain; see {ff_out}/ffgrains_run.json")
    seconds: Dict[str, Any] = {
        k: v if isinstance(v, float) else {kk: None if vv is None else round(vv, 3)
                                           for kk, vv in v.items()} for k, v in times.items()}
    stages = {key: _stage_facts(ff_out, runner, flow, seconds[key])
              for key, runner, flow in (("ff1", "run.json", "ff_run.json"),
                                        ("ff2", "run_grains.json", "ffgrains_run.json"))}
    u = rows[:, 1:10].reshape(-1, 3, 3)
    score = score_grains(load_sweep_truth(data), u, rows[:, 10:13],
                         rows[:, 24:33].reshape(-1, 3, 3) / 1e6)
    seeded = _seeded_layer(layer["folder"], os.path.join(out, "dataset", "nf-ffseeds"), u)
    return {"data": seeded, "sweep": data, "out": ff_out, "frames": FF_FRAMES,
            "spots": info["spots"], "grains": int(len(rows)), "true_grains": micro.n_grains,
            "found": score["found"], "missed": score["missed"], "extra": score["extra"],
            "max_misorientation_deg": float(np.max(score["misorientation_deg"])),
            "max_position_um": float(np.max(score["position_um"])),
            "max_strain_err": float(np.max(score["strain_err"])),
            "stage1": stages["ff1"], "stage2": stages["ff2"], "seconds": seconds}


def _stage_facts(folder: str, runner: str, flow: str, seconds: Dict[str, Any]
                 ) -> Dict[str, Any]:
    """One FF job's records for the report: the runner's (tasks, staging) and the flow's
    (phase spans from the tasks' clocks, drain, indexing), and its wall times (rounded)."""
    import json

    with open(os.path.join(folder, runner)) as fh:
        run = json.load(fh)
    with open(os.path.join(folder, flow)) as fh:
        wf = json.load(fh)
    return {"runner": run, "seconds": seconds,
            "workflow": {k: wf.get(k) for k in ("phases", "drain", "index", "refine",
                                                "frame_log")}}


def render_ff(ff: Dict[str, Any]) -> str:
    """The report's lines on FF's seeds."""
    s = ff["seconds"]
    return "\n".join([
        f"FF seeds  {ff['frames']} raw FF frames of the same grains ({ff['spots']} spots): "
        f"stage 1 {s['ff1']['job']:.1f} s, stage 2 {s['ff2']['job']:.1f} s (staged, drained, "
        "cleaned)",
        f"          {ff['grains']} grains in Grains.csv for {ff['true_grains']} true: "
        f"{ff['found']} found, {ff['missed']} missed, {ff['extra']} extra; orientations "
        f"within {ff['max_misorientation_deg']:.4f} deg, positions within "
        f"{ff['max_position_um']:.2f} um; NF stage 2 seeded with them instead of the "
        f"layer's seeds ({ff['data']})"])
