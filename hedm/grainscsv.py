"""MIDAS's ``Grains.csv``: the FF-HEDM grain list, written exactly as MIDAS's ``ProcessGrains``
writes it, and read back (also a MIDAS-written one).

Layout (``FF_HEDM/src/ProcessGrains.c``): ``%`` header lines, then one row per
grain of the 47 :data:`COLUMNS`, tab-separated, ``%lf`` but the integer
``GrainID``: orientation ``O11..O33`` (crystal -> sample), position (um), lattice,
strains x 10^6 and Euler angles (radians, Bunge). FF's grains seed NF::

    python -m hedm.grainscsv OUT/Grains.csv --seeds LAYER/seeds.txt
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from hedm.common import output_file

__all__ = ["COLUMNS", "write_grains_csv", "read_grains_csv", "seed_orientations", "main"]

#: The 47 columns of MIDAS's Grains.csv, in order.
COLUMNS = (["GrainID"] + [f"O{i}{j}" for i in (1, 2, 3) for j in (1, 2, 3)]
           + ["X", "Y", "Z", "a", "b", "c", "alpha", "beta", "gamma", "DiffPos", "DiffOme",
              "DiffAngle", "GrainRadius", "Confidence"]
           + [f"eFab{i}{j}" for i in (1, 2, 3) for j in (1, 2, 3)]
           + [f"eKen{i}{j}" for i in (1, 2, 3) for j in (1, 2, 3)]
           + ["RMSErrorStrain", "PhaseNr", "Eul0", "Eul1", "Eul2"])


def _header(n: int, beam_center: float, p: Mapping[str, Any]) -> str:
    lat = p["LatticeConstant"]
    return (f"%NumGrains {n}\n%BeamCenter {beam_center:f}\n"
            f"%BeamThickness {float(p['BeamThickness']):f}\n"
            f"%GlobalPosition {float(p['GlobalPosition']):f}\n%NumPhases {int(p['NumPhases'])}\n"
            f"%PhaseInfo\n%\tSpaceGroup:{int(p['SpaceGroup'])}\n"
            "%\tLattice Parameter: " + " ".join(f"{float(v):f}" for v in lat) + "\n"
            "%" + "\t".join(COLUMNS[:24]) + "\t" + "\t".join(COLUMNS[24:33]) + "\t"
            + "\t".join(COLUMNS[33:]) + "\n")


def write_grains_csv(path: str, rows: np.ndarray, p: Mapping[str, Any]) -> str:
    """Write ``rows`` ((n, 47), :data:`COLUMNS`) as MIDAS's Grains.csv (atomically);
    ``%BeamCenter`` is MIDAS's mean ``Z`` weighted by ``GrainRadius`` cubed."""
    rows = np.asarray(rows, float).reshape(-1, len(COLUMNS))
    vol = rows[:, 22] ** 3
    beam_center = float((rows[:, 12] * vol).sum() / vol.sum()) if vol.sum() > 0 else 0.0
    with output_file(path) as fh:
        fh.write(_header(len(rows), beam_center, p))
        for r in rows:
            fh.write(f"{int(r[0])}\t" + "".join(f"{v:f}\t" for v in r[1:]) + "\n")
    return path


def read_grains_csv(path: str) -> Dict[str, Any]:
    """A Grains.csv (ours or MIDAS's): ``{"rows": (n, 47), "header": {...}, "columns"}``;
    ValueError naming a line without 47 numbers."""
    header: Dict[str, str] = {}
    rows: List[Sequence[float]] = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if line.startswith("%"):
                words = line[1:].strip().split(None, 1)
                if words and not line.startswith("%GrainID"):
                    header[words[0].rstrip(":")] = words[1] if len(words) > 1 else ""
                continue
            if not line.strip():
                continue
            vals = line.split()
            if len(vals) != len(COLUMNS):
                raise ValueError(f"{path}:{lineno}: {len(vals)} values, a Grains.csv row has "
                                 f"{len(COLUMNS)}")
            rows.append([float(v) for v in vals])
    return {"rows": np.array(rows).reshape(-1, len(COLUMNS)), "header": header,
            "columns": COLUMNS}


def seed_orientations(path: str) -> np.ndarray:
    """(n, 3, 3) orientations of a Grains.csv's grains (its ``O11..O33``), for NF seeds."""
    rows = read_grains_csv(path)["rows"]
    return np.ascontiguousarray(rows[:, 1:10].reshape(-1, 3, 3))


def main(argv=None) -> int:
    """``python -m hedm.grainscsv Grains.csv --seeds seeds.txt``: NF's SeedOrientations from
    FF's grains (MIDAS's quaternion layout, :func:`hedm.nffit.write_seeds`)."""
    import argparse

    from hedm.nffit import write_seeds

    ap = argparse.ArgumentParser(prog="python -m hedm.grainscsv",
                                 description="Write NF seed orientations from FF's Grains.csv")
    ap.add_argument("grains", help="Grains.csv (hedm/ffgrains.py's or MIDAS's)")
    ap.add_argument("--seeds", required=True, help="SeedOrientations file to write")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace an existing seeds file (mpistage cannot tell its own)")
    args = ap.parse_args(argv)
    from core.outputs import OutputError, check_outputs

    try:    # the one output rule (core.outputs): never over the input, nor a user's file
        check_outputs([args.seeds], [args.grains], overwrite=args.overwrite,
                      hint="choose another --seeds")
    except OutputError as exc:
        print(f"error: {exc}")
        return 2
    u = seed_orientations(args.grains)
    if not len(u):
        print(f"{args.grains}: no grain; no seeds written")
        return 1
    write_seeds(args.seeds, u)
    print(f"{len(u)} seed orientations written to {args.seeds} (NrOrientations {len(u)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
