"""The readers' dtype rule (kernels.io.convert): markers kept, no silent overflow."""
import numpy as np
import pytest

from kernels import ReaderError
from kernels.io.convert import SUPPORTED, check_dtype, convert_into, marker_of


def conv(src, dtype, overflow="error"):
    src = np.asarray(src)
    return convert_into(src, np.empty(src.shape, dtype), overflow, "f.h5:/d frame 3")


def test_values_that_fit_are_exact_and_markers_map_to_markers():
    u32 = np.array([0, 1, 65534, 2**32 - 1], np.uint32)
    assert conv(u32, np.uint16).tolist() == [0, 1, 65534, 65535]
    assert conv(u32, np.int32).tolist() == [0, 1, 65534, -1]
    got = conv(u32, np.float32)
    assert got[:3].tolist() == [0, 1, 65534] and np.isnan(got[3])
    u16 = np.array([7, 65535], np.uint16)
    assert conv(u16, np.uint32).tolist() == [7, 2**32 - 1]      # widening keeps the marker
    assert conv(u16, np.uint8, "clip").tolist() == [7, 255]
    assert conv(np.array([3.5, np.nan], np.float32), np.float64)[0] == 3.5


@pytest.mark.parametrize("src,dtype,match", [
    (np.array([65535, 1], np.uint32), np.uint16, "1 pixels above 65534 .max 65535."),
    (np.array([70000, 2**32 - 1], np.uint32), np.uint16, "do not fit uint16"),
    (np.array([-1, 5], np.int32), np.uint16, "1 pixels below 0 .min -1."),
    (np.array([2**24 + 1], np.uint32), np.float32, "above 16777216"),
    (np.array([1.5], np.float32), np.uint16, "without rounding"),
    (np.array([256], np.uint16), np.uint8, "above 254"),
])
def test_what_does_not_fit_raises_naming_frame_and_fix(src, dtype, match):
    with pytest.raises(ReaderError, match=match) as err:
        conv(src, dtype)
    assert "f.h5:/d frame 3" in str(err.value)


def test_clip_saturates_below_the_marker():
    got = conv(np.array([70000, 2**32 - 1, 65535, 3], np.uint32), np.uint16, "clip")
    assert got.tolist() == [65534, 65535, 65534, 3]
    assert conv(np.array([-5, 9], np.int32), np.uint16, "clip").tolist() == [0, 9]
    # into a float: rounded, not clipped
    assert conv(np.array([2**24 + 1], np.uint32), np.float32, "clip")[0] == 2**24


def test_dtypes_accepted_and_refused():
    assert [check_dtype(d, "x").name for d in SUPPORTED] == list(SUPPORTED)
    assert check_dtype(">u2", "x") == np.dtype(np.uint16)      # byte order made native
    for bad in ("complex64", "int64", np.dtype([("a", "<i4")]), "S4"):
        with pytest.raises(ReaderError, match="x"):
            check_dtype(bad, "x")
    assert marker_of(np.uint8) == 255 and marker_of(np.int16) == -1
    assert np.isnan(marker_of(np.float32))


def test_reader_converts_bands_and_checks_out(tmp_path):
    from kernels.io import HDF5Stack, write_hdf5

    frames = np.arange(2 * 6 * 5, dtype=np.uint16).reshape(2, 6, 5)
    path = str(tmp_path / "s.h5")
    write_hdf5(path, frames, 2, (6, 5))
    with HDF5Stack(path, dtype="float32") as r:
        assert r.file_dtype == np.uint16 and r.dtype == np.float32
        assert np.array_equal(r.read_rows(1, 2, 4), frames[1, 2:4].astype(np.float32))
        with pytest.raises(Exception, match="float32"):
            r.read(0, out=np.empty((6, 5), np.uint16))
    with pytest.raises(ReaderError, match="overflow must be"):
        HDF5Stack(path, overflow="wrap")
