"""Readers/writers round trips, error messages and the synthetic detector's determinism."""
import os
import pickle

import h5py
import numpy as np
import pytest

from kernels import (DetectorModel, GEFile, HDF5Stack, KernelArgumentError, ReaderError,
                     TiffSeries, background_pattern, frames, open_frames, plant_spots,
                     render_frame, write_ge, write_hdf5, write_tiff_series)

MODEL = DetectorModel(shape=(48, 40), n_frames=6, n_spots=5, seed=3, frames_per_spot=2)


@pytest.fixture(scope="module")
def stack():
    return np.stack(list(frames(MODEL)))


def _check_source(src, stack):
    assert src.n_frames == len(stack) and src.shape == stack.shape[1:]
    for i in (0, len(stack) - 1, 2):
        assert np.array_equal(src.read(i), stack[i])
        assert np.array_equal(src.read_rows(i, 5, 17), stack[i, 5:17])
    out = np.empty(stack.shape[1:], np.uint16)
    assert src.read(1, out=out) is out and np.array_equal(out, stack[1])
    with pytest.raises(ReaderError, match="outside"):
        src.read(len(stack))
    with pytest.raises(ReaderError, match="row band"):
        src.read_rows(0, 10, 5)
    clone = pickle.loads(pickle.dumps(src))
    assert np.array_equal(clone.read(3), stack[3])


def test_tiff_series(tmp_path, stack):
    pattern = str(tmp_path / "stem_%06d.tif")
    paths = write_tiff_series(pattern, stack, first=1)
    assert os.path.basename(paths[0]) == "stem_000001.tif" and sorted(os.listdir(tmp_path)) == \
        [f"stem_{i:06d}.tif" for i in range(1, 7)]
    src = open_frames(pattern, first=1)
    assert isinstance(src, TiffSeries)
    _check_source(src, stack)
    os.unlink(paths[3])
    assert TiffSeries(pattern, first=1).n_frames == 3   # stops at the gap
    with pytest.raises(ReaderError, match="missing"):
        TiffSeries(pattern, first=1, n_frames=6).read(3)
    with pytest.raises(ReaderError, match="%d"):
        TiffSeries(str(tmp_path / "x.tif"))


def test_ge_file(tmp_path, stack):
    path = str(tmp_path / "scan.ge3")
    assert write_ge(path, stack, header=b"synthetic") == len(stack)
    assert os.path.getsize(path) == 8192 + stack.nbytes
    src = open_frames(path, shape=MODEL.shape)
    assert isinstance(src, GEFile)
    _check_source(src, stack)
    with open(path, "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(ReaderError, match="whole"):
        GEFile(path, shape=MODEL.shape)
    with pytest.raises(ReaderError, match="cannot be opened"):
        GEFile(str(tmp_path / "nope.ge2"))


def test_ge_default_shape_sparse_file(tmp_path):
    # 100 frames of 2048x2048 as a sparse file (no disk used): frame count from
    # the size, one frame read without touching the rest.
    path = tmp_path / "big.ge2"
    with open(path, "wb") as f:
        f.truncate(8192 + 100 * 2048 * 2048 * 2)
        f.seek(8192 + 99 * 2048 * 2048 * 2 + 2 * (5 * 2048 + 7))
        f.write(np.array([1234], "<u2").tobytes())
    src = GEFile(path)
    assert src.n_frames == 100 and src.shape == (2048, 2048)
    band = src.read_rows(99, 5, 6)
    assert band.shape == (1, 2048) and band[0, 7] == 1234 and band.sum() == 1234


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_hdf5_stack(tmp_path, stack, compression):
    path = str(tmp_path / "scan.h5")
    write_hdf5(path, stack, len(stack), MODEL.shape, compression=compression)
    with h5py.File(path, "r") as f:
        d = f["/entry/data/data"]
        assert d.chunks == (1, *MODEL.shape) and d.compression == compression
        assert f["/entry"].attrs["NX_class"] == "NXentry"
    with open_frames(path) as src:
        assert isinstance(src, HDF5Stack)
        _check_source(src, stack)
    with pytest.raises(ReaderError, match="no dataset"):
        HDF5Stack(path, dataset="/entry/data/missing")


def test_writers_leave_nothing_on_error(tmp_path, stack):
    bad = [stack[0], stack[1].astype(np.int32)]
    with pytest.raises(KernelArgumentError):
        write_ge(str(tmp_path / "a.ge2"), bad)
    with pytest.raises(KernelArgumentError):
        write_hdf5(str(tmp_path / "a.h5"), stack[:2], 3, MODEL.shape)
    assert os.listdir(tmp_path) == []


def test_synthetic_is_deterministic_with_truth():
    a = render_frame(MODEL, 2)
    assert np.array_equal(a, render_frame(MODEL, 2))
    assert not np.array_equal(a, render_frame(DetectorModel(**{**MODEL.__dict__, "seed": 4}), 2))
    assert a.dtype == np.uint16 and a.shape == MODEL.shape
    truth = plant_spots(MODEL)
    assert len(truth) == MODEL.n_spots
    inside = (truth["row"] > 6) & (truth["row"] < 41) & (truth["col"] > 6) & (truth["col"] < 33)
    gauss = 2 * np.pi * truth["sigma"] ** 2 * truth["amplitude"]
    np.testing.assert_allclose(truth["integrated"][inside], gauss[inside], rtol=0.01)
    d = np.hypot(truth["row"][:, None] - truth["row"], truth["col"][:, None] - truth["col"])
    assert (d[~np.eye(len(truth), dtype=bool)] >= MODEL.min_separation).all()
    # the planted signal is there: mean over a spot's frames exceeds background
    t = truth[0]
    r, c = int(round(t["row"])), int(round(t["col"]))
    frame = render_frame(MODEL, int(t["first_frame"]))
    assert frame[r, c] > background_pattern(MODEL)[r, c] + 0.3 * t["amplitude"]


def test_model_validation():
    with pytest.raises(KernelArgumentError, match="median"):
        DetectorModel(n_frames=6, frames_per_spot=3)
    with pytest.raises(KernelArgumentError, match="frames_per_spot"):
        DetectorModel(n_frames=6, frames_per_spot=0)
