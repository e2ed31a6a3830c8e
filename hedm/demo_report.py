"""The demo's report: facts gathered from the run's files, rendered for a person, phases for bench/.

Sources (all written by the run itself, nothing re-measured here):
``OUT/run.json`` (the runner: tasks, stage report, stage/flow seconds),
``OUT/nf_run.json`` (the workflow: phase spans from the tasks' own clocks,
per-worker cache hits, drain), ``OUT/<ReducedFileName>.h5`` (the spots) and
``OUT/dataset/nf/truth.npy`` (what was planted).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

__all__ = ["collect", "render", "write_phases", "phase_rows"]


def _load(path: str) -> Dict[str, Any]:
    with open(path) as fh:
        return json.load(fh)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _rounded(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 3)


def collect(out: str, data: Dict[str, Any], model: Any, times: Dict[str, Optional[float]],
            np_: int, nodes: int, stage_root: str) -> Dict[str, Any]:
    """Everything the report shows, as one JSON-able dict."""
    import numpy as np

    from hedm.output import read_table
    from hedm.synth import load_truth, score

    run = _load(os.path.join(out, "run.json"))
    nf = _load(os.path.join(out, "nf_run.json"))
    h5 = os.path.join(out, nf["params"]["ReducedFileName"] + ".h5")
    png = os.path.join(out, nf["params"]["ReducedFileName"] + ".png")
    truth = load_truth(data["folder"])
    cents = read_table(h5, "spot_centroids")
    pixels = read_table(h5, "spots")
    return {
        "dataset": {"folder": data["folder"], "frames": model.n_frames, "shape": list(model.shape),
                    "tiff_bytes": data["tiff_bytes"], "reused": data["reused"],
                    "seconds": round(data["seconds"], 3), "planted_spots": int(len(truth)),
                    "planted_spot_frames": int(np.sum(truth["n_frames"])),
                    "seed": model.seed,
                    "snr_min": float(np.min(truth["snr"])) if len(truth) else None},
        "job": {"ranks": np_, "emulated_nodes": nodes, "executor": run.get("executor"),
                "workers": run.get("workers"), "stage_root": stage_root,
                "seconds": round(times["job"] or 0.0, 3), "runner_seconds": run.get("seconds")},
        "stage": run.get("stage"),
        "tasks": run.get("tasks"),
        "phases": nf.get("phases", {}),
        "frame_log": nf.get("frame_log", {}),
        "drain": nf.get("drain"),
        "compile_seconds": round(times["compile"] or 0.0, 3),
        "clean_seconds": _rounded(times.get("clean")),
        "spots": {"found": int(len(cents)), "pixels": int(len(pixels)),
                  "score": score(truth, cents, nf["params"]["RawStartNr"])},
        "outputs": [h5, png, os.path.join(out, "nf_run.json"), os.path.join(out, "run.json"),
                    os.path.join(out, "demo_report.txt"), os.path.join(out, "demo.log")],
    }


def phase_rows(f: Dict[str, Any]) -> list:
    """``(phase, seconds, note)`` rows, in the order things happen."""
    ph, secs = f["phases"], f["job"].get("runner_seconds") or {}
    st = f["stage"] or {}
    rows = [("compile kernels", f["compile_seconds"],
             "before the job, into a numba cache kept between runs (the first run on a "
             "machine compiles every kernel; later runs only load)")]
    rows.append(("stage", secs.get("stage"),
                 f"plan + node layout + transfer ({st.get('seconds', 0):.2f} s moving bytes)"))
    if "background" in ph:
        b = ph["background"]
        rows.append(("background", b["seconds"], f"{b['tasks'] - 1} row-band tasks + 1 assemble"))
    if "frames" in ph:
        fr = ph["frames"]
        rows.append(("per-frame tasks", fr["seconds"],
                     f"{fr['tasks']} tasks, {fr['busy']:.1f} s busy over "
                     f"{f['job']['workers']} workers"))
    if "reduce" in ph and "frames" in ph:
        r = ph["reduce"]
        tail = max(0.0, r["end"] - ph["frames"]["end"])
        rows.append(("reduce (tree)", round(tail, 4),
                     f"after the last frame; {r['tasks']} merges ran from "
                     f"t={r['start']:.2f} s, overlapping the frames"))
    if "write" in ph:
        rows.append(("write results", ph["write"]["seconds"], "HDF5 + PNG, node-local"))
    if f.get("drain"):
        d = f["drain"]
        rows.append(("drain", d["seconds"], f"{d['files']} files, {_mib(d['bytes'])} to the "
                                            "shared output directory"))
    rows.append(("whole job (mpirun)", f["job"]["seconds"],
                 "includes MPI start-up and Python imports on 4 ranks"))
    if f.get("clean_seconds") is not None:
        rows.append(("clean", f["clean_seconds"], "stager clean on every node (separate mpirun)"))
    return rows


def render(f: Dict[str, Any]) -> str:
    """The report a user reads at the end of ``make demo``."""
    d, job, st, tasks, sc = f["dataset"], f["job"], f["stage"] or {}, f["tasks"] or {}, f["spots"]
    log = f["frame_log"]
    ph = f["phases"]
    lines = ["mpistage demo: staged NF-HEDM reduction", "=" * 40]
    lines.append(f"dataset   {d['frames']} frames of {d['shape'][0]}x{d['shape'][1]} uint16 "
                 f"(TIFF series, {_mib(d['tiff_bytes'])}) + nf.params; {d['planted_spots']} "
                 f"planted spots on 3 frames each ({d['planted_spot_frames']} spot-frames), "
                 f"SNR >= {d['snr_min']:.0f}")
    lines.append(f"          {d['folder']} ({'reused' if d['reused'] else 'generated'} in "
                 f"{d['seconds']:.1f} s)")
    lines.append(f"job       mpirun -n {job['ranks']} --oversubscribe, {job['emulated_nodes']} "
                 f"emulated nodes, executor {job['executor']}: rank 0 runs the graph, "
                 f"{job['workers']} workers serve tasks")
    if st:
        amp = "n/a" if st.get("amplification") is None else f"{st['amplification']:.2f}"
        lines.append(f"staging   {st['files']} files, {_mib(st['bytes_per_node'])} per node -> "
                     f"{len(st['nodes'])} nodes ({st['method']}): {_mib(st['bytes_written'])} "
                     f"written in {st['seconds']:.2f} s = {st['delivered_gbps']:.2f} GB/s "
                     f"delivered")
        src = st.get("source_bytes_read")
        lines.append(f"          source bytes read {_mib(src) if src is not None else 'n/a'}, "
                     f"amplification {amp} (1.00 = every byte read once)")
    counts = {k: ph[k]["tasks"] for k in ("background", "frames", "reduce", "write") if k in ph}
    lines.append(f"tasks     {tasks.get('succeeded', 0)} of {tasks.get('launched', 0)} succeeded, "
                 f"{tasks.get('failed', 0)} failed: " + ", ".join(f"{v} {k}" for k, v in
                                                                   counts.items()))
    if log:
        lines.append(f"cache     background image read {log.get('background_reads')} times "
                     f"(once per worker), {log.get('background_cache_hits')} cache hits")
    lines.append("phases    (wall time)")
    for name, secs, note in phase_rows(f):
        shown = "   n/a" if secs is None else f"{secs:6.2f} s"
        lines.append(f"  {name:<20}{shown}   {note}")
    s = sc["score"]
    lines.append(f"spots     {sc['found']} found ({sc['pixels']} spot pixels) in {d['frames']} "
                 f"frames; planted {s['planted']} spot-frames, recovered {s['recovered']} "
                 f"({100 * s['recovered_fraction']:.1f}%) within {s['max_dist_px']:.0f} px; "
                 f"{s['false']} false ({100 * s['false_fraction']:.1f}%)")
    lines.append("outputs   " + f["outputs"][0])
    lines.extend("          " + p for p in f["outputs"][1:])
    return "\n".join(lines)


def write_phases(folder: str, f: Dict[str, Any]) -> None:
    """``folder/demo_phases.json`` and ``.md``: the phase table of this run."""
    os.makedirs(folder, exist_ok=True)
    rows = phase_rows(f)
    record = {"what": "phase-by-phase wall time of `make demo` (NF-HEDM, staged, mpirun)",
              "dataset": {k: f["dataset"][k] for k in ("frames", "shape", "tiff_bytes",
                                                       "planted_spots")},
              "job": {k: f["job"][k] for k in ("ranks", "emulated_nodes", "executor", "workers")},
              "stage": {k: (f["stage"] or {}).get(k) for k in
                        ("method", "bytes_per_node", "bytes_written", "seconds",
                         "delivered_gbps", "amplification")},
              "phases": [{"phase": n, "seconds": s, "note": note} for n, s, note in rows],
              "task_phases": f["phases"], "score": f["spots"]["score"],
              "cache": {k: f["frame_log"].get(k) for k in ("background_reads",
                                                           "background_cache_hits")}}
    with open(os.path.join(folder, "demo_phases.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    d = f["dataset"]
    md = ["# `make demo`: phase-by-phase timing", "",
          f"NF-HEDM reduction of {d['frames']} synthetic frames of {d['shape'][0]}x{d['shape'][1]} "
          f"uint16 ({_mib(d['tiff_bytes'])}), `mpirun -n {f['job']['ranks']} --oversubscribe`, "
          f"{f['job']['emulated_nodes']} emulated nodes, `mpi` executor "
          f"({f['job']['workers']} workers), on a shared 2-core machine. One run; "
          "generated by `python -m hedm.demo --record-phases bench/results`.", "",
          "| phase | seconds | note |", "|---|---:|---|"]
    md += [f"| {n} | {'n/a' if s is None else f'{s:.2f}'} | {note} |" for n, s, note in rows]
    md += ["", "The machine is shared with other jobs, so repeated runs differ (stage and "
           "background most); compare phases within one run.", "",
           "Reduce overlaps the per-frame tasks (no barrier between map and reduce): its row "
           "is the time from the last frame's end to the last merge's end."]
    with open(os.path.join(folder, "demo_phases.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
