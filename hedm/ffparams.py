"""The keys of FF-HEDM stage 2 (spots, indexing, refinement) and the geometry they give.

A sweep has one parameter file (:mod:`hedm.params`), read by stage 1 (:mod:`hedm.ffpeaks`,
the peak search) and stage 2 (:mod:`hedm.ffgrains`); each stage checks its own keys and
accepts the other stage's and every key of MIDAS's FF programs
(:data:`hedm.params.MIDAS_FF_KEYS`), so a MIDAS FF parameter file runs as it is.

Keys are MIDAS's where MIDAS has them, with MIDAS's units (``manuals/FF_Parameters_Reference.md``):
lengths in um (``Lsd``, ``px``, ``Rsample``, ``Hbeam``, ``MarginEta`` -- an arc length on the
detector --, ``MarginRadial``, ``Width``, ``StepSizePos``), angles in degrees, the beam centre
``BC y z`` in pixels. MIDAS's aliases are accepted as its own parsers read them
(:data:`ALIASES`, each with the MIDAS source that reads it: ``OmegaFirstFile`` for
``OmegaStart``, ``Distance`` for ``Lsd``, ...); giving a key and its alias with different
values is an error. Keys of ours (MIDAS has none): ``PeaksFile``,
``MergePixels``, ``MergeAngle``, ``MergeDistance``, ``MinIndexedFraction``, ``MaxRefineRMS``.
"""
from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

from hedm.params import (MIDAS_FF_KEYS, Param, ParamError, at_least, fraction, load_params,
                         positive, resolve_params)

__all__ = ["PEAKS_SCHEMA", "GRAINS_SCHEMA", "ALIASES", "fold_aliases", "without_aliases",
           "read_grains_params", "grains_params", "ff_arrays", "ring_table"]

#: MIDAS's aliases of FF keys: alias -> (the key(s) it sets, the MIDAS source reading it;
#: marinerhemant/MIDAS at 0e6e0e54). ``NrPixels`` sets both sizes, as MIDAS's does.
ALIASES = {
    "OmegaFirstFile": (("OmegaStart",), "utils/ffGenerateZipRefactor.py:311, "
                       "FF_HEDM/src/IntegratorZarrOMP.c:458"),
    "Distance": (("Lsd",), "FF_HEDM/src/MIDAS_ParamParser.c:135"),
    "LatticeParameter": (("LatticeConstant",), "FF_HEDM/src/MIDAS_ParamParser.c:176"),
    "ExcludePoleAngle": (("MinEta",), "FF_HEDM/src/MIDAS_ParamParser.c:430"),
    "MaxRingRad": (("RhoD",), "FF_HEDM/src/MIDAS_ParamParser.c:265"),
    "StepsizeOrient": (("StepSizeOrient",), "FF_HEDM/src/MIDAS_ParamParser.c:450"),
    "StepsizePos": (("StepSizePos",), "FF_HEDM/src/IndexerOMP.c:1385"),
    "MinMatchesToAcceptFrac": (("Completeness",), "utils/ffGenerateZipRefactor.py:225"),
    "OverallRingToIndex": (("OverAllRingToIndex",), "utils/ffGenerateZipRefactor.py:226"),
    "MarginOmega": (("MarginOme",), "manuals/FF_Parameters_Reference.md:292"),
    "NrPixels": (("NrPixelsY", "NrPixelsZ"), "FF_HEDM/src/MIDAS_ParamParser.c:126-129"),
}


def _alias_params(schema, keys):
    """A typed :class:`Param` per alias of ``keys`` whose key is in ``schema`` (parsed as the
    key is; folded into it by :func:`fold_aliases`)."""
    by_key = {q.key: q for q in schema}
    return tuple(Param(a, by_key[k[0]].type, by_key[k[0]].default,
                       f"MIDAS's alias of {' and '.join(k)} ({src})", by_key[k[0]].check,
                       by_key[k[0]].multi)
                 for a, (k, src) in ALIASES.items() if a in keys and k[0] in by_key)


def without_aliases(schema):
    """``schema``'s keys without MIDAS's aliases (what :func:`resolve_params` resolves after
    :func:`fold_aliases`)."""
    return tuple(q for q in schema if q.key not in ALIASES)


def fold_aliases(values: Dict[str, Any], path: str) -> Dict[str, Any]:
    """``values`` (one source: a file's keys, or the flags) with each alias's value given to
    its key(s); an alias and its key both set, to different values, is a ParamError."""
    out = dict(values)
    for alias, (keys, _src) in ALIASES.items():
        if alias not in out:
            continue
        v = out.pop(alias)
        for key in keys:
            if key in out and out[key] != v:
                raise ParamError(f"{path}: {key} and its alias {alias} are both set and "
                                 "differ; keep one")
            out[key] = v
    return out


#: Stage 1's keys (peaks per frame, :mod:`hedm.ffpeaks`): kept beside stage 2's, so each
#: stage reads the one file knowing the other's keys without importing it.
_PEAKS_KEYS = (
    Param("DataDirectory", str, ".", "folder of frames and dark; relative to the parameter "
          "file's folder, %n = node name"),
    Param("InputPattern", str, "ff_000001.ge3", "one GE/HDF5 file holding every frame, or a "
          "TIFF series name with a %d field"),
    Param("Dark", str, None, "dark file (GE/HDF5, or one TIFF); the mean of its frames is used"),
    Param("RawStartNr", int, 0, "first frame (index in the file, or TIFF file number)",
          at_least(0)),
    Param("NrFilesPerSweep", int, 1, "MIDAS's: files per sweep; a TIFF series has one frame "
          "per file, so this counts its frames; one GE/HDF5 file holding the sweep: 1",
          at_least(1)),
    Param("NrFrames", int, 0, "frames of the sweep in one GE/HDF5 file (0: every frame from "
          "RawStartNr on); for a TIFF series it must equal NrFilesPerSweep if given",
          at_least(0)),
    Param("NrPixelsY", int, None, "frame width (detector columns)", at_least(1)),
    Param("NrPixelsZ", int, None, "frame height (detector rows)", at_least(1)),
    Param("Threshold", float, 50.0, "counts above the dark for a pixel to count", at_least(0)),
    Param("MinNrPx", int, 2, "smallest region (pixels) kept", at_least(1)),
    Param("MaxNrPx", int, 10000, "largest region (pixels) kept", at_least(1)),
    Param("OutputFileName", str, "ff_peaks", "base name of the result files (.h5, .csv, .png)"),
    Param("ImTransOpt", int, (), "MIDAS's image transforms of each raw frame (and the dark), "
          "one code per line, in order: 0 none, 1 flip y (columns), 2 flip z (rows), 3 "
          "transpose (square frames)", multi=True),
)
PEAKS_SCHEMA = _PEAKS_KEYS + _alias_params(_PEAKS_KEYS, ALIASES)


#: Stage 2's keys (spots from peaks, indexing, refinement, Grains.csv).
_GRAINS_KEYS = (
    Param("PeaksFile", str, "", "stage 1's peaks (<OutputFileName>.h5); in the file relative "
          "to its folder, as a flag (--PeaksFile) to the current directory; default "
          "<OutputFileName>.h5 beside the parameter file"),
    Param("OutputFileName", str, "ff_peaks", "stage 1's base name (the default PeaksFile)"),
    Param("LatticeConstant", float, (), "a b c alpha beta gamma of the unstrained lattice (A, "
          "deg)", multi=True),
    Param("SpaceGroup", int, 225, "space group (symmorphic cubic: 225 FCC, 229 BCC, 221 SC)"),
    Param("Wavelength", float, None, "X-ray wavelength (A)", positive),
    Param("Lsd", float, None, "sample-detector distance (um)", positive),
    Param("BC", float, None, "beam centre 'y z' (pixels)", multi=True),
    Param("px", float, None, "pixel size (um)", positive),
    Param("tx", float, 0.0, "detector tilt about the beam (deg)"),
    Param("ty", float, 0.0, "detector tilt about y (deg)"),
    Param("tz", float, 0.0, "detector tilt about z (deg)"),
    Param("Wedge", float, 0.0, "rotation-axis wedge (deg); only 0 is modelled"),
    Param("OmegaStart", float, None, "omega of the first frame's start (deg)"),
    Param("OmegaStep", float, None, "omega per frame (deg; negative: decreasing)"),
    Param("OmegaRange", float, (), "'min max' omega window used (deg), repeatable; default all",
          multi=True),
    Param("BoxSize", float, (), "'ymin ymax zmin zmax' (um) per OmegaRange; default no box",
          multi=True),
    Param("MinEta", float, 0.0, "pole exclusion: spots within this of eta 0 or 180 are not "
          "used (deg)", at_least(0)),
    Param("RhoD", float, 0.0, "largest ring radius used (um); 0: the farthest detector corner"),
    Param("RingThresh", float, (), "'ring threshold' per ring used, repeatable (MIDAS; the "
          "thresholds belong to its peak search); default every ring on the detector",
          multi=True),
    Param("OverAllRingToIndex", int, 1, "ring whose spots seed the orientations", at_least(1)),
    Param("Width", float, 1500.0, "half-width (um) of a ring: a spot farther from every ring "
          "is not used", positive),
    Param("Completeness", float, 0.8, "fraction of a candidate's predicted spots that must be "
          "found to accept it", fraction),
    Param("StepSizeOrient", float, 1.0, "step (deg) along each seed spot's fibre", positive),
    Param("StepSizePos", float, 100.0, "step (um) of candidate positions in the sample",
          positive),
    Param("Rsample", float, 0.0, "sample radius (um): candidate x, y within it", at_least(0)),
    Param("Hbeam", float, 0.0, "beam height (um): candidate z within +-Hbeam/2", at_least(0)),
    Param("MarginOme", float, 1.0, "omega tolerance of a match (deg)", positive),
    Param("MarginEta", float, 500.0, "eta tolerance of a match, as an arc length (um)",
          positive),
    Param("MarginRadial", float, 500.0, "radial tolerance of a match (um)", positive),
    Param("MergePixels", float, 2.0, "peaks of consecutive frames closer than this (px) are "
          "one spot", positive),
    Param("MergeAngle", float, 1.0, "candidates closer than this misorientation (deg) and "
          "MergeDistance are one grain", positive),
    Param("MergeDistance", float, 0.0, "see MergeAngle (um); 0: 2 * StepSizePos",
          at_least(0)),
    Param("MinIndexedFraction", float, 0.5, "fraction of the ring-assigned spots the grains "
          "must explain; fewer fails the run", fraction),
    Param("MaxRefineRMS", float, 1.0, "a refined grain whose rms residual (px, frames) is "
          "larger did not converge", positive),
    Param("Vsample", float, 0.0, "illuminated volume (um^3): GrainRadius from each grain's "
          "share of the spot intensity; 0: GrainRadius 0", at_least(0)),
    Param("NumPhases", int, 1, "written in Grains.csv", at_least(1)),
    Param("PhaseNr", int, 1, "written in Grains.csv", at_least(0)),
    Param("BeamThickness", float, 0.0, "written in Grains.csv (um)"),
    Param("GlobalPosition", float, 0.0, "written in Grains.csv (um)"),
)
#: Stage 2's keys and MIDAS's aliases of them (:data:`ALIASES`), as the file and flags take them.
GRAINS_SCHEMA = _GRAINS_KEYS + _alias_params(_GRAINS_KEYS, ALIASES)


def read_grains_params(path: str, flags: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """Stage 2's parameters from the sweep's file ``path`` and flag overrides, checked."""
    foreign = MIDAS_FF_KEYS | {q.key for q in PEAKS_SCHEMA}
    return grains_params(load_params(path, GRAINS_SCHEMA, foreign), flags, path)


def grains_params(raw: Dict[str, Any], flags: Dict[str, Any] | None = None,
                  path: str = "<text>") -> Dict[str, Any]:
    """Stage 2's parameters from parsed keys ``raw`` (:func:`hedm.params.parse_params` with
    :data:`GRAINS_SCHEMA`) and flag overrides: aliases folded, defaults, checks."""
    raw = fold_aliases(raw, path)
    v = resolve_params(without_aliases(GRAINS_SCHEMA), raw, fold_aliases(flags or {}, "flags"),
                       path)
    if len(v["LatticeConstant"]) != 6:
        raise ParamError(f"{path}: LatticeConstant needs 6 values 'a b c alpha beta gamma', "
                         f"got {len(v['LatticeConstant'])}")
    if len(v["BC"]) != 2:
        raise ParamError(f"{path}: BC needs 2 values 'y z' (one detector), got {v['BC']}")
    if v["Wedge"] != 0:
        raise ParamError(f"{path}: Wedge {v['Wedge']} is not modelled; only 0 is supported")
    if v["OmegaStep"] == 0:
        raise ParamError(f"{path}: OmegaStep must not be 0")
    if len(v["OmegaRange"]) % 2 or len(v["BoxSize"]) % 4:
        raise ParamError(f"{path}: OmegaRange takes 2 values and BoxSize 4 per line")
    if v["BoxSize"] and len(v["BoxSize"]) // 4 != len(v["OmegaRange"]) // 2:
        raise ParamError(f"{path}: one BoxSize per OmegaRange, got {len(v['BoxSize']) // 4} "
                         f"and {len(v['OmegaRange']) // 2}")
    if len(v["RingThresh"]) % 2:
        raise ParamError(f"{path}: RingThresh takes 'ring threshold' pairs")
    if v["MergeDistance"] == 0:
        v["MergeDistance"] = 2.0 * v["StepSizePos"]
    return v


def ring_cutoff(p: Dict[str, Any], shape) -> float:
    """RhoD, or the farthest detector corner from the beam centre (um)."""
    if p["RhoD"] > 0:
        return float(p["RhoD"])
    ybc, zbc = p["BC"]
    return p["px"] * max(math.hypot(y - ybc, z - zbc) for y in (0, shape[1]) for z in (0, shape[0]))


def ff_arrays(p: Dict[str, Any], n_frames: int, shape, rings: Any = None):
    """The :class:`kernels.ffmodel.FFArrays` of a parameter set, for ``n_frames`` frames of
    ``shape`` (rows, columns); ``rings``: ring numbers to keep (default RingThresh's, or all).

    Raises
    ------
    ParamError
        An unsupported lattice or space group, a RingThresh ring not on the detector.
    """
    from kernels.errors import KernelArgumentError
    from kernels.ffmodel import FFArrays
    from kernels.hkl import hkl_list
    from kernels.geometry import ff_tilt_matrix

    lat = p["LatticeConstant"]
    if not (lat[0] == lat[1] == lat[2] and lat[3] == lat[4] == lat[5] == 90):
        raise ParamError(f"LatticeConstant {lat}: only cubic lattices are indexed (a = b = c, "
                         "angles 90); the refinement then fits all six")
    try:
        h = hkl_list(lat[0], p["Wavelength"], p["Lsd"], ring_cutoff(p, shape), p["SpaceGroup"])
        if rings is None:
            rings = [int(r) for r in p["RingThresh"][::2]]
        if rings:
            h = h.select_rings(rings)
    except KernelArgumentError as exc:
        raise ParamError(str(exc)) from exc
    ranges = np.array(p["OmegaRange"] or (-180.0, 180.0), np.float64).reshape(-1, 2)
    boxes = (np.array(p["BoxSize"], np.float64).reshape(-1, 4) if p["BoxSize"] else
             np.tile([-1e12, 1e12, -1e12, 1e12], (len(ranges), 1)).astype(np.float64))
    return FFArrays(hkl=np.ascontiguousarray(h.hkl, np.float64),
                    ring=h.ring.astype(np.int64), tilt=ff_tilt_matrix(p["tx"], p["ty"], p["tz"]),
                    omega_ranges=ranges, boxes=boxes, lsd=float(p["Lsd"]),
                    ybc=float(p["BC"][0]), zbc=float(p["BC"][1]), px=float(p["px"]),
                    wavelength=float(p["Wavelength"]), omega_start=float(p["OmegaStart"]),
                    omega_step=float(p["OmegaStep"]), n_frames=int(n_frames),
                    n_pixels_y=int(shape[1]), n_pixels_z=int(shape[0]),
                    min_eta=float(p["MinEta"]))


def ring_table(p: Dict[str, Any], shape) -> np.ndarray:
    """(ring, two_theta deg, radius um at Lsd) of the rings on the detector."""
    from kernels.hkl import hkl_list

    lat = p["LatticeConstant"]
    h = hkl_list(lat[0], p["Wavelength"], p["Lsd"], ring_cutoff(p, shape), p["SpaceGroup"])
    t = h.ring_table()
    return np.stack([t["ring"].astype(float), t["two_theta"], t["radius"]], 1)
