"""NF-HEDM stage 2: orientation fitting of every grid point on the staged binary images -> map.

Staged and run in one MPI job as ``docs/guide/hedm.md`` shows. The hook stages exactly
what stage 2 reads (``docs/nf-files.md``): the binary images, the parameter file, the
grid and the seeds. 1. **fit**: one task per ``GridPointsPerTask`` grid rows memory-maps
its node's images (the map, geometry, grid and seeds' spots kept per worker,
:func:`hedm.common.cached`) and fits each row with :func:`kernels.nffit.fit_points`; 2.
**reduce**: an ordered ``reduce_tree`` in grid order; 3. **write**: grains and the map
(:mod:`hedm.micmap`) to the node-local results; 4. **drain** to ``OUT`` (checked before
any task: :mod:`core.outputs`). A point's fit depends on that point alone, so the map is
bit for bit the same however it is split.

The geometry and tolerances are :meth:`kernels.NFGeometry.from_params`'s, the fit
controls :data:`SCHEMA`'s (:func:`fit_options`); paths are relative to the
parameter file's folder (``--ReducedDirectory`` for an unstaged run). A map that
places under ``MinMappedFraction`` of the points fails the run after writing,
naming the likely causes, ``ImTransOpt`` first (:func:`placement`).
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, List, Tuple

import numpy as np

from hedm.common import as_records, cached, merge_tables, output_file
from hedm.nfparams import FIT_SCHEMA as SCHEMA
from hedm.nfparams import read_fit_params
from hedm.params import BINARY_SUFFIX, ParamError, add_flow_arguments, flag_overrides, relative_to
from hedm.run import ResultError, check_outputs_of, stage_dict, write_json
from workflows import app, on_this_node, phase_spans, reduce_tree, this_node, worker_name

#: This flow's run record in ``OUT``; the runner adds its drain of ``--results`` to it.
RUN_RECORD = "nffit_run.json"

__all__ = ["SCHEMA", "TASK_DTYPE", "add_arguments", "main", "RUN_RECORD", "read_fit_params",
           "read_seeds", "write_seeds", "input_paths", "fit_block", "blocks", "fit_options",
           "placement"]

#: One row per fitting task (for the run record): rows, worker, times, cache hits.
TASK_DTYPE = np.dtype([("start", np.int64), ("stop", np.int64), ("worker", "U24"),
                       ("read_s", np.float64), ("fit_s", np.float64),
                       ("cached_inputs", np.int8), ("evals", np.int64)])


def add_arguments(parser) -> None:
    add_flow_arguments(parser, "NF (stage 1 and 2)", SCHEMA)


# -- seed files ---------------------------------------------------------------------------
def write_seeds(path: str, orientations: np.ndarray) -> str:
    """Write orientations as MIDAS's ``SeedOrientations`` file (``w,x,y,z`` per line)."""
    from kernels.crystal import matrix_to_quaternion

    q = matrix_to_quaternion(np.asarray(orientations, dtype=np.float64).reshape(-1, 3, 3))
    with output_file(path) as fh:
        for row in q:
            fh.write(",".join(f"{v:.17g}" for v in row) + "\n")
    return path


def read_seeds(path: str, expected: int = 0) -> np.ndarray:
    """(k, 3, 3) orientations from a ``SeedOrientations`` file (MIDAS: ``%lf,%lf,%lf,%lf``
    per line; blank separators are accepted too). ``expected`` > 0 checks the count
    (MIDAS's ``NrOrientations``)."""
    from kernels.crystal import quaternion_to_matrix

    rows = []
    try:
        with open(path) as fh:
            for lineno, line in enumerate(fh, 1):
                text = line.split("#", 1)[0].replace(",", " ").split()
                if not text:
                    continue
                try:
                    q = [float(v) for v in text[:4]]
                except ValueError:
                    q = []
                if len(q) != 4 or not all(math.isfinite(v) for v in q) or not any(q):
                    raise ParamError(f"{path}:{lineno}: expected a quaternion 'w,x,y,z', got "
                                     f"{line.strip()!r}")
                rows.append(q)
    except OSError as exc:
        raise ParamError(f"{path}: cannot read the seed orientations: {exc.strerror}; "
                         "check SeedOrientations (or stage it)") from exc
    if not rows:
        raise ParamError(f"{path}: no seed orientations")
    if expected and len(rows) != expected:
        raise ParamError(f"{path}: {len(rows)} seed orientations, NrOrientations says "
                         f"{expected}")
    return np.ascontiguousarray(quaternion_to_matrix(np.array(rows)))


# -- tasks ----------------------------------------------------------------------------------
def input_paths(params_path: str, p: Dict[str, Any]) -> Dict[str, str]:
    """Images, grid and seeds paths of a parameter set (``%n`` kept: tasks resolve it)."""
    return {"params": params_path,
            "images": os.path.join(relative_to(p["ReducedDirectory"], params_path),
                                   p["ReducedFileName"] + BINARY_SUFFIX),
            "grid": relative_to(p["GridFileName"], params_path),
            "seeds": relative_to(p["SeedOrientations"], params_path)}


def _inputs(paths: Dict[str, str], n_orientations: int) -> Tuple[Any, Any, Any, Any, int]:
    """This worker's geometry, memory-mapped images, grid and seed spots (cached per
    worker), and how many of the four came from the cache."""
    from kernels import NFGeometry, read_grid, seed_spots

    local = {k: on_this_node(v) for k, v in paths.items()}
    geometry, h1 = cached(local["params"], NFGeometry.from_params, kind="nf-geometry")
    images, h2 = cached(local["images"], lambda p: np.load(p, mmap_mode="r"), kind="nf-images")
    grid, h3 = cached(local["grid"], read_grid, kind="nf-grid")
    # The seeds' spots depend on the geometry too: key them by both files.
    st = os.stat(local["params"])
    spots, h4 = cached(local["seeds"],
                       lambda p: seed_spots(read_seeds(p, n_orientations), geometry),
                       kind=f"nf-seed-spots:{os.path.realpath(local['params'])}:"
                            f"{st.st_mtime_ns}:{st.st_size}")
    return geometry, images, grid, spots, int(h1) + int(h2) + int(h3) + int(h4)


def fit_options(p: Dict[str, Any]):
    """The :class:`kernels.nffit.FitOptions` of a stage-2 parameter set (its fit controls)."""
    from kernels.nffit import FitOptions

    return FitOptions(n_refine=p["NrCandidatesRefined"], max_evals=p["MaxEvaluations"],
                      restarts=p["NrRestarts"])


@app
def fit_block(start: int, stop: int, paths: Dict[str, str],
              n_orientations: int = 0, options: Any = None) -> Dict[str, Any]:
    """Fit grid rows ``start:stop`` on this node's staged images; FIT rows + a task row."""
    from kernels import fit_points
    from kernels.nffit import FitOptions

    t0 = time.perf_counter()
    geometry, images, grid, spots, hits = _inputs(paths, n_orientations)
    t1 = time.perf_counter()
    fit = fit_points(grid[start:stop], geometry, images, spots, options or FitOptions())
    t2 = time.perf_counter()
    task = as_records([(start, stop, worker_name(), round(t1 - t0, 6), round(t2 - t1, 6),
                        hits, int(fit["n_evals"].sum()))], TASK_DTYPE)
    return {"fit": fit, "tasks": task}


@app
def merge_fits(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Concatenate two blocks (ordered: grid rows stay in order)."""
    return merge_tables(a, b)


@app
def write_map(table: Dict[str, Any], paths: Dict[str, str], p: Dict[str, Any],
              results: str) -> Dict[str, Any]:
    """Grains by flood fill, then the .mic, .h5 and .png of the map into this node's results."""
    from kernels import read_grid

    from hedm.micmap import (grain_ids, map_summary, neighbour_pairs, plot_map, stem_paths,
                             write_map_h5, write_mic)

    fit = table["fit"]
    grid = read_grid(on_this_node(paths["grid"]))
    seeds = read_seeds(on_this_node(paths["seeds"]), p["NrOrientations"])
    out_dir = on_this_node(results)
    os.makedirs(out_dir, exist_ok=True)
    pairs = neighbour_pairs(grid[:, 2:4])
    grains, _ = grain_ids(fit["u"], fit["confidence"], pairs, p["GBAngle"])
    files = stem_paths(out_dir, p["MicFileText"])
    summary = map_summary(fit, grains)
    write_mic(files["mic"], fit, float(grid[0, 4]) if len(grid) else 0.0, p["PhaseNr"],
              p["NumPhases"], p["GlobalPosition"])
    write_map_h5(files["h5"], fit, grid, grains, seeds, p,
                 {"workflow": "hedm_nffit", "n_grains": summary["grains"],
                  "gb_angle_deg": p["GBAngle"]})
    plot_map(files["png"], fit, grid, grains)
    return {"node": this_node(), **files, **summary}


# -- the graph ------------------------------------------------------------------------------
def blocks(n_rows: int, per_task: int, workers: int) -> List[Tuple[int, int]]:
    """``(start, stop)`` row blocks: ``per_task`` rows each, or (0) about 8 per worker."""
    if per_task <= 0:
        per_task = min(512, max(16, -(-n_rows // (8 * max(1, workers)))))
    return [(a, min(a + per_task, n_rows)) for a in range(0, n_rows, per_task)]


def _check_inputs(paths: Dict[str, str], p: Dict[str, Any]):
    """Read and check the inputs on this node before any task runs; returns the grid's row
    count, the geometry and the seed count. Errors say which file and what to do."""
    from kernels import KernelArgumentError, NFGeometry, read_grid

    local = {k: on_this_node(v) for k, v in paths.items()}
    try:
        geometry = NFGeometry.from_params(local["params"])
        geometry.require("orient_tol", "min_frac_accept", what="orientation fitting")
        grid = read_grid(local["grid"])
    except (KernelArgumentError, OSError) as exc:
        raise ParamError(f"{exc}") from exc
    if not os.path.isfile(local["images"]):
        raise ParamError(f"binary images {local['images']} do not exist: run stage 1 "
                         "(hedm/nf.py) with this parameter file, stage its output "
                         "(hedm/hooks/nffit.hook), or set --ReducedDirectory")
    images = np.load(local["images"], mmap_mode="r")
    want = (geometry.n_distances, geometry.n_frames, geometry.n_pixels_z,
            (geometry.n_pixels_y + 7) // 8)
    if images.dtype != np.uint8 or images.shape != want:
        raise ParamError(f"{local['images']}: binary images of shape {images.shape} "
                         f"({images.dtype}), but {local['params']} describes {want} (nDistances, "
                         "frames, NrPixelsZ, ceil(NrPixelsY / 8)) uint8: were they reduced with "
                         "this parameter file?")
    empty = [d for d in range(images.shape[0]) if not images[d].any()]
    if empty:
        raise ParamError(f"{local['images']}: no spot pixel at distance(s) "
                         f"{', '.join(map(str, empty))}: nothing can be fitted; rerun stage 1 "
                         "(hedm/nf.py), which says why a distance has no spots")
    seeds = read_seeds(local["seeds"], p["NrOrientations"])
    try:
        fit_options(p).resolve(geometry)
    except KernelArgumentError as exc:
        raise ParamError(f"{local['params']}: {exc}") from exc
    return len(grid), geometry, len(seeds)


def placement(fit: np.ndarray, geometry, p: Dict[str, Any], params_path: str,
              seeds_path: str, n_seeds: int) -> Dict[str, Any]:
    """How much of the grid the fit placed, and (``"diagnosis"``) why so little, if it is
    below ``MinMappedFraction``: the likely causes, most common first."""
    from hedm.imtrans import describe
    from hedm.nfparams import image_transforms

    n = len(fit)
    placed = int(np.count_nonzero((fit["confidence"] > 0)
                                  & (fit["confidence"] >= geometry.min_frac_accept)))
    need = p["MinMappedFraction"] * n
    out: Dict[str, Any] = {"points": n, "placed": placed,
                           "placed_fraction": round(placed / n, 4) if n else None,
                           "min_mapped_fraction": p["MinMappedFraction"], "diagnosis": None}
    if n == 0 or placed >= need or p["MinMappedFraction"] == 0:
        return out
    try:
        transforms = describe(image_transforms(params_path))
    except ParamError:
        transforms = "the ImTransOpt of the parameter file"
    best = float(fit["confidence"].max())
    with_candidates = int(np.count_nonzero(fit["n_candidates"] > 0))
    out["diagnosis"] = (
        f"only {placed} of {n} grid points ({100.0 * placed / n:.1f}%) were fitted with "
        f"confidence >= MinFracAccept {geometry.min_frac_accept:g} (best {best:.3f}; "
        f"{with_candidates} points had any candidate seed), fewer than MinMappedFraction "
        f"{p['MinMappedFraction']:g} of the grid: this map is not a reconstruction. Likely "
        "causes, most common first: (1) raw-frame orientation: the parameter file sets "
        f"{transforms}; frames oriented as MIDAS's NF programs read them (flipped in y and z) "
        "need 'ImTransOpt 1' and 'ImTransOpt 2', frames in the model's orientation none "
        "(docs/nf-files.md); fix it and run stage 1 again; (2) geometry: Lsd, BC, px, "
        "tx/ty/tz, Wedge, Wavelength, LatticeParameter, OmegaStart/OmegaStep/OmegaRange, "
        "BoxSize do not match the experiment; (3) seeds: the "
        f"{n_seeds} orientations of {seeds_path} (SeedOrientations) may hold none within "
        f"OrientTol {geometry.orient_tol:g} deg of the grains; (4) the grid (GridFileName) "
        "lies mostly outside the illuminated sample. If the grid really is mostly empty, "
        "lower MinMappedFraction")
    return out


def main(args):
    """Build and run the fitting graph; return the write task's future (already done)."""
    t_origin = time.time()
    p = read_fit_params(on_this_node(args.params), flag_overrides(args, SCHEMA))
    paths = input_paths(args.params, p)
    n_rows, geometry, n_seeds = _check_inputs(paths, p)
    out = getattr(args, "out", None) or os.getcwd()
    results = args.results or out
    # before any task: the map and the run record replace no file mpistage did not write
    # (without --overwrite), as every flow's outputs (core.outputs)
    from hedm.micmap import stem_paths

    check_outputs_of(args, out, [RUN_RECORD] + [os.path.basename(f) for f in
                                                stem_paths(out, p["MicFileText"]).values()],
                     list(paths.values()))
    workers = getattr(args, "workers", None) or 1

    options = fit_options(p)
    fits = [fit_block(a, b, paths, p["NrOrientations"], options)
            for a, b in blocks(n_rows, p["GridPointsPerTask"], workers)]
    merges: List[Any] = []
    merged = reduce_tree(merge_fits, fits, ordered=True, launched=merges)
    written = write_map(merged, paths, p, results)
    summary = written.result()  # wait here so the phase times below are complete
    table = merged.result()
    tasks = table["tasks"]
    verdict = placement(table["fit"], geometry, p, on_this_node(paths["params"]),
                        on_this_node(paths["seeds"]), n_seeds)
    phases = phase_spans({"fit": fits, "reduce": merges, "write": [written]}, t_origin)
    busy = float(tasks["fit_s"].sum())
    record = {
        "workflow": "hedm_nffit", "executor": getattr(args, "executor", None),
        "ranks": getattr(args, "ranks", None), "workers": workers,
        "params": p, "inputs": paths, "result": summary, "placement": verdict,
        "stage": stage_dict(args),
        "geometry": {"distances": geometry.n_distances, "frames": geometry.n_frames,
                     "pixels": [geometry.n_pixels_z, geometry.n_pixels_y],
                     "hkls": int(len(geometry.hkls.ring)), "seeds": n_seeds},
        "phases": phases,
        "fit_log": {"tasks": int(len(tasks)), "points": n_rows,
                    "read_s": round(float(tasks["read_s"].sum()), 6),
                    "fit_s": round(busy, 6),
                    "points_per_busy_s": round(n_rows / busy, 3) if busy else None,
                    "evals": int(tasks["evals"].sum()),
                    "input_loads": int((4 - tasks["cached_inputs"]).sum()),
                    "workers": sorted(set(tasks["worker"].tolist())),
                    "per_task": [dict(zip(TASK_DTYPE.names, row)) for row in tasks.tolist()]},
    }
    write_json(os.path.join(out, RUN_RECORD), record)
    if verdict["diagnosis"]:
        raise ResultError(f"{verdict['diagnosis']}. The map was written to {results} for "
                          "inspection")
    return written

