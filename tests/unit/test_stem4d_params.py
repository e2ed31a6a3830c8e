"""Stem4D's parameters: masks from parameters and files, dark/gain files, sampled
thresholds from a calibration file (the stream's way), and refusals that say what to do."""
from __future__ import annotations

import numpy as np
import pytest

from streams.protocol import ScanGeometry

pytest.importorskip("numba")
h5py = pytest.importorskip("h5py")

SHAPE = (20, 16)


def _geom(dtype="<u2", frames=6):
    return ScanGeometry("t", 1, frames, 1, SHAPE, dtype, (2, frames // 2))


def test_masks_from_every_file_kind_and_parameters_in_order(tmp_path):
    from stem4d.analysis import Stem4D

    rng = np.random.default_rng(0)
    a2, a3 = rng.random(SHAPE), rng.random((2, *SHAPE))
    np.save(tmp_path / "one.npy", a2)
    np.save(tmp_path / "stack.npy", a3)
    np.savez(tmp_path / "named.npz", left=a3[0], right=a3[1])
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("stack", data=a3).attrs["names"] = ["p", "q"]
        f.create_dataset("grp/only", data=a2)
    cases = {f"{tmp_path}/one.npy": ["one"], f"{tmp_path}/stack.npy": ["stack_0", "stack_1"],
             f"{tmp_path}/named.npz": ["left", "right"], f"{tmp_path}/m.h5:/stack": ["p", "q"],
             f"{tmp_path}/m.h5:/grp": ["only"]}
    for spec, names in cases.items():
        a = Stem4D(mode="virtual", mask_file=spec, masks=[{"name": "d", "r": 3, "cx": 2}],
                   bf_radius=4)
        ms = a.masks(SHAPE)
        assert [m.name for m in ms] == ["d", *names, "bright_field"], spec
        assert ms[0].attrs["cx"] == 2 and ms[0].attrs["cy"] == (SHAPE[0] - 1) / 2
        frames = rng.integers(0, 1000, (4, *SHAPE)).astype(np.uint32)
        p = a.process_partition(frames, np.arange(4), np.ones(4, bool))
        ref = np.einsum("nij,mij->nm", frames.astype(float), np.stack([m.weights for m in ms]))
        np.testing.assert_allclose(p.chunks[0].columns["virtual"], ref, rtol=1e-12)


@pytest.mark.parametrize("params, match", [
    ({"masks": [{"name": "a", "r": 2}, {"name": "a", "r": 3}]}, "used twice"),
    ({"masks": [{"name": "a", "radius": 2}]}, "unknown radius"),
    ({"masks": [{"name": "a", "r": 2, "ri": 1}]}, "give r"),
    ({"masks": [{"name": "a/b", "r": 2}]}, "without '/'"),
    ({"masks": [{"name": "a", "ri": 3, "ro": 2}]}, "radius_inner < radius"),
    ({"masks": {"name": "a", "r": 2}}, "list of dicts"),
    ({"mode": "all"}, "mode"),
    ({"rule": "libertem"}, "rule"),
    ({"center": [3, 4]}, "cx="),
    ({"background_threshold": 50, "xray_threshold": 40}, "below"),
])
def test_bad_parameters_are_refused_saying_what_to_give(params, match):
    from stem4d.analysis import Stem4D
    from stem4d.errors import Stem4DError

    with pytest.raises(Stem4DError, match=match):
        Stem4D(**params).prepare(_geom())


def test_dark_and_gain_files_and_their_shapes(tmp_path):
    from kernels import count_electrons
    from stem4d.analysis import Stem4D
    from stem4d.errors import Stem4DError

    rng = np.random.default_rng(1)
    dark = rng.normal(50, 2, SHAPE)
    gain = rng.uniform(0.5, 2, SHAPE)
    np.save(tmp_path / "dark.npy", dark)
    with h5py.File(tmp_path / "gain.h5", "w") as f:
        f["g"] = gain
    frames = (dark + rng.normal(0, 1, (6, *SHAPE))).astype(np.float32)
    frames[:, 5, 5] += 400
    a = Stem4D(mode="count", dark=str(tmp_path / "dark.npy"), gain=f"{tmp_path}/gain.h5:/g",
               background_threshold=30, xray_threshold=1e4)
    a.prepare(_geom("<f4"))
    p = a.process_partition(frames, np.arange(6), np.ones(6, bool))
    want = [count_electrons(fr, dark, 30, 1e4, gain=gain)[1] for fr in frames]
    assert list(p.chunks[0].columns["electrons"]) == want and min(want) >= 1
    np.save(tmp_path / "bad.npy", dark.T)
    with pytest.raises(Stem4DError, match=r"dark .*bad.npy has shape \(16, 20\)"):
        Stem4D(dark=str(tmp_path / "bad.npy")).prepare(_geom())
    with pytest.raises(Stem4DError, match=":/DATASET"):
        Stem4D(gain=str(tmp_path / "gain.h5")).prepare(_geom())
    np.save(tmp_path / "g0.npy", np.zeros(SHAPE))
    with pytest.raises(Stem4DError, match="pixels are 0"):
        Stem4D(gain=str(tmp_path / "g0.npy")).prepare(_geom())
    with pytest.raises(Stem4DError, match="does not exist"):
        Stem4D(mode="virtual", mask_file=str(tmp_path / "nowhere.npy")).prepare(_geom())
    # a virtual-only run never reads the counting inputs
    Stem4D(mode="virtual", dark=str(tmp_path / "bad.npy")).prepare(_geom())


def test_sampled_thresholds_from_calibration_frames_for_a_stream(tmp_path):
    from stem4d.analysis import Stem4D
    from stem4d.counting import sample_indices, sampled_thresholds
    from stem4d.errors import Stem4DError
    from stem4d.synth import frames_array

    cal = frames_array((4, 5), SHAPE, seed=3)
    with h5py.File(tmp_path / "cal.h5", "w") as f:
        f["frames"] = cal.reshape(4, 5, *SHAPE)
    with pytest.raises(Stem4DError, match="threshold_frames=FILE.h5:/DATASET"):
        Stem4D(thresholds="sampled").prepare(_geom())
    a = Stem4D(thresholds="sampled", samples=6, threshold_frames=f"{tmp_path}/cal.h5:/frames")
    a.prepare(_geom())
    want = sampled_thresholds(cal[sample_indices(20, 6)], 20.0, None, 4.0, 10.0)
    assert a.thresholds() == want and want.threshold_calculated
    # the resolved parameters rebuild the same analysis on another rank, without sampling
    b = Stem4D(**{k: v for k, v in a.params.items() if v is not None})
    assert b.thresholds() == want
