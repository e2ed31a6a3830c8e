"""The keys of an NF-HEDM layer's one parameter file (``docs/nf-files.md``): stage 1's
:data:`REDUCE_SCHEMA` and stage 2's :data:`FIT_SCHEMA` live here so neither stage
imports the other."""
from __future__ import annotations

from typing import Any, Dict

from hedm.params import (MIDAS_NF_KEYS, Param, ParamError, at_least, fraction, load_params,
                         one_of, positive, resolve_params)

__all__ = ["REDUCE_SCHEMA", "FIT_SCHEMA", "read_nf_params", "read_fit_params", "input_pattern",
           "image_transforms"]

#: Stage 1's keys (reduction of the frames to binary images).
REDUCE_SCHEMA = (
    Param("DataDirectory", str, ".", "folder of the frames; relative to the parameter file's "
          "folder, %n = node name"),
    Param("InputPattern", str, "", "frame file name with a %d field (TIFF series), or one "
          "GE/HDF5 file holding every frame; default OrigFileName_%06d.extOrig (MIDAS's "
          "names) if OrigFileName is set, else stem_%06d.tif"),
    Param("OrigFileName", str, "", "MIDAS's name of the frames: files OrigFileName_NNNNNN."
          "extOrig (used when InputPattern is not set)"),
    Param("extOrig", str, "tif", "MIDAS's extension of the frames (with OrigFileName)"),
    Param("ImTransOpt", int, (), "raw-frame transforms, applied in order (MIDAS's codes): "
          "0 none, 1 flip y (columns), 2 flip z (rows), 3 transpose; several per line or "
          "one per line; frames MIDAS's NF programs read need 1 and 2 (hedm/imtrans.py)",
          one_of(0, 1, 2, 3), multi=True),
    Param("RawStartNr", int, 0, "number of the first frame", at_least(0)),
    Param("NrFilesPerDistance", int, None, "number of frames (per detector distance)",
          at_least(1)),
    Param("nDistances", int, 1, "detector distances; distance d's frames are the files from "
          "RawStartNr + d * NrFilesPerDistance (MIDAS)", at_least(1)),
    Param("NrPixelsY", int, None, "frame width (detector columns)", at_least(1)),
    Param("NrPixelsZ", int, None, "frame height (detector rows)", at_least(1)),
    Param("BlanketSubtraction", int, 0, "counts subtracted after the background",
          lambda v: None if 0 <= v <= 65535 else "must be in 0..65535"),
    Param("MedFiltRadius", int, 1, "median filter radius: 1 (3x3) or 2 (5x5)", one_of(1, 2)),
    Param("GaussFiltRadius", float, 1.0, "LoG Gaussian sigma (px)", positive),
    Param("LoGMaskRadius", int, 4, "LoG kernel half-width (px)", at_least(1)),
    Param("BackgroundTasks", int, 0, "tasks computing the median background (row bands); "
          "0: one per worker", at_least(0)),
    Param("ReducedFileName", str, "nf_spots", "base name of the result files (.h5, .png, "
          "_binary.npy)"),
)

#: Stage 2's keys (orientation fitting over the grid, the map).
FIT_SCHEMA = (
    Param("ReducedFileName", str, "nf_spots", "stage 1's base name: the binary images are "
          "<ReducedFileName>_binary.npy"),
    Param("ReducedDirectory", str, ".", "folder of the binary images; relative to the "
          "parameter file's folder, %n = node name"),
    Param("GridFileName", str, "grid.txt", "grid file (MIDAS's grid.txt: count, then "
          "'y1 y2 xs ys gs' rows); relative to the parameter file's folder"),
    Param("SeedOrientations", str, None, "seed orientations, one quaternion 'w,x,y,z' per "
          "line (MIDAS's layout); relative to the parameter file's folder"),
    Param("NrOrientations", int, 0, "number of seed orientations in the file (0: not checked)",
          at_least(0)),
    Param("MicFileText", str, "nf_map.mic", "file name of the text map; the HDF5 and PNG "
          "maps get its stem"),
    Param("GBAngle", float, 5.0, "misorientation (deg) up to which edge neighbours are one "
          "grain", lambda v: None if 0 < v < 63 else "must be in (0, 63) degrees"),
    Param("PhaseNr", int, 1, "phase number written in the .mic", at_least(0)),
    Param("NumPhases", int, 1, "number of phases written in the .mic header", at_least(1)),
    Param("GlobalPosition", float, 0.0, "layer position written in the .mic header (um)"),
    Param("GridPointsPerTask", int, 0, "grid rows per fitting task; 0: about 8 tasks per "
          "worker, 16 to 512 rows each", at_least(0)),
    # Fit controls (kernels.nffit.FitOptions; MIDAS has no keys for them: FitOrientationOMP
    # refines every candidate with at most 5000 evaluations and no restart).
    Param("NrCandidatesRefined", int, 8, "most distinct candidate seeds refined per grid "
          "point (FitOptions.n_refine)", at_least(1)),
    Param("MaxEvaluations", int, 1500, "confidence evaluations per refined candidate "
          "(FitOptions.max_evals; MIDAS: 5000)", at_least(10)),
    Param("NrRestarts", int, 4, "Nelder-Mead restarts from the best point, each with half "
          "the simplex (FitOptions.restarts)", at_least(0)),
    Param("MinMappedFraction", float, 0.1, "fraction of the grid points that must be fitted "
          "(confidence >= MinFracAccept); fewer fails the run with a diagnosis; 0: no check",
          fraction),
)


def read_nf_params(path: str, flags: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """Parameters from the file ``path`` and flag overrides, checked together (stage 2's
    and MIDAS's keys are left to their readers)."""
    foreign = MIDAS_NF_KEYS | {q.key for q in FIT_SCHEMA}
    values = resolve_params(REDUCE_SCHEMA, load_params(path, REDUCE_SCHEMA, foreign),
                            flags or {}, path)
    if "/" in values["ReducedFileName"] or not values["ReducedFileName"]:
        raise ParamError(f"{path}: ReducedFileName must be a plain file name, "
                         f"got {values['ReducedFileName']!r}")
    values["InputPattern"] = input_pattern(values, path)
    return values


def input_pattern(values: Dict[str, Any], path: str = "<params>") -> str:
    """The frames' file name: ``InputPattern``, else MIDAS's ``OrigFileName_%06d.extOrig``
    (``ProcessImagesCombined``'s names), else ``stem_%06d.tif``. Both given and different
    is a ParamError (which one would be read is not for us to guess)."""
    given = values.get("InputPattern") or ""
    orig = values.get("OrigFileName") or ""
    if orig:
        midas = f"{orig}_%06d.{values.get('extOrig') or 'tif'}"
        if given and given != midas:
            raise ParamError(f"{path}: InputPattern {given} and OrigFileName/extOrig "
                             f"({midas}) name different frames; keep one")
        return midas
    return given or "stem_%06d.tif"


def image_transforms(path: str) -> tuple:
    """The ``ImTransOpt`` codes of the layer's parameter file (stage 2 reports them when
    the fit places nothing); () if the file does not set them."""
    param = next(q for q in REDUCE_SCHEMA if q.key == "ImTransOpt")
    foreign = (MIDAS_NF_KEYS | {q.key for q in REDUCE_SCHEMA} | {q.key for q in FIT_SCHEMA}) \
        - {"ImTransOpt"}
    return tuple(load_params(path, (param,), foreign).get("ImTransOpt", ()))


def read_fit_params(path: str, flags: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """Stage 2's parameters from the layer's file ``path`` and flag overrides."""
    foreign = MIDAS_NF_KEYS | {q.key for q in REDUCE_SCHEMA}
    values = resolve_params(FIT_SCHEMA, load_params(path, FIT_SCHEMA, foreign), flags or {}, path)
    for key in ("ReducedFileName", "MicFileText"):
        if "/" in values[key] or not values[key]:
            raise ParamError(f"{path}: {key} must be a plain file name, got {values[key]!r}")
    return values
