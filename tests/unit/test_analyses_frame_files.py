"""analyses.sources frame files: a TIFF series and a GE file read as partitions of the stream's
shape, frame numbers from ``first``, ``%n``/``%d`` kept apart (one runner, any source)."""
from __future__ import annotations

import numpy as np
import pytest

from analyses.sources import frame_files, partitions, read_frames, read_partition


def _frames(n=7, shape=(12, 10)):
    rng = np.random.default_rng(3)
    return rng.integers(0, 60000, (n, *shape), dtype=np.uint16)


def test_tiff_series_partitions_read_the_files_of_their_frames(tmp_path):
    from kernels.io import write_tiff_series

    stack = _frames()
    write_tiff_series(str(tmp_path / "f_%04d.tif"), stack, first=5)
    refs = partitions(str(tmp_path / "f_%04d.tif"), 7, 3, kind="frames", first=5,
                      dtype="uint16")
    assert [(r.start, r.stop) for r in refs] == [(0, 3), (3, 6), (6, 7)]
    assert frame_files(refs[1]) == [str(tmp_path / f"f_{i:04d}.tif") for i in (8, 9, 10)]
    got = [read_partition(r) for r in refs]
    assert np.array_equal(np.concatenate([g[0] for g in got]), stack)
    assert np.array_equal(np.concatenate([g[1] for g in got]), np.arange(7))
    assert all(g[2].all() for g in got)
    assert np.array_equal(read_frames(refs, [6, 1]), stack[[1, 6]])
    # where each file is read can be given (a node's copy): here one of another name
    other = tmp_path / "copy.tif"
    other.write_bytes((tmp_path / "f_0005.tif").read_bytes())
    frames, positions, _ = read_partition(refs[0], [str(other)] + frame_files(refs[0])[1:])
    assert np.array_equal(frames, stack[:3]) and positions.tolist() == [0, 1, 2]


def test_a_percent_n_folder_stays_for_the_node_and_percent_d_is_the_frame():
    ref = partitions("/d/%n/raw/s_%06d.tif", 4, 2, kind="frames", first=10)[1]
    assert frame_files(ref) == ["/d/%n/raw/s_000012.tif", "/d/%n/raw/s_000013.tif"]
    assert frame_files(partitions("/x%d/f.ge3", 4, 2, kind="frames")[0]) == ["/x%d/f.ge3"]


def test_ge_file_frames_are_indices_from_first_and_need_the_shape(tmp_path):
    from kernels.io import write_ge

    stack = _frames(6)
    write_ge(str(tmp_path / "a.ge3"), stack)
    refs = partitions(str(tmp_path / "a.ge3"), 4, 2, kind="frames", first=2, shape=(12, 10),
                      dtype="uint16")
    frames = np.concatenate([read_partition(r)[0] for r in refs])
    assert np.array_equal(frames, stack[2:6])
    with pytest.raises(ValueError):
        partitions(str(tmp_path / "a.ge3"), 4, 0, kind="frames")


def test_a_series_is_read_by_one_reader_per_process_and_a_gap_still_reads(tmp_path):
    """The reader of a series is kept (one TIFF open per frame, not two); frames past the
    files it counted -- a gap in the series -- and files given elsewhere are read one by one."""
    import os

    from kernels.io import write_tiff_series
    from analyses.sources.frames import _series

    stack = _frames(6)
    write_tiff_series(str(tmp_path / "g_%02d.tif"), stack, first=0)
    os.remove(tmp_path / "g_02.tif")       # the reader counts 2 files from frame 0
    refs = partitions(str(tmp_path / "g_%02d.tif"), 6, 1, kind="frames", dtype="uint16")
    _series.cache_clear()
    assert np.array_equal(read_partition(refs[1])[0], stack[1:2])
    assert np.array_equal(read_partition(refs[0])[0], stack[0:1])
    info = _series.cache_info()
    assert (info.currsize, info.hits) == (1, 1)                        # one reader, kept
    assert np.array_equal(read_partition(refs[4])[0], stack[4:5])     # past the gap
    with pytest.raises(Exception, match="g_02.tif"):
        read_partition(refs[2])
    # the missing file comes (a copy finished): the folder changed (its time set apart
    # here, as file times are coarse), so the series is counted again
    write_tiff_series(str(tmp_path / "g_%02d.tif"), stack[2:3], first=2)
    st = os.stat(tmp_path)
    os.utime(tmp_path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert np.array_equal(read_partition(refs[2])[0], stack[2:3])
    assert _series.cache_info().currsize == 2
    assert np.array_equal(read_partition(refs[3])[0], stack[3:4])
    # another file given for the frame: that file is read, not the series' own
    other = tmp_path / "elsewhere.tif"
    other.write_bytes((tmp_path / "g_05.tif").read_bytes())
    assert np.array_equal(read_partition(refs[0], [str(other)])[0], stack[5:6])


def test_an_hdf5_file_is_kept_open_per_process_and_a_new_copy_is_read_anew(tmp_path):
    """One open dataset per file and process; a file replaced by a new copy (a new inode,
    as staging renames it into place) is opened again, never read through the old handle."""
    import os

    import h5py

    from analyses.sources.dataset import _dataset

    path = str(tmp_path / "scan.h5")

    def write(stack):
        with h5py.File(path + ".tmp", "w") as f:
            f.create_dataset("frames", data=stack.reshape(2, 3, *stack.shape[1:]))
        os.replace(path + ".tmp", path)

    first, second = _frames(6), _frames(6)[::-1].copy()
    write(first)
    refs = partitions(path, 6, 4, dataset="/frames")
    _dataset.cache_clear()
    got = np.concatenate([read_partition(r)[0] for r in refs])
    assert np.array_equal(got, first)
    info = _dataset.cache_info()
    assert (info.currsize, info.hits) == (1, 1)
    write(second)
    assert np.array_equal(np.concatenate([read_partition(r)[0] for r in refs]), second)
    assert _dataset.cache_info().currsize == 2


def test_a_series_without_its_first_frame_here_reads_each_file(tmp_path):
    """A node that holds only some frames of a series (a scatter block placed the others
    elsewhere) still reads those it has: no series reader, each file on its own."""
    import os

    from kernels.io import write_tiff_series

    stack = _frames(4)
    write_tiff_series(str(tmp_path / "h_%02d.tif"), stack, first=0)
    os.remove(tmp_path / "h_00.tif")
    refs = partitions(str(tmp_path / "h_%02d.tif"), 4, 1, kind="frames", dtype="uint16")
    assert np.array_equal(np.concatenate([read_partition(r)[0] for r in refs[1:]]), stack[1:])
