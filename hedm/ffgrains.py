"""FF-HEDM stage 2: stage 1's peaks -> spots -> indexing -> one refinement task per grain ->
``Grains.csv`` (MIDAS's layout) and ``Grains.h5``.

Run it after stage 1 (``hedm/ff.py``) with the sweep's one parameter file::

    python -m workflows run hedm/ffgrains.py --executor local --workers 2 --out OUT -- \\
        --params SWEEP/ff.params --PeaksFile OUT/ff_peaks.h5
    mpirun -n 4 python -m workflows run hedm/ffgrains.py --out OUT -- --params ...

The graph (the paper's FF stage 2, whose task count depends on the data):

1. **spots** (one task): the peaks of ``PeaksFile`` merged across frames, located and
   given a ring (:mod:`hedm.ffspots`);
2. **index**: grains from the spots (:mod:`hedm.ffindex`), the seeds' fibre searches run
   as tasks (:func:`index_in_tasks`): waves of :data:`SEEDS_PER_TASK` seeds per worker,
   each wave launched once the grains of the one before have claimed their spots, the
   candidates taken in seed order -- the grains of one serial search, on any executor and
   worker count. ``main`` waits for it: only now is the number of grains, and so of
   stage 2's next tasks, known;
3. **refine**: one task per indexed grain (:func:`hedm.ffrefine.refine_grain`), placed
   by the runtime's dispatch like any task (their lengths differ with the grain);
4. **reduce**: an ordered ``reduce_tree`` of the refined grains;
5. **write** (one task): duplicates (two fits of one grain, within ``MergeAngle`` and
   ``MergeDistance``) dropped, ``Grains.csv`` of the converged grains, ``Grains.h5``
   (every grain, its spots, the shared spots, the spots), and the verdict.

Failure is a result: the run writes what it has, then exits 1 (:class:`hedm.run.ResultError`,
``ffgrains_run.json`` saying why) when fewer than half the spots lie on a ring (the
geometry does not match the frames: the message names the distance the spots suggest),
when no grain is found or none converges, or when the converged grains explain fewer than
``MinIndexedFraction`` of the spots on rings. Grains that did not converge are listed
(which, why) in ``Grains.h5`` and the run record, not in ``Grains.csv``. A spot matched by
two grains is *shared*: it is listed, counted once in the indexed fraction, and each fit
gives it less weight (soft-L1 loss).
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, List

import numpy as np

from hedm.ffparams import GRAINS_SCHEMA as SCHEMA
from hedm.ffparams import read_grains_params
from hedm.params import add_flow_arguments, check_inputs, flag_overrides, relative_to
from hedm.run import check_outputs_of, finish, stage_dict
from workflows import app, on_this_node, phase_spans, reduce_tree, this_node, worker_name

#: This flow's run record in ``OUT``; the runner adds its drain of ``--results`` to it.
RUN_RECORD = "ffgrains_run.json"
#: The result files it writes (into ``--results``, drained to ``OUT``).
OUTPUTS = ("Grains.csv", "Grains.h5")

__all__ = ["SCHEMA", "add_arguments", "main", "RUN_RECORD", "OUTPUTS", "grain_rows", "verdict"]


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "FF (stage 1 and 2)", SCHEMA)


def _sweep(peaks_path: str):
    """Peaks, first frame, frame count and frame shape of stage 1's HDF5 file."""
    import h5py

    with h5py.File(peaks_path, "r") as f:
        peaks = f["peaks"][()]
        frames = f["frames"][()]
        attrs = dict(f.attrs)
    first = int(attrs.get("RawStartNr", 0))
    n = int(attrs["frames"]) if "frames" in attrs else int(frames["frame"].max() - first + 1)
    shape = tuple(int(v) for v in attrs["frame_shape"]) if "frame_shape" in attrs else (
        int(attrs["NrPixelsZ"]), int(attrs["NrPixelsY"]))
    return peaks, first, n, shape


def _arrays(p: Dict[str, Any], n: int, shape):
    from hedm.ffparams import ff_arrays, ring_table

    arrays = ff_arrays(p, n, shape)
    rings = ring_table(p, shape)
    return arrays, rings[np.isin(rings[:, 0], np.unique(arrays.ring))]


@app
def find_spots(peaks_path: str, p: Dict[str, Any]) -> Dict[str, Any]:
    """The spot table of stage 1's peaks (:mod:`hedm.ffspots`)."""
    from hedm.ffspots import spots_from_peaks

    t0 = time.perf_counter()
    peaks, first, n, shape = _sweep(on_this_node(peaks_path))
    arrays, rings = _arrays(p, n, shape)
    spots = spots_from_peaks(peaks, first, n, p, arrays, rings)
    return {"spots": spots, "n_frames": n, "shape": shape, "first": first,
            "peaks": int(len(peaks)), "rings": rings, "seconds": time.perf_counter() - t0}


@app
def search(found: Dict[str, Any], p: Dict[str, Any], seeds: List[int]) -> List[Any]:
    """One indexing task: the best candidate of each of ``seeds`` (their fibre searches,
    :func:`hedm.ffindex.search_seeds`)."""
    from hedm.ffindex import search_seeds

    arrays, _ = _arrays(p, found["n_frames"], found["shape"])
    return search_seeds(found["spots"], arrays, p, seeds)


@app
def sense(found: Dict[str, Any], p: Dict[str, Any]) -> Dict[str, Any]:
    """The rotation-sense check (:func:`hedm.ffindex.sense_check`), beside the first wave."""
    from hedm.ffindex import sense_check

    arrays, _ = _arrays(p, found["n_frames"], found["shape"])
    return sense_check(found["spots"], arrays, p)


#: Seeds per indexing task; a wave is this many per worker.
SEEDS_PER_TASK = 2


def index_in_tasks(found: Any, p: Dict[str, Any], workers: int,
                   launched: List[Any]) -> Dict[str, Any]:
    """Grains of the spots (:func:`hedm.ffindex.index_spots`), the seeds' fibre searches run
    as tasks: waves of :data:`SEEDS_PER_TASK` seeds per worker, each wave's tasks launched
    once the previous wave's grains have claimed their spots (the next wave is the data's).
    The candidates are taken in seed order, so the grains are those of one serial search.
    ``launched`` receives every task (the run record's phase)."""
    from hedm.ffindex import index_spots

    t0 = time.perf_counter()
    f = found.result()
    arrays, _ = _arrays(p, f["n_frames"], f["shape"])
    checked = sense(found, p)
    launched.append(checked)

    def run_wave(seeds: List[int]) -> List[Any]:
        tasks = [search(found, p, seeds[i:i + SEEDS_PER_TASK])
                 for i in range(0, len(seeds), SEEDS_PER_TASK)]
        launched.extend(tasks)
        return [best for t in tasks for best in t.result()]

    res = index_spots(f["spots"], arrays, p, run_wave, SEEDS_PER_TASK * max(1, workers),
                      checked.result)
    res["seconds"] = time.perf_counter() - t0
    return res


@app
def refine(grain: Dict[str, Any], observed: Any, p: Dict[str, Any], n: int,
           shape) -> List[Dict[str, Any]]:
    """One grain's refinement (:func:`hedm.ffrefine.refine_grain`), with where and how long."""
    from hedm.ffrefine import refine_grain

    t0 = time.perf_counter()
    arrays, _ = _arrays(p, n, shape)
    out = refine_grain(grain, observed, arrays, p)
    out.update(worker=worker_name(), seconds=time.perf_counter() - t0)
    return [out]


@app
def merge_refined(a: List[Dict[str, Any]], b: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return a + b


def _dedup(grains: List[Dict[str, Any]], p: Dict[str, Any]) -> List[Dict[str, Any]]:
    from kernels.crystal import misorientation

    kept: List[Dict[str, Any]] = []
    for g in sorted(grains, key=lambda g: -g["n_matched"]):
        if any(misorientation(g["orientation"], k["orientation"]) < p["MergeAngle"]
               and np.linalg.norm(g["pos"] - k["pos"]) < p["MergeDistance"] for k in kept):
            continue
        kept.append(g)
    return sorted(kept, key=lambda g: g["order"])


def grain_rows(grains: List[Dict[str, Any]], p: Dict[str, Any]) -> np.ndarray:
    """(n, 47) rows of Grains.csv (:data:`hedm.grainscsv.COLUMNS`) of refined grains."""
    from kernels.crystal import matrix_to_euler

    rows = np.zeros((len(grains), 47))
    total = sum(g["intensity"] for g in grains) or 1.0
    vs = float(p.get("Vsample", 0.0) or 0.0)
    for i, g in enumerate(grains):
        o = g["orientation"]
        r = rows[i]
        r[0] = i + 1
        r[1:10] = o.ravel()
        r[10:13] = g["pos"]
        r[13:19] = g["lattice"]
        r[19], r[20], r[21] = g["diff_pos"], g["diff_ome"], g["diff_angle"]
        r[22] = (3 * vs * g["intensity"] / total / (4 * math.pi)) ** (1 / 3) if vs else 0.0
        r[23] = g["completeness"]
        r[24:33] = 1e6 * g["e_fab"].ravel()
        r[33:42] = 1e6 * g["e_ken"].ravel()
        r[42] = 1e6 * g["rms_strain"]
        r[43] = p["PhaseNr"]
        r[44:47] = matrix_to_euler(o)
    return rows


def _geometry_problem(spots: np.ndarray, rings: np.ndarray, p: Dict[str, Any]) -> str:
    """Why so few spots lie on a ring, with the distance their radii suggest."""
    on = int((spots["ring"] > 0).sum())
    if not len(spots) or on >= 0.5 * len(spots):
        return ""
    # the distance that puts most spots on rings (ring radii scale with Lsd), with every
    # ring up to twice the farthest spot, not only those of RhoD at this Lsd
    from hedm.ffparams import ring_table

    det = np.hypot(spots["lab_y"], spots["lab_z"])
    rings = ring_table(dict(p, RhoD=4.0 * float(det.max())), (1, 1))
    scales = np.exp(np.linspace(math.log(0.5), math.log(2.0), 2773))    # 0.05% steps
    counts = np.array([(np.abs(det[:, None] - s * rings[None, :, 2]).min(axis=1)
                        <= p["Width"]).sum() for s in scales])
    best = int(counts.max())
    guess = float(p["Lsd"]) * float(np.median(scales[counts == best]))   # the middle of them
    return (f"only {on} of {len(spots)} spots lie within Width {p['Width']:g} um of a ring of "
            f"LatticeConstant {tuple(p['LatticeConstant'])} at Lsd {p['Lsd']:g} um: the "
            "detector geometry does not match the frames. Most spots' radii fit rings at "
            f"Lsd about {guess:.0f} um ({best} spots); check Lsd, then BC, px, Wavelength, "
            "LatticeConstant, tx/ty/tz (and ImTransOpt of stage 1's frames)")


#: A ring with at least this many observed spots must be explained like the whole sweep.
MIN_RING_SPOTS = 10


def _ring_fractions(spots: np.ndarray, ids: Dict[int, int]) -> Dict[int, Dict[str, Any]]:
    """Per ring: its observed spots, how many the grains explain, and the fraction."""
    out: Dict[int, Dict[str, Any]] = {}
    for r in np.unique(spots["ring"][spots["ring"] > 0]).tolist():
        sel = spots["id"][spots["ring"] == r].tolist()
        k = sum(1 for s in sel if s in ids)
        out[int(r)] = {"spots": len(sel), "indexed": k, "fraction": round(k / len(sel), 4)}
    return out


def _sense_problem(indexed: Dict[str, Any], p: Dict[str, Any]) -> str:
    """Why the spots do not decide the rotation sense, or fit the opposite one ("" if
    they fit the parameters' sense only; :func:`hedm.ffindex.sense_check`)."""
    s = indexed.get("sense") or {}
    given, opposite, n = s.get("given", 0), s.get("opposite", 0), s.get("seeds", 0)
    ring = p["OverAllRingToIndex"]
    flipped = (f"OmegaStart {-p['OmegaStart']:g}, OmegaStep {-p['OmegaStep']:g}")
    if opposite and not given:
        return (f"the spots fit the opposite rotation sense: {opposite} of the {n} strongest "
                f"spots of ring {ring} give a grain with every omega negated ({flipped}), "
                f"none with OmegaStart {p['OmegaStart']:g}, OmegaStep {p['OmegaStep']:g}. "
                "In MIDAS's convention (docs/guide/hedm.md, 'FF conventions') frame k is at "
                "OmegaStart + k OmegaStep and lab +y lies towards smaller columns; check "
                "OmegaStart/OmegaStep against the frames, and whether the frames need a flip "
                "(ImTransOpt). Flipping OmegaStep's sign alone would index the mirror image")
    if opposite and opposite >= given:
        return (f"the data cannot decide the rotation sense: of the {n} strongest spots of "
                f"ring {ring}, {given} give a grain with OmegaStep {p['OmegaStep']:g} and "
                f"{opposite} with every omega negated ({flipped}); the result could be the "
                "sample's mirror image. More spots (a wider OmegaRange, more rings) or "
                "tighter MarginOme/MarginEta/MarginRadial decide it")
    return ""


def verdict(found: Dict[str, Any], indexed: Dict[str, Any], grains: List[Dict[str, Any]],
            failed: List[Dict[str, Any]], p: Dict[str, Any]) -> Dict[str, Any]:
    """Counts, the shared spots, and ``problem``: why the result is of no use ("" if it is)."""
    spots = found["spots"]
    on = int((spots["ring"] > 0).sum())
    ids: Dict[int, int] = {}
    for g in grains:
        for s in np.asarray(g["spot_ids"]).tolist():
            ids[s] = ids.get(s, 0) + 1
    shared = sorted(s for s, c in ids.items() if c > 1)
    frac = len(ids) / on if on else 0.0
    problem = _geometry_problem(spots, found["rings"], p) or _sense_problem(indexed, p)
    per_ring = _ring_fractions(spots, ids)
    missed = {r: f for r, f in per_ring.items() if f["spots"] >= MIN_RING_SPOTS
              and f["fraction"] < p["MinIndexedFraction"]}
    if not problem and not len(spots):
        problem = f"no spot in the {found['peaks']} peaks of the sweep: run stage 1 again"
    elif not problem and not indexed["grains"]:
        problem = (f"no grain indexed from {on} spots on rings ({indexed['seeds_tried']} seeds "
                   f"of ring {p['OverAllRingToIndex']} tried, then the uniform search): check "
                   "Completeness, MarginOme/MarginEta/MarginRadial, StepSizeOrient, "
                   "OverAllRingToIndex and the geometry")
    elif not problem and not grains:
        problem = (f"none of the {len(failed)} indexed grains converged: "
                   + "; ".join(f"seed {g['seed']}: {g['why']}" for g in failed[:5]))
    elif not problem and frac < p["MinIndexedFraction"]:
        problem = (f"the {len(grains)} grains explain {len(ids)} of {on} spots on rings "
                   f"({100 * frac:.1f}%), fewer than MinIndexedFraction "
                   f"{p['MinIndexedFraction']:g}: grains are missing (check Completeness and "
                   "the margins) or the spots are not this sample's")
    elif not problem and missed:
        r, f = min(missed.items(), key=lambda rf: rf[1]["fraction"])
        problem = (f"the {len(grains)} grains' predicted spots miss most observed spots of "
                   f"ring {r}: they explain {f['indexed']} of its {f['spots']} spots, fewer "
                   f"than MinIndexedFraction {p['MinIndexedFraction']:g} (rings "
                   + ", ".join(str(k) for k in sorted(missed)) + "): the grains do not "
                   "explain the sweep; check the geometry (Lsd, BC, tx/ty/tz, Wavelength, "
                   "OmegaStart/OmegaStep) and the margins")
    return {"spots": int(len(spots)), "spots_on_rings": on, "grains": len(grains),
            "not_converged": [{"seed": g["seed"], "why": g["why"], "n_matched": g["n_matched"]}
                              for g in failed],
            "spots_indexed": len(ids), "indexed_fraction": round(frac, 4),
            "rings": {str(r): f for r, f in per_ring.items()},
            "sense": indexed.get("sense"),
            "shared_spots": len(shared), "shared_spot_ids": shared, "problem": problem}


@app
def write_grains(refined: List[Dict[str, Any]], found: Dict[str, Any], indexed: Dict[str, Any],
                 p: Dict[str, Any], results: str) -> Dict[str, Any]:
    """Grains.csv, Grains.h5 and the verdict into this node's results directory."""
    import h5py

    from hedm.common import output_file
    from hedm.grainscsv import COLUMNS, write_grains_csv
    from kernels.ffmodel import lattice_rotation
    from core.outputs import mark

    ref = p["LatticeConstant"]
    for i, g in enumerate(refined):
        g["order"] = i
        g["orientation"] = lattice_rotation(g["u"], g["lattice"], ref)
    good = _dedup([g for g in refined if g["converged"]], p)
    failed = [g for g in refined if not g["converged"]]
    v = verdict(found, indexed, good, failed, p)
    folder = on_this_node(results)
    os.makedirs(folder, exist_ok=True)
    rows = grain_rows(good, p)
    csv_path = write_grains_csv(os.path.join(folder, "Grains.csv"), rows, p)
    h5_path = os.path.join(folder, "Grains.h5")
    pairs = np.array([(i + 1, s) for i, g in enumerate(good) for s in np.asarray(g["spot_ids"])],
                     np.int64).reshape(-1, 2)
    # in memory (HDF5's core driver: a disk file's bytes), then through output_file's fd
    with h5py.File("Grains.h5", "w", driver="core", backing_store=False) as f:
        d = f.create_dataset("grains", data=rows)
        d.attrs["columns"] = ",".join(COLUMNS)
        f.create_dataset("spots", data=found["spots"])
        f.create_dataset("grain_spots", data=pairs)
        f.create_dataset("shared_spots", data=np.array(v["shared_spot_ids"], np.int64))
        nc = f.create_group("not_converged")
        nc.create_dataset("seed", data=np.array([g["seed"] for g in failed], np.int64))
        nc.create_dataset("why", data=np.array([g["why"] for g in failed],
                                                dtype=h5py.string_dtype()))
        f.attrs.update({k: (str(val) if isinstance(val, (tuple, list)) else val)
                        for k, val in p.items() if val is not None})
        f.attrs["workflow"] = "hedm_ffgrains"
        f.attrs["problem"] = v["problem"]
        mark(f.attrs)               # ours: a later run may replace it (and Grains.csv)
        f.flush()
        image = f.id.get_file_image()
    with output_file(h5_path, binary=True) as fh:
        fh.write(image)
    return {"node": this_node(), "csv": csv_path, "h5": h5_path, **v}


def main(args):
    """Spots, indexing, then (data-dependent) one refinement task per grain; the files."""
    t_origin = time.time()
    flags = flag_overrides(args, SCHEMA)
    p = read_grains_params(on_this_node(args.params), flags)
    if flags.get("PeaksFile"):       # typed on the command line: relative to where it is typed
        peaks = os.path.abspath(os.path.expanduser(on_this_node(flags["PeaksFile"])))
    elif p["PeaksFile"]:
        peaks = relative_to(p["PeaksFile"], args.params)
    else:
        peaks = os.path.join(os.path.dirname(os.path.abspath(args.params)),
                             p["OutputFileName"] + ".h5")
    check_inputs([peaks], "PeaksFile (stage 1's <OutputFileName>.h5)")
    out = getattr(args, "out", None) or os.getcwd()
    results = args.results or out
    # before any task: the files this run writes replace no input and no file mpistage did
    # not write (without --overwrite), as hedm.ff and every analysis flow refuse
    check_outputs_of(args, out, [RUN_RECORD] + list(OUTPUTS), [args.params, peaks])
    found = find_spots(peaks, p)
    searches: List[Any] = []
    # stage 2's task graph is the data's: the seeds' search tasks come in waves, each known
    # once the grains of the one before have claimed their spots; the refinement tasks
    # once indexing has ended
    got = index_in_tasks(found, p, getattr(args, "workers", None) or 1, searches)
    f = found.result()
    tasks = [refine(g, got["observed"], p, f["n_frames"], f["shape"]) for g in got["grains"]]
    merges: List[Any] = []
    merged = reduce_tree(merge_refined, tasks, ordered=True, launched=merges) if tasks else []
    written = write_grains(merged, found, got, p, results)
    summary = written.result()
    refined = merged.result() if tasks else []
    record = {"workflow": "hedm_ffgrains", "executor": getattr(args, "executor", None),
              "workers": getattr(args, "workers", None), "params": p, "peaks": peaks,
              "stage": stage_dict(args), "result": summary,
              "index": {"method": got["method"], "seeds_tried": got["seeds_tried"],
                        "sense": got.get("sense"), "waves": got["waves"],
                        "tasks": len(searches),
                        "candidates": len(got["grains"]), "seconds": round(got["seconds"], 4),
                        "spots_on_rings": got["spots_on_rings"]},
              "refine": [{"seed": g["seed"], "worker": g["worker"],
                          "seconds": round(g["seconds"], 4), "n_matched": g["n_matched"],
                          "n_fit": g.get("n_fit", 0),
                          "converged": g["converged"], "why": g["why"]} for g in refined],
              "phases": phase_spans({"spots": [found], "index": searches, "refine": tasks,
                                     "reduce": merges, "write": [written]}, t_origin)}
    finish(os.path.join(out, RUN_RECORD), record, results)
    return written

