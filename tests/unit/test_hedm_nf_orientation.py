"""NF-HEDM raw-frame orientation (``ImTransOpt``) and runs that find nothing.

MIDAS's ``ProcessImagesCombined`` reads a TIFF's row ``r``, column ``c`` as
``y = NrPixelsY - 1 - c``, ``z = NrPixelsZ - 1 - r``: frames MIDAS reduces
correctly are ours flipped in both axes.  Such frames, named as MIDAS names them
(``OrigFileName_%06d.extOrig``), with ``ImTransOpt 1`` and ``ImTransOpt 2`` give
stage 1's binary images bit for bit and the same map; without the key stage 2
places nothing and exits 1 naming the orientation first.  Stage 1 exits 1 when a
distance has no spot at all.  Small layer: 2 x 6 frames (seconds per run)."""
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from hedm.imtrans import OrientedFrames, apply, check_codes, raw_shape
from hedm.nf import read_nf_params
from hedm.nffit import fit_options, read_fit_params
from hedm.params import ParamError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(flow, params, out, *extra):
    cmd = [sys.executable, "-m", "workflows", "run", os.path.join(ROOT, "hedm", flow),
           "--executor", "inline", "--out", str(out), "--", "--params", str(params), *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI"))}
    env["PYTHONPATH"] = ROOT
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A layer of 2 x 6 raw frames (hedm.nfsynth, frames in the model's orientation)."""
    from hedm.nfsynth import make_layer

    folder = str(tmp_path_factory.mktemp("nf-small"))
    make_layer(folder, frames=6, rsample=15.0, grains=3, raw_frames=True)
    return folder


def midas_layer(src, dst, extra_keys):
    """``src``'s frames as MIDAS reads them (flipped in y and z), named the MIDAS way
    (``midas_%06d.tif`` from ``OrigFileName midas``), the same parameter file plus
    ``extra_keys``."""
    import tifffile

    os.makedirs(dst, exist_ok=True)
    for f in sorted(glob.glob(os.path.join(src, "stem_*.tif"))):
        frame = tifffile.imread(f)
        tifffile.imwrite(os.path.join(dst, "midas_" + os.path.basename(f)[5:]),
                         frame[::-1, ::-1])
    for name in ("grid.txt", "seeds.txt"):
        shutil.copy(os.path.join(src, name), dst)
    text = open(os.path.join(src, "nf.params")).read()
    assert "InputPattern stem_%06d.tif\n" in text
    text = text.replace("InputPattern stem_%06d.tif\n",
                        "OrigFileName midas\nextOrig tif\n" + extra_keys)
    with open(os.path.join(dst, "nf.params"), "w") as fh:
        fh.write(text)
    return os.path.join(dst, "nf.params")


# -- the transforms ---------------------------------------------------------------------
@pytest.mark.parametrize("codes", [(), (0,), (1,), (2,), (1, 2), (2, 1), (3,), (1, 3),
                                   (3, 2), (1, 2, 3), (3, 3)])
def test_transforms_against_numpy_and_row_bands(tmp_path, codes):
    from kernels import open_frames
    from kernels.io import write_tiff_series

    rng = np.random.default_rng(3)
    raw = rng.integers(0, 60000, (3, 6, 9)).astype(np.uint16)     # 3 frames of 6 x 9
    write_tiff_series(str(tmp_path / "f_%03d.tif"), iter(raw), first=0)
    reader = OrientedFrames(open_frames(str(tmp_path / "f_%03d.tif"), first=0, n_frames=3),
                            codes)
    want = raw[1]
    for c in codes:          # NumPy reference: flips and transposes in order
        want = {0: want, 1: np.fliplr(want), 2: np.flipud(want), 3: want.T}[c]
    assert reader.shape == want.shape
    assert raw_shape(want.shape, codes) == raw.shape[1:]
    assert np.array_equal(reader.read(1), want) and np.array_equal(apply(raw[1], codes), want)
    out = np.empty((2, want.shape[1]), np.uint16)
    for r0 in range(want.shape[0] - 1):
        assert np.array_equal(reader.read_rows(1, r0, r0 + 2, out), want[r0:r0 + 2])
    with pytest.raises(ValueError, match="ImTransOpt 4 is not one of 0 .none., 1"):
        check_codes([1, 4])


def test_image_transforms_key_repeats_as_midas_writes_it(tmp_path):
    base = ("NrFilesPerDistance 6\nNrPixelsY 512\nNrPixelsZ 288\n")
    p = tmp_path / "nf.params"
    p.write_text(base + "ImTransOpt 1\nImTransOpt 2\n")
    assert read_nf_params(str(p))["ImTransOpt"] == (1, 2)
    p.write_text(base + "ImTransOpt 2 1   # both flips\nImTransOpt 3\n")
    assert read_nf_params(str(p))["ImTransOpt"] == (2, 1, 3)
    p.write_text(base)
    assert read_nf_params(str(p))["ImTransOpt"] == ()           # default: as the frames are
    p.write_text(base + "ImTransOpt 1\nImTransOpt 5\n")
    with pytest.raises(ParamError, match=r"nf.params:5: ImTransOpt must be one of 0, 1, 2, 3"):
        read_nf_params(str(p))


def test_midas_frame_names_and_fit_controls(tmp_path):
    from kernels.nffit import FitOptions

    base = "NrFilesPerDistance 6\nNrPixelsY 512\nNrPixelsZ 288\nSeedOrientations s.txt\n"
    p = tmp_path / "nf.params"
    p.write_text(base + "OrigFileName Au_layer1\nextOrig tiff\n")
    assert read_nf_params(str(p))["InputPattern"] == "Au_layer1_%06d.tiff"
    p.write_text(base + "OrigFileName Au\n")
    assert read_nf_params(str(p))["InputPattern"] == "Au_%06d.tif"       # MIDAS's default ext
    p.write_text(base)
    assert read_nf_params(str(p))["InputPattern"] == "stem_%06d.tif"
    p.write_text(base + "OrigFileName Au\nInputPattern other_%05d.tif\n")
    with pytest.raises(ParamError, match="name different frames"):
        read_nf_params(str(p))
    # fit controls: parameter-file keys, defaults those of the Python API
    p.write_text(base)
    assert fit_options(read_fit_params(str(p))) == FitOptions()
    p.write_text(base + "NrCandidatesRefined 3\nMaxEvaluations 5000\nNrRestarts 0\n")
    o = fit_options(read_fit_params(str(p)))
    assert (o.n_refine, o.max_evals, o.restarts) == (3, 5000, 0)
    p.write_text(base + "MaxEvaluations 5\n")
    with pytest.raises(ParamError, match="MaxEvaluations must be >= 10"):
        read_fit_params(str(p))


# -- the runs ------------------------------------------------------------------------------
def test_midas_oriented_frames_with_the_key_reduce_to_the_same_images(small, tmp_path):
    proc = run("nf.py", os.path.join(small, "nf.params"), tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    params = midas_layer(small, str(tmp_path / "midas"), "ImTransOpt 1\nImTransOpt 2\n")
    proc = run("nf.py", params, tmp_path / "midas-out")
    assert proc.returncode == 0, proc.stderr
    a = np.load(tmp_path / "ours" / "nf_spots_binary.npy")
    b = np.load(tmp_path / "midas-out" / "nf_spots_binary.npy")
    assert a.any() and np.array_equal(a, b)          # same images: the map cannot differ
    for name in ("nf_background_d0.npy", "nf_background_d1.npy"):
        assert np.array_equal(np.load(tmp_path / "ours" / "work" / name),
                              np.load(tmp_path / "midas-out" / "work" / name))
    # and the map, on the 16 grid points nearest the centre (seconds, not minutes)
    import h5py

    from kernels import read_grid, write_grid

    grid = read_grid(os.path.join(small, "grid.txt"))
    write_grid(str(tmp_path / "centre.txt"),
               grid[np.argsort(np.hypot(grid[:, 2], grid[:, 3]), kind="stable")[:16]])
    maps = []
    for layer_params, red in ((os.path.join(small, "nf.params"), tmp_path / "ours"),
                              (params, tmp_path / "midas-out")):
        proc = run("nffit.py", layer_params, red / "map", "--ReducedDirectory", str(red),
                   "--GridFileName", str(tmp_path / "centre.txt"))
        assert proc.returncode == 0, proc.stderr
        with h5py.File(red / "map" / "nf_map.h5", "r") as f:
            maps.append({k: f[k][()] for k in ("euler", "confidence", "grain_id")})
    assert (maps[0]["confidence"] > 0).all()
    for k in maps[0]:
        assert np.array_equal(maps[0][k], maps[1][k], equal_nan=True), k


def test_midas_oriented_frames_without_the_key_fail_naming_the_orientation(small, tmp_path):
    params = midas_layer(small, str(tmp_path / "midas"), "")
    red = tmp_path / "midas" / "reduced"
    proc = run("nf.py", params, red)
    assert proc.returncode == 0, proc.stderr          # stage 1 finds spots either way
    proc = run("nffit.py", params, tmp_path / "map", "--ReducedDirectory", "reduced")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "only 0 of 258 grid points (0.0%)" in err, err
    assert "(1) raw-frame orientation: the parameter file sets no ImTransOpt" in err
    assert "'ImTransOpt 1' and 'ImTransOpt 2'" in err and "(2) geometry" in err
    assert "(3) seeds" in err
    import json

    record = json.load(open(tmp_path / "map" / "nffit_run.json"))
    assert record["placement"]["placed"] == 0 and record["placement"]["points"] == 258
    assert os.path.exists(tmp_path / "map" / "nf_map.mic")   # written, for inspection
    # a grid meant to be mostly empty: the check can be turned off
    proc = run("nffit.py", params, tmp_path / "map0", "--ReducedDirectory", "reduced",
               "--MinMappedFraction", "0")
    assert proc.returncode == 0, proc.stderr


def test_stage1_distance_without_spots_fails(small, tmp_path):
    import tifffile

    layer = tmp_path / "layer"
    shutil.copytree(small, layer)
    for f in range(6, 12):                       # distance 1: flat frames, nothing to find
        tifffile.imwrite(layer / f"stem_{f:06d}.tif", np.full((288, 512), 100, np.uint16))
    proc = run("nf.py", layer / "nf.params", tmp_path / "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no spot found at distance(s) 1 in any of its 6 frames (files 6..11 of " \
           "stem_%06d.tif)" in proc.stderr, proc.stderr
    assert "BlanketSubtraction (60)" in proc.stderr
    # stage 2 refuses such images before any task
    proc = run("nffit.py", layer / "nf.params", tmp_path / "map", "--ReducedDirectory",
               str(tmp_path / "out"))
    assert proc.returncode != 0
    assert "no spot pixel at distance(s) 1: nothing can be fitted" in proc.stderr, proc.stderr


def test_frame_shape_is_checked_after_the_transforms(small, tmp_path):
    proc = run("nf.py", os.path.join(small, "nf.params"), tmp_path / "o", "--ImTransOpt", "3")
    assert proc.returncode == 2, proc.stderr      # bad input, found before any task
    assert "frames of 512 rows x 288 columns after ImTransOpt 3 (transpose), but " \
           "NrPixelsZ x NrPixelsY is 288 x 512" in proc.stderr, proc.stderr
