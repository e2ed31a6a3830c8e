"""The FF forward model against MIDAS's own equations, transcribed line by line in
``tests/ff_midas.py`` (issue 46).

The reference never calls the project's model: ``B`` is ``CorrectHKLsLatC``, the omegas are
``CalcOmega``'s quadratic in cos(omega) with its sign test, the spot is
``CalcSpotPosition`` moved by ``DisplacementInTheSpot``, the pixel is the one whose lab
point (``FitSetupParamsAllZarr.c`` 222-227: ``Yc = -(y - ybc) px``, ``Rx Ry Rz`` tilts)
lies on the ray, and a spot's frame position is ``(omega - OmegaStart) / OmegaStep``
(frame ``k``'s omega is ``OmegaStart + k OmegaStep``, ``PeaksFittingOMPZarrRefactor.c``
2856). Sources: marinerhemant/MIDAS at 0e6e0e54, ``FF_HEDM/src/``. Each spot (omega, eta,
y, z, frame) of a few orientations and positions, for both signs of ``OmegaStep``, must be
the project's (:func:`kernels.ffmodel.ff_spots`).
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.ff_midas import axis_angle, midas_spots, tilts_rx_ry_rz

GEOMETRY = """\
LatticeConstant 4.08 4.08 4.08 90 90 90
Wavelength 0.172979
Lsd 120000
BC 101.3 95.7
px 200
RhoD 18500
MinEta 6
"""


CASES = [  # orientation (axis, angle), position (um), tilts (tx, ty, tz)
    (((1, 2, 3), 37.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
    (((-2, 1, 0.5), 71.0), (80.0, -60.0, 30.0), (0.0, 0.0, 0.0)),
    (((0.3, -1, 2), 123.0), (-120.0, 40.0, -20.0), (0.0, 0.0, 0.0)),
    (((1, 1, -1), 15.0), (0.0, 0.0, 0.0), (3.0, -2.5, 4.0)),     # the tilt order matters
]


@pytest.mark.parametrize("start,step", [(180.0, -1.0), (-180.0, 1.0), (0.0, -0.25)])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_ff_spots_are_midas_spots(case, start, step):
    from hedm.ffparams import GRAINS_SCHEMA, ff_arrays, grains_params
    from hedm.params import parse_params
    from kernels.ffmodel import ff_spots

    (axis, angle), pos, tilts = CASES[case]
    n_frames = int(round(360 / abs(step)))
    text = GEOMETRY + (f"OmegaStart {start}\nOmegaStep {step}\n"
                       f"tx {tilts[0]}\nty {tilts[1]}\ntz {tilts[2]}\n")
    p = grains_params(parse_params(text, GRAINS_SCHEMA))
    shape = (192, 208)
    arrays = ff_arrays(p, n_frames, shape)
    u = axis_angle(axis, angle)
    lat = np.array(p["LatticeConstant"])
    ours = ff_spots(u, lat, np.array(pos), arrays)
    q = {"latc": lat, "wl": p["Wavelength"], "lsd": p["Lsd"], "ybc": p["BC"][0],
         "zbc": p["BC"][1], "px": p["px"], "trs": tilts_rx_ry_rz(*tilts), "start": start,
         "step": step}
    ref = midas_spots(u, pos, arrays.hkl, q)
    # MIDAS's filters: on the detector, outside the poles (MinEta), in the sweep; spots
    # within a hair of a filter's edge are left out of the comparison (either may keep them)
    ae = np.abs(ref[:, 1])
    inside = ((ref[:, 2] >= 0) & (ref[:, 2] < shape[1]) & (ref[:, 3] >= 0)
              & (ref[:, 3] < shape[0]) & (ae >= 6) & (180 - ae >= 6))
    edge = ((np.minimum(np.abs(ref[:, 2]), np.abs(ref[:, 2] - shape[1])) < 0.01)
            | (np.minimum(np.abs(ref[:, 3]), np.abs(ref[:, 3] - shape[0])) < 0.01)
            | (np.abs(ae - 6) < 0.01) | (np.abs(180 - ae - 6) < 0.01))
    want = ref[inside & ~edge]
    assert len(want) >= 10, "too few spots on the detector to compare"
    got = {(int(r[7]), round(r[0], 6)): r for r in ours}
    for ome, eta, y, z, frame, h in want:
        key = min(((k, r) for k, r in got.items() if k[0] == int(h)),
                  key=lambda kr: abs(kr[1][0] - ome), default=(None, None))[1]
        assert key is not None, f"hkl {arrays.hkl[int(h)]} omega {ome:.4f}: not predicted"
        assert abs(key[0] - ome) < 1e-6, (h, key[0], ome)
        assert abs(key[1] - eta) < 1e-3, ("eta", h, key[1], eta)
        assert abs(key[3] - y) < 0.02, ("y px", h, key[3], y)
        assert abs(key[4] - z) < 0.02, ("z px", h, key[4], z)
        assert abs(key[5] - frame) < 1e-6, ("frame", h, key[5], frame)
    kept = {(int(h), round(o, 3)) for o, *_, h in ref[inside]}
    extra = [r for r in ours if (int(r[7]), round(r[0], 3)) not in kept]
    assert not extra, f"spots MIDAS would not give: {extra[:3]}"
