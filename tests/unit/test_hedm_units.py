"""HEDM application helpers without MPI: the per-worker cache, tables, scoring, writers."""
import os

import numpy as np
import pytest

from hedm.common import cached, is_series, merge_tables, split_rows
from hedm.output import NF_PIXEL_DTYPE, write_csv, write_h5


def test_cache_reads_once_and_again_after_change(tmp_path):
    path = tmp_path / "bg.npy"
    np.save(path, np.arange(4))
    calls = []

    def load(p):
        calls.append(p)
        return np.load(p)

    v1, hit1 = cached(str(path), load, kind="t")
    v2, hit2 = cached(str(path), load, kind="t")
    assert (hit1, hit2) == (False, True) and len(calls) == 1 and v2 is v1
    np.save(path, np.arange(5))  # rewritten: size (and mtime) change
    os.utime(path, ns=(1, 1))
    v3, hit3 = cached(str(path), load, kind="t")
    assert not hit3 and len(v3) == 5 and len(calls) == 2


def test_merge_tables_is_ordered_concatenation():
    a = {"t": np.array([1, 2]), "log": [("a",)]}
    b = {"t": np.array([3]), "log": [("b",)]}
    c = {"t": np.array([4, 5]), "log": [("c",)]}
    left = merge_tables(merge_tables(a, b), c)
    right = merge_tables(a, merge_tables(b, c))
    assert left["t"].tolist() == right["t"].tolist() == [1, 2, 3, 4, 5]
    assert left["log"] == right["log"] == [("a",), ("b",), ("c",)]
    with pytest.raises(Exception, match="cannot merge"):
        merge_tables(a, {"t": np.array([1])})


@pytest.mark.parametrize("rows, parts", [(10, 4), (3, 8), (512, 4), (1, 1)])
def test_split_rows_covers_all_rows(rows, parts):
    bands = split_rows(rows, parts)
    assert bands[0][0] == 0 and bands[-1][1] == rows
    assert all(b[1] > b[0] for b in bands)
    assert all(x[1] == y[0] for x, y in zip(bands, bands[1:]))
    assert len(bands) == min(rows, parts)


def test_is_series():
    assert is_series("/d/%n/stem_%06d.tif") and is_series("a_%d.tif")
    assert not is_series("/d/%n/ff_000001.ge3") and not is_series("/x%d/f.ge3")


def test_writers_round_trip(tmp_path):
    t = np.zeros(3, NF_PIXEL_DTYPE)
    t["frame"], t["y"], t["intensity"] = [0, 1, 2], [5, 6, 7], [10, 20, 30]
    path = write_h5(str(tmp_path / "sub" / "r.h5"), {"spots": t}, {"NrPixelsY": 8, "X": "a"},
                    {"workflow": "test"})
    import h5py
    with h5py.File(path) as f:
        assert np.array_equal(f["spots"][()], t)
        assert f.attrs["NrPixelsY"] == 8 and f.attrs["workflow"] == "test"
    csv = write_csv(str(tmp_path / "r.csv"), t)
    lines = open(csv).read().splitlines()
    assert lines[0] == "distance,frame,y,z,intensity,label" and lines[3] == "0,2,7,0,30,0"
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_score_counts_matches_and_false_detections():
    from kernels.synth import TRUTH_DTYPE
    from hedm.output import NF_CENTROID_DTYPE
    from hedm.synth import score

    truth = np.zeros(2, TRUTH_DTYPE)
    truth["first_frame"], truth["n_frames"] = [0, 1], [2, 1]
    truth["row"], truth["col"], truth["snr"] = [10, 30], [10, 30], [20, 20]
    found = np.zeros(3, NF_CENTROID_DTYPE)
    found["frame"], found["z"], found["y"] = [0, 1, 1], [10.5, 10, 50], [10, 10.4, 50]
    s = score(truth, found)
    # planted: spot 0 in frames 0 and 1, spot 1 in frame 1 -> 3; found spot 0 twice
    assert (s["planted"], s["recovered"], s["found"], s["false"]) == (3, 2, 3, 1)


def test_output_file_renames_on_success_and_leaves_nothing_on_error(tmp_path):
    from hedm.common import output_file

    target = tmp_path / "out.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with output_file(str(target)) as fh:
            fh.write("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    with output_file(str(target)) as fh:
        fh.write("a,b\r\nnew\n")               # as written: no newline translation
    assert target.read_bytes() == b"a,b\r\nnew\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()
    with output_file(str(tmp_path / "x.npy"), binary=True) as fh:
        np.save(fh, np.arange(3))
    assert np.array_equal(np.load(tmp_path / "x.npy"), np.arange(3))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_output_file_follows_no_link_and_uses_no_predictable_name(tmp_path):
    """The old writer's temporary name was ``path.tmp-PID``: a link planted there sent the
    output to the link's target. Now the name is unpredictable and created O_EXCL|O_NOFOLLOW,
    and a link at the output itself is refused, its target left untouched."""
    from core.localfs import UnsafePathError
    from hedm.common import output_file

    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "out.json"
    os.symlink(victim, f"{target}.tmp-{os.getpid()}")
    with output_file(str(target)) as fh:
        fh.write("new")
    assert target.read_text() == "new" and victim.read_text() == "keep"
    os.unlink(f"{target}.tmp-{os.getpid()}")
    os.unlink(target)
    os.symlink(victim, target)
    with pytest.raises(UnsafePathError, match="symlink"):
        with output_file(str(target)) as fh:
            fh.write("new")
    assert victim.read_text() == "keep" and os.path.islink(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "victim"]
