"""Regenerate golden.json: MIDAS's own C functions on inputs written here.

Needs a MIDAS checkout (https://github.com/marinerhemant/MIDAS) at the commit
recorded in golden.json and a C compiler::

    gcc -O2 -I$MIDAS -o harness harness.c $MIDAS/NF_HEDM/src/SharedFuncsFit.c \\
        $MIDAS/NF_HEDM/src/CalcDiffractionSpots.c $MIDAS/FF_HEDM/src/GetMisorientation.c -lm
    python make_golden.py ./harness > golden.json

(harness.c includes ``NF_HEDM/src/nf_headers.h`` relative to the include path.)
harness.c is ours: it reads the geometry, reflections, cases and a
``SpotsInfo.bin``-layout bit file, and prints MIDAS's ``CalcDiffractionSpots``
spots and ``CalcFracOverlap`` fraction per case.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, os.pardir))

from kernels.crystal import random_orientations  # noqa: E402
from kernels.nfgeometry import NFGeometry  # noqa: E402
from kernels.nfgrid import hex_grid, within_radius  # noqa: E402

MIDAS_COMMIT = "0e6e0e542e4f2710490e7b9585b746b1c19f1af7"
# The demo geometry with ps_au.txt's detector tilts.
GEOMETRY = open(os.path.join(HERE, os.pardir, "nf_demo_ps.txt")).read().replace(
    "tx 0\nty 0\ntz 0", "tx 0.536238\nty 0.557035\ntz 0.474936")
IMAGE_FORMULA = "(7 * y + 3 * z + 5 * frame + 11 * distance) % 13 < 6"


def formula_image(geo):
    d, f, z, y = np.ogrid[:geo.n_distances, :geo.n_frames, :geo.n_pixels_z, :geo.n_pixels_y]
    return (7 * y + 3 * z + 5 * f + 11 * d) % 13 < 6


def main(harness):
    geo = NFGeometry.from_text(GEOMETRY, "golden")
    img = formula_image(geo)
    grid = within_radius(hex_grid(geo.grid_size, 40.0), 40.0)
    rng = np.random.default_rng(1)
    rows = grid[rng.choice(len(grid), 30, replace=False)]
    us = random_orientations(30, 2)
    h = geo.hkls
    with tempfile.TemporaryDirectory() as tmp:
        bits = np.ascontiguousarray(img.transpose(0, 1, 3, 2)).ravel()  # distance, frame, y, z
        np.packbits(bits, bitorder="little").tofile(os.path.join(tmp, "spots.bin"))
        with open(os.path.join(tmp, "in.txt"), "w") as f:
            f.write(f"{geo.n_distances}\n")
            for d in range(geo.n_distances):
                f.write(f"{geo.lsd[d]!r} {geo.ybc[d]!r} {geo.zbc[d]!r}\n")
            f.write(f"{geo.px!r} {geo.n_pixels_y} {geo.n_pixels_z} {geo.omega_start!r} "
                    f"{geo.omega_step!r} {geo.n_frames} {geo.tilts[0]!r} {geo.tilts[1]!r} "
                    f"{geo.tilts[2]!r} {geo.exclude_pole_angle!r}\n{len(geo.omega_ranges)}\n")
            for (lo, hi), b in zip(geo.omega_ranges, geo.box_sizes):
                f.write(f"{lo!r} {hi!r} {b[0]!r} {b[1]!r} {b[2]!r} {b[3]!r}\n")
            f.write(f"{len(h)}\n")
            for g, r, th in zip(h.g, h.ring, h.theta):
                f.write(f"{g[0]!r} {g[1]!r} {g[2]!r} {r} {th!r}\n")
            f.write(f"{len(us)}\n")
            for u, row in zip(us, rows):
                f.write(" ".join(repr(float(x)) for x in (*u.ravel(), *row)) + "\n")
        out = subprocess.run([harness, os.path.join(tmp, "in.txt"),
                              os.path.join(tmp, "spots.bin")],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    cases, k = [], 0
    for u, row in zip(us, rows):
        _, _, nt, frac = out[k].split()
        spots = [[float(v) for v in line.split()] for line in out[k + 1:k + 1 + int(nt)]]
        k += 1 + int(nt)
        cases.append({"u": u.ravel().tolist(), "row": row.tolist(), "frac": float(frac),
                      "spots": spots})
    json.dump({"origin": "MIDAS (github.com/marinerhemant/MIDAS) CalcDiffractionSpots and "
                         "CalcFracOverlap, compiled from NF_HEDM/src at the commit below by "
                         "tests/data/midas_nf_golden/harness.c",
               "midas_commit": MIDAS_COMMIT, "geometry": GEOMETRY,
               "image_formula": IMAGE_FORMULA, "cases": cases}, sys.stdout, indent=0)


if __name__ == "__main__":
    main(sys.argv[1])
