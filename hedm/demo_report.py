"""The demo's report: facts gathered from the run's files, rendered for a person, phases for bench/.

Nothing is re-measured: the runners' ``run.json``/``run_fit.json``, the workflows'
``nf_run.json``/``nffit_run.json``, stage 1's binary images, the map and the truth.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["collect", "render", "write_phases", "phase_rows", "TARGETS"]

#: The demo's accuracy targets: (share of all grid points, share of interior points)
#: within 0.25 deg of the truth.
TARGETS = (0.80, 0.95)


def _load(path: str) -> Dict[str, Any]:
    with open(path) as fh:
        return json.load(fh)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _rounded(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 3)


def collect(out: str, layer: Dict[str, Any], times: Dict[str, Any], np_: int, nodes: int,
            stage_root: str) -> Dict[str, Any]:
    """Everything the report shows, as one JSON-able dict (also draws the truth comparison)."""
    import h5py
    import numpy as np

    from kernels import NFGeometry

    from hedm.nf import BINARY_SUFFIX
    from hedm.nfsynth import load_truth, misorientation_from_truth, plot_truth_comparison
    from hedm.nfsynth import score_images, score_map

    reduced = os.path.join(out, "reduced")
    run1 = _load(os.path.join(reduced, "run.json"))
    run2 = _load(os.path.join(out, "run_fit.json"))
    nf = _load(os.path.join(reduced, "nf_run.json"))
    fit = _load(os.path.join(out, "nffit_run.json"))
    micro, truth_images = load_truth(layer["folder"])
    binary = os.path.join(reduced, nf["params"]["ReducedFileName"] + BINARY_SUFFIX)
    images = score_images(np.load(binary, mmap_mode="r"), truth_images)
    files = {k: os.path.join(out, os.path.basename(fit["result"][k])) for k in ("h5", "mic", "png")}
    with h5py.File(files["h5"], "r") as f:
        xy, u = f["position"][()], f["orientation_matrix"][()]
        grains, grid = f["grain_id"][()], f["grid"][()]
    grid_size = NFGeometry.from_params(os.path.join(layer["folder"], "nf.params")).grid_size
    accuracy = score_map(micro, xy, u, float(grid_size or 2 * grid[0, 4]), grain_id=grains)
    comparison = os.path.join(out, "nf_map_vs_truth.png")
    plot_truth_comparison(comparison, grid, u, micro, misorientation_from_truth(micro, xy, u),
                          accuracy)
    job = {"ranks": np_, "emulated_nodes": nodes, "executor": run2.get("executor"),
           "workers": run2.get("workers"), "stage_root": stage_root}
    return {
        "layer": {k: v for k, v in layer.items() if k != "settings"},
        "settings": {k: v for k, v in layer["settings"].items()
                     if k not in ("geometry", "stage1", "stage2")},
        "job": job,
        "stage1": {"runner": run1, "workflow": {k: nf.get(k) for k in
                                                ("phases", "frame_log", "drain", "result")},
                   "seconds": {k: _rounded(v) for k, v in times["stage1"].items()},
                   "images": images},
        "stage2": {"runner": run2, "workflow": {k: fit.get(k) for k in
                                                ("phases", "fit_log", "drain", "result",
                                                 "geometry")},
                   "seconds": {k: _rounded(v) for k, v in times["stage2"].items()}},
        "dataset_seconds": _rounded(times["dataset"]),
        "compile_seconds": _rounded(times["compile"]),
        "total_seconds": _rounded(times.get("total")),
        "load_average": times.get("load"),
        "accuracy": accuracy,
        "targets": {"all": TARGETS[0], "interior": TARGETS[1],
                    "met": bool(accuracy["fraction"] >= TARGETS[0]
                                and accuracy["interior_fraction"] >= TARGETS[1])},
        "outputs": [files["h5"], files["mic"], files["png"], comparison,
                    os.path.join(reduced, nf["params"]["ReducedFileName"] + ".h5"), binary,
                    os.path.join(out, "demo_report.txt"), os.path.join(out, "demo_report.log")],
    }


def _stage_rows(s: Dict[str, Any], label: str, middle: List[Tuple[str, Any, str]],
                tail_of: str, write_note: str) -> List[Tuple[str, Any, str]]:
    """One staged job's rows: staging, ``middle`` (its own task phases), the reduce after
    the last ``tail_of`` task, write, drain, the whole job and its clean."""
    runner, wf = s["runner"], s["workflow"]
    st = runner.get("stage") or {}
    ph = wf.get("phases") or {}
    secs = runner.get("seconds") or {}
    rows: List[Tuple[str, Any, str]] = [
        (f"{label}: stage", secs.get("stage"),
         f"plan + node layout + transfer ({st.get('seconds', 0):.2f} s moving "
         f"{_mib(st.get('bytes_written', 0))})")]
    rows += middle
    if "reduce" in ph and tail_of in ph:
        r = ph["reduce"]
        rows.append((f"{label}: reduce (tree)", round(max(0.0, r["end"] - ph[tail_of]["end"]), 4),
                     f"after the last {tail_of} task; {r['tasks']} merges from "
                     f"t={r['start']:.2f} s overlap them"))
    if "write" in ph:
        rows.append((f"{label}: write", ph["write"]["seconds"], write_note))
    if wf.get("drain"):
        d = wf["drain"]
        rows.append((f"{label}: drain", d["seconds"],
                     f"{d['files']} files, {_mib(d['bytes'])} to the shared output"))
    rows.append((f"{label}: whole job", s["seconds"]["job"],
                 "mpirun, including MPI start-up and imports"))
    if s["seconds"].get("clean") is not None:
        rows.append((f"{label}: clean", s["seconds"]["clean"],
                     "stager clean on every node (separate mpirun)"))
    return rows


def _busy(ph: Dict[str, Any], runner: Dict[str, Any]) -> str:
    return f"{ph['tasks']} tasks, {ph['busy']:.1f} s busy over {runner.get('workers')} workers"


def _nf_rows(f: Dict[str, Any], key: str, label: str) -> List[Tuple[str, Any, str]]:
    """NF stage 1 (background, per-frame tasks) or stage 2 (fit)."""
    s = f[key]
    runner, wf = s["runner"], s["workflow"]
    ph = wf.get("phases") or {}
    middle: List[Tuple[str, Any, str]] = []
    if key == "stage1":
        if "background" in ph:
            b = ph["background"]
            middle.append((f"{label}: background", b["seconds"],
                           f"{b['tasks']} tasks (row bands + 1 assemble per distance)"))
        if "frames" in ph:
            middle.append((f"{label}: per-frame tasks", ph["frames"]["seconds"],
                           _busy(ph["frames"], runner)))
        return _stage_rows(s, label, middle, "frames", "HDF5 + PNG + binary images, node-local")
    if "fit" in ph:
        log = wf.get("fit_log") or {}
        rate = log.get("points_per_busy_s") or 0.0
        middle.append((f"{label}: fit", ph["fit"]["seconds"],
                       f"{ph['fit']['tasks']} tasks, {log.get('points')} grid points, "
                       f"{ph['fit']['busy']:.1f} s busy over {runner.get('workers')} workers "
                       f"({rate:.1f} points per busy second)"))
    return _stage_rows(s, label, middle, "fit", "grains, .mic + HDF5 + PNG, node-local")


def ff_rows(ff: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """FF's rows (``hedm.demo --seeds ff``): its sweep, stage 1 (peaks per frame) and
    stage 2 (spots, indexing, one refinement task per grain)."""
    s1, s2 = ff["stage1"], ff["stage2"]
    ph1 = s1["workflow"].get("phases") or {}
    ph2 = s2["workflow"].get("phases") or {}
    rows: List[Tuple[str, Any, str]] = [
        ("FF truth + raw frames", ff["seconds"]["sweep"],
         f"the layer's grains rendered into {ff['frames']} GE frames ({ff['spots']} spots)")]
    middle = []
    if "frames" in ph1:
        middle.append(("FF stage 1: per-frame tasks", ph1["frames"]["seconds"],
                       "peak search; " + _busy(ph1["frames"], s1["runner"])))
    rows += _stage_rows(s1, "FF stage 1", middle, "frames", "peaks HDF5 + CSV + PNG, node-local")
    middle = []
    if "spots" in ph2:
        middle.append(("FF stage 2: spots", ph2["spots"]["seconds"],
                       "1 task: peaks merged across frames, located, given a ring"))
    if "index" in ph2:
        idx = s2["workflow"].get("index") or {}
        middle.append(("FF stage 2: indexing", ph2["index"]["seconds"],
                       f"1 task: {idx.get('seeds_tried')} seeds tried ({idx.get('method')}), "
                       f"{idx.get('candidates')} grains; the refinement tasks exist only now"))
    if "refine" in ph2:
        ref = s2["workflow"].get("refine") or []
        secs = [r["seconds"] for r in ref] or [0.0]
        middle.append(("FF stage 2: refinement", ph2["refine"]["seconds"],
                       f"one task per grain: {_busy(ph2['refine'], s2['runner'])}, "
                       f"{min(secs):.2f}-{max(secs):.2f} s each"))
    rows += _stage_rows(s2, "FF stage 2", middle, "refine", "Grains.csv + Grains.h5, node-local")
    return rows


def phase_rows(f: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """``(phase, seconds, note)`` rows, in the order things happen (FF's between NF's
    stages when the facts hold them)."""
    lay = f["layer"]
    rows: List[Tuple[str, Any, str]] = [
        ("truth + raw frames", f["dataset_seconds"],
         "reused (same settings)" if lay.get("reused") else
         f"microstructure, images, {lay['raw_files']} TIFF frames (the input, not timed "
         "by the paper)"),
        ("compile kernels", f["compile_seconds"],
         "numba cache kept between runs (the first run on a machine compiles)")]
    rows += _nf_rows(f, "stage1", "stage 1")
    if f.get("ff"):
        rows += ff_rows(f["ff"])
    rows += _nf_rows(f, "stage2", "stage 2")
    rows.append(("total", f["total_seconds"], "everything above"))
    return rows


def _tasks_line(runner: Dict[str, Any]) -> str:
    t = runner.get("tasks") or {}
    return (f"{t.get('launched', 0)} tasks, {t.get('succeeded', 0)} succeeded, "
            f"{t.get('failed', 0)} failed")


def _staging_line(runner: Dict[str, Any]) -> str:
    st = runner.get("stage") or {}
    if not st:
        return "not staged"
    amp = "n/a" if st.get("amplification") is None else f"{st['amplification']:.2f}"
    return (f"{st['files']} files, {_mib(st['bytes_per_node'])} per node -> "
            f"{st.get('n_nodes', len(st.get('nodes', [])))} nodes ({st['method']}) in "
            f"{st['seconds']:.2f} s, amplification {amp}")


def render(f: Dict[str, Any]) -> str:
    """The report a user reads at the end of ``make demo``."""
    lay, job, acc = f["layer"], f["job"], f["accuracy"]
    s1, s2 = f["stage1"], f["stage2"]
    log = s2["workflow"].get("fit_log") or {}
    geo = s2["workflow"].get("geometry") or {}
    lines = ["mpistage demo: NF-HEDM from raw frames to a microstructure map", "=" * 62]
    lines.append(f"truth     {lay['grains']} Voronoi grains, random orientations, in a "
                 f"{f['settings']['rsample']:g} um disk; {lay['grid_points']} grid points "
                 f"(2.5 um triangles); {lay['seeds']} seed orientations as FF-HEDM gives them "
                 f"({lay['grains']} grains {f['settings']['seed_error_deg']:g} deg off + "
                 f"{f['settings']['spurious_seeds']} spurious)")
    lines.append(f"dataset   {lay['raw_files']} raw frames: {lay['distances']} distances x "
                 f"{lay['frames_per_distance']} frames of {abs(lay['omega_step']):g} deg, "
                 f"{lay['shape'][1]}x{lay['shape'][0]} uint16 TIFF ({_mib(lay['raw_bytes'])}) "
                 "+ nf.params, grid.txt, seeds.txt")
    lines.append(f"          {lay['folder']} ({'reused' if lay.get('reused') else 'generated'})")
    lines.append(f"jobs      mpirun -n {job['ranks']} --oversubscribe, {job['emulated_nodes']} "
                 f"emulated nodes, executor {job['executor']}: rank 0 runs the graph, "
                 f"{job['workers']} workers serve tasks")
    load = f.get("load_average")
    if load:
        lines.append(f"          machine load average (1 min) {load[0]:.1f} before, "
                     f"{load[1]:.1f} after ({os.cpu_count()} CPUs)")
    im = s1["images"]
    lines.append(f"stage 1   staged {_staging_line(s1['runner'])}")
    lines.append(f"          {_tasks_line(s1['runner'])}; binary images vs the truth: "
                 f"{im.get('pixels_set', 0):,} pixels set, {im.get('missing', 0)} missing, "
                 f"{im.get('extra', 0)} extra" + (" (equal)" if im.get("equal") else ""))
    lines.append(f"stage 2   staged {_staging_line(s2['runner'])}")
    lines.append(f"          {_tasks_line(s2['runner'])}: {log.get('tasks')} fitting tasks "
                 f"over {log.get('points')} grid points, {geo.get('hkls')} reflections; inputs "
                 f"loaded {log.get('input_loads')} times (4 per worker: images memory-mapped "
                 "once per worker)")
    lines.append("phases    (wall time)")
    for name, secs, note in phase_rows(f):
        shown = "   n/a" if secs is None else f"{secs:6.2f} s"
        lines.append(f"  {name:<26}{shown}   {note}")
    met = "met" if f["targets"]["met"] else "NOT met"
    lines.append(f"accuracy  within {acc['limit_deg']:g} deg of the truth: "
                 f"{100 * acc['fraction']:.1f}% of {acc['points']} grid points (target >= "
                 f"{100 * TARGETS[0]:.0f}%), {100 * acc['interior_fraction']:.1f}% of the "
                 f"{acc['interior_points']} two grid steps inside a grain (target >= "
                 f"{100 * TARGETS[1]:.0f}%): {met}")
    lines.append(f"          median misorientation {acc['median_deg']:.3f} deg; "
                 f"{acc.get('grains_found')} grains found by flood fill (truth: "
                 f"{acc['true_grains']})")
    lines.append("outputs   " + f["outputs"][0])
    lines.extend("          " + p for p in f["outputs"][1:])
    return "\n".join(lines)


def write_phases(folder: str, f: Dict[str, Any]) -> str:
    """``folder/demo_phases.json`` and ``.md`` (``demo_ff_nf_phases.*`` for a run with FF's
    seeds): the phase table of this run; returns the path without its suffix."""
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, "demo_ff_nf_phases" if f.get("ff") else "demo_phases")
    rows = phase_rows(f)
    record = {"what": "phase-by-phase wall time of `make demo` (NF-HEDM stage 1 + stage 2, "
                      "staged, mpirun)",
              "layer": f["layer"], "job": f["job"],
              "phases": [{"phase": n, "seconds": s, "note": note} for n, s, note in rows],
              "task_phases": {"stage1": f["stage1"]["workflow"]["phases"],
                              "stage2": f["stage2"]["workflow"]["phases"]},
              "staging": {"stage1": f["stage1"]["runner"].get("stage"),
                          "stage2": f["stage2"]["runner"].get("stage")},
              "images": f["stage1"]["images"], "accuracy": f["accuracy"]}
    ff = f.get("ff")
    if ff:
        record["what"] = ("phase-by-phase wall time of `make demo-ff-nf` (NF-HEDM stage 1, "
                          "FF-HEDM stage 1 + stage 2, NF-HEDM stage 2 seeded by FF's grains; "
                          "staged, mpirun)")
        for key, name in (("ff_stage1", "stage1"), ("ff_stage2", "stage2")):
            record["task_phases"][key] = ff[name]["workflow"]["phases"]
            record["staging"][key] = ff[name]["runner"].get("stage")
        record["ff_grains"] = {k: ff[k] for k in ("grains", "true_grains", "found", "missed",
                                                  "extra", "max_misorientation_deg",
                                                  "max_position_um", "max_strain_err")
                               if k in ff}
    with open(stem + ".json", "w") as fh:
        json.dump(record, fh, indent=1)
    lay, acc = f["layer"], f["accuracy"]
    md = ["# `make demo" + ("-ff-nf" if ff else "") + "`: phase-by-phase timing", "",
          ("FF-HEDM's grains seeding " if ff else "")
          + f"NF-HEDM from raw frames to a map: {lay['raw_files']} frames of "
          f"{lay['shape'][1]}x{lay['shape'][0]} ({lay['distances']} distances x "
          f"{lay['frames_per_distance']}), {lay['grid_points']} grid points, "
          f"`mpirun -n {f['job']['ranks']} --oversubscribe`, {f['job']['emulated_nodes']} "
          f"emulated nodes, `mpi` executor ({f['job']['workers']} workers), on a shared 2-core "
          "machine" + (f" (load average {f['load_average'][0]:.1f} before, "
                       f"{f['load_average'][1]:.1f} after)" if f.get("load_average") else "")
          + (f"; {ff['frames']} raw FF frames of the same grains" if ff else "")
          + ". One run; generated by `python -m hedm.demo "
          + ("--seeds ff " if ff else "") + "--record-phases bench/results`.",
          "", "| phase | seconds | note |", "|---|---:|---|"]
    md += [f"| {n} | {'n/a' if s is None else f'{s:.2f}'} | {note} |" for n, s, note in rows]
    md += ["", f"Accuracy: {100 * acc['fraction']:.1f}% of {acc['points']} grid points and "
           f"{100 * acc['interior_fraction']:.1f}% of {acc['interior_points']} interior points "
           f"within {acc['limit_deg']:g} deg of the truth."
           + (f" FF: {ff['found']} of {ff['true_grains']} grains found, {ff['extra']} extra, "
              f"orientations within {ff['max_misorientation_deg']:.4f} deg, positions within "
              f"{ff['max_position_um']:.2f} um." if ff else ""), "",
           "The machine is shared with other jobs, so repeated runs differ; compare phases "
           "within one run. Reduce overlaps the tasks it merges (no barrier between map and "
           "reduce): its row is the time from the last task's end to the last merge's end."]
    with open(stem + ".md", "w") as fh:
        fh.write("\n".join(md) + "\n")
    return stem
