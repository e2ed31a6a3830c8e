"""Synthetic NF/FF-HEDM datasets on disk (frames + parameter file + ground truth), and scoring.

Frames of :mod:`kernels.synth` (planted spots) are written in the instruments'
layouts (NF: a TIFF series ``stem_%06d.tif``; FF: one GE file and its dark) beside
the parameter file and ``truth.npy``/``model.json`` for :func:`score`. As a
command (the HEDM guide's stand-in inputs)::

    python -m hedm.synth nf-layer DIR [--frames N --rsample UM --grains G]  # the demo's layer
    python -m hedm.synth ff DIR [--frames N --size PX --hdf5]               # an FF sweep
    python -m hedm.synth nf DIR [--frames N --size PX]                      # NF frames, spots only
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

__all__ = ["make_nf_dataset", "make_ff_dataset", "load_truth", "score", "NF_DEFAULTS",
           "FF_DEFAULTS"]

#: Parameters written for a synthetic NF dataset (the kernels' tested settings).
NF_DEFAULTS = {"InputPattern": "stem_%06d.tif", "RawStartNr": 0, "BlanketSubtraction": 30,
               "MedFiltRadius": 1, "GaussFiltRadius": 1.0, "LoGMaskRadius": 4,
               "BackgroundTasks": 0, "ReducedFileName": "nf_spots"}
#: Parameters written for a synthetic FF dataset.
FF_DEFAULTS = {"InputPattern": "ff_000001.ge3", "Dark": "dark_000001.ge3", "RawStartNr": 0,
               "Threshold": 60.0, "MinNrPx": 3, "MaxNrPx": 400, "OutputFileName": "ff_peaks"}


def _write_params(path: str, schema, values: Mapping[str, Any]) -> str:
    from hedm.common import output_file
    from hedm.params import format_params

    with output_file(path) as fh:
        fh.write("# synthetic dataset written by hedm.synth\n")
        fh.write(format_params(values, schema))
    return path


def _write_truth(folder: str, model, kind: str) -> None:
    from kernels.synth import plant_spots

    np.save(os.path.join(folder, "truth.npy"), plant_spots(model))
    with open(os.path.join(folder, "model.json"), "w") as fh:
        json.dump({"kind": kind, **asdict(model)}, fh, indent=1)


def make_nf_dataset(folder: str, model, params: Optional[Mapping[str, Any]] = None,
                    param_file: str = "nf.params") -> str:
    """Write an NF dataset of ``model`` (:class:`kernels.synth.DetectorModel`) into
    ``folder``; ``params`` override :data:`NF_DEFAULTS`. Returns the parameter file."""
    from kernels.synth import frames
    from kernels import write_tiff_series

    from hedm.nf import SCHEMA

    os.makedirs(folder, exist_ok=True)
    values: Dict[str, Any] = dict(NF_DEFAULTS, **(params or {}))
    values.update(NrFilesPerDistance=model.n_frames, NrPixelsY=model.shape[1],
                  NrPixelsZ=model.shape[0])
    write_tiff_series(os.path.join(folder, values["InputPattern"]), frames(model),
                      first=values["RawStartNr"])
    _write_truth(folder, model, "nf")
    return _write_params(os.path.join(folder, param_file), SCHEMA, values)


def make_ff_dataset(folder: str, model, params: Optional[Mapping[str, Any]] = None,
                    n_dark: int = 4, param_file: str = "ff.params") -> str:
    """Write an FF dataset (frames in one GE file, ``n_dark`` dark frames in another)."""
    from kernels.synth import background_pattern, frames, render_dark
    from kernels import write_ge

    from hedm.common import is_series
    from hedm.ff import SCHEMA

    os.makedirs(folder, exist_ok=True)
    values: Dict[str, Any] = dict(FF_DEFAULTS, **(params or {}))
    values.update(NrPixelsY=model.shape[1], NrPixelsZ=model.shape[0])
    # MIDAS's NrFilesPerSweep counts files: one per frame of a series, one GE file else
    series = is_series(values["InputPattern"])
    values.update(NrFilesPerSweep=model.n_frames if series else 1,
                  NrFrames=0 if series else model.n_frames)
    if series:  # one TIFF per frame (what a scatter block spreads)
        from kernels import write_tiff_series
        write_tiff_series(os.path.join(folder, values["InputPattern"]), frames(model),
                          first=values["RawStartNr"])
    else:
        write_ge(os.path.join(folder, values["InputPattern"]), frames(model))
    pattern = background_pattern(model)
    write_ge(os.path.join(folder, values["Dark"]),
             (render_dark(model, i, pattern) for i in range(n_dark)))
    _write_truth(folder, model, "ff")
    return _write_params(os.path.join(folder, param_file), SCHEMA, values)


def load_truth(folder: str) -> np.ndarray:
    """The planted spots of a dataset written here (:data:`kernels.synth.TRUTH_DTYPE`)."""
    return np.load(os.path.join(folder, "truth.npy"))


def score(truth: np.ndarray, found: np.ndarray, first: int = 0, max_dist: float = 2.0,
          min_snr: float = 0.0) -> Dict[str, Any]:
    """Match found spot centres (``frame`` and ``z``/``y`` or ``row``/``col``) to the planted
    ``truth`` frame by frame: within ``max_dist`` px, planted spots of at least
    ``min_snr``, found frames offset by ``first``. Returns planted, recovered,
    recovered_fraction, found, false, false_fraction.
    """
    from kernels.synth import frame_truth, match_points

    rows, cols = ("z", "y") if "z" in (found.dtype.names or ()) else ("row", "col")
    n_frames = int(np.max(truth["first_frame"] + truth["n_frames"])) if len(truth) else 0
    planted = recovered = n_found = false = 0
    for i in range(n_frames):
        ft = frame_truth(truth, i)
        mine = found[found["frame"] == first + i]
        tm, fm = match_points(np.c_[mine[rows], mine[cols]], np.c_[ft["row"], ft["col"]], max_dist)
        strong = ft["snr"] >= min_snr
        planted += int(strong.sum())
        recovered += int((tm & strong).sum())
        n_found += len(mine)
        false += int((~fm).sum())
    return {"planted": planted, "recovered": recovered,
            "recovered_fraction": recovered / planted if planted else 1.0,
            "found": n_found, "false": false,
            "false_fraction": false / n_found if n_found else 0.0,
            "max_dist_px": max_dist, "min_snr": min_snr}


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m hedm.synth {nf-layer,nf,ff} DIR``: write a synthetic dataset into DIR."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m hedm.synth",
        description="Write a synthetic HEDM dataset (frames, parameter file, ground truth).")
    sub = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    layer = sub.add_parser(
        "nf-layer", help="an NF layer as `make demo` makes it (hedm.nfsynth): raw TIFF frames "
                         "of 2 distances, nf.params, grid.txt, seeds.txt, the truth")
    layer.add_argument("folder", metavar="DIR")
    layer.add_argument("--frames", type=int, default=360, help="frames per distance (360)")
    layer.add_argument("--rsample", type=float, default=50.0, help="sample radius, um (50)")
    layer.add_argument("--grains", type=int, default=15, help="grains (15)")
    layer.add_argument("--seed", type=int, default=1, help="microstructure seed (1)")
    for kind, what in (("nf", "an NF TIFF series with planted spots and nf.params"),
                       ("ff", "an FF sweep (one GE file, a GE dark) and ff.params")):
        q = sub.add_parser(kind, help=what)
        q.add_argument("folder", metavar="DIR")
        q.add_argument("--frames", type=int, default=20, help="frames (20)")
        q.add_argument("--size", type=int, default=256, help="frame rows and columns (256)")
        q.add_argument("--spots", type=int, default=40, help="planted spots (40)")
        q.add_argument("--seed", type=int, default=0, help="noise and spot seed (0)")
        q.add_argument("--hdf5", action="store_true",
                       help="also write frames.h5:/frames, the same frames for "
                            "`python -m streams.simulate --hdf5` (a detector stand-in)")
    args = p.parse_args(argv)
    if os.path.isdir(args.folder) and os.listdir(args.folder) and not (
            args.kind == "nf-layer" and os.path.exists(os.path.join(args.folder, "layer.json"))):
        p.error(f"{args.folder} is not empty: give a new folder (nothing was written)")
    if args.kind == "nf-layer":
        from hedm.nfsynth import make_layer

        made = make_layer(args.folder, frames=args.frames, rsample=args.rsample,
                          grains=args.grains, seed=args.seed)
        print(f"{args.folder}: NF layer ({args.grains} grains, {args.rsample:g} um, 2 x "
              f"{args.frames} frames){' reused' if made.get('reused') else ''}")
        return 0
    from kernels.synth import DetectorModel

    try:
        model = DetectorModel(shape=(args.size, args.size), n_frames=args.frames,
                              n_spots=args.spots, seed=args.seed)
    except ValueError as exc:
        p.error(str(exc))
    make = make_nf_dataset if args.kind == "nf" else make_ff_dataset
    params = make(args.folder, model)
    if args.hdf5:
        import h5py

        from kernels.synth import frames

        with h5py.File(os.path.join(args.folder, "frames.h5"), "w") as f:
            f.create_dataset("frames", data=np.stack(list(frames(model))).astype("<u2"))
    print(f"{params}: {args.kind.upper()} dataset, {args.frames} frames of {args.size} x "
          f"{args.size} px, {args.spots} spots (truth in truth.npy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
