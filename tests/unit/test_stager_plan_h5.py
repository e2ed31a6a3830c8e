"""HDF5 selections: entry syntax (checked when the spec is parsed), slices and rank-0
planning (serial, no MPI). ``make_scan`` (tests/h5scan.py) is shared with the MPI staging tests.
"""
import h5py
import numpy as np
import pytest

from hooks import SpecError, parse_spec
from hooks.h5entry import Slice, parse_slice
from stager.errors import PlanError
from stager.planning import build_plan
from stager.kinds.h5.plan import INLINE_BYTES
from tests.h5scan import FRAMES, NX, NY, make_scan


def decoded(a):
    """A planned attribute's value as h5py would read it."""
    if a.values in ("null", "refs"):
        return a.value
    if a.values == "vlen":
        return a.value[()] if a.shape == () else a.value
    dt = h5py.h5t.decode(a.h5type).dtype
    arr = np.frombuffer(np.ascontiguousarray(a.value).tobytes(), dtype=dt).reshape(a.shape or ())
    return arr[()] if a.shape == () else arr


def plan(text, base):
    return build_plan(parse_spec(text, path="t.hook", env={"HOME": str(base)},
                                 base_dir=str(base)))


# -- syntax (parse time) ----------------------------------------------------------

def entry(text, base="/"):
    spec = parse_spec(f"broadcast to /d h5 {{\n  {text}\n}}", path="t.hook", env={},
                      base_dir=base)
    p = spec.blocks[0].patterns[0]
    return p.text, p.selection.path, p.selection.slice


def test_entry_splits_file_path_and_slice():
    assert entry("/b/scan42.h5:/entry/data/data[0:720]") == (
        "/b/scan42.h5", "/entry/data/data", Slice(0, 720))
    assert entry("/b/scan4?.h5:/entry/instrument/*") == (
        "/b/scan4?.h5", "/entry/instrument/*", None)


def test_root_entry_survives_path_normalisation(tmp_path):
    assert entry("s.h5:/", str(tmp_path))[:2] == (str(tmp_path / "s.h5"), "/")


@pytest.mark.parametrize("text, want", [
    ("/d[0:720]", Slice(0, 720)), ("/d[::10]", Slice(None, None, 10)),
    ("/d[-100:]", Slice(-100, None)), ("/d[5:6]", Slice(5, 6)), ("/d[0-9]", None),
    ("/d[5]", None), ("/d", None)])
def test_parse_slice(text, want):
    assert parse_slice(text) == want


@pytest.mark.parametrize("raw, match, column", [
    ("/b/s.h5", "names no object inside the file", 10),
    ("/b/s.h5:/d[0:x]", "bad slice", 13),
    ("/b/s.h5:/d[1:2:0]", "step 0", 13),
    ("/b/s.h5:/d[::-1]", "step -1", 13),
    ("/b/s.h5:/**/data", r"'\*\*' is not supported", 12),
    ("'/b/s.h5:/d[0:x]'", "bad slice", 14),
])
def test_bad_entries_are_spec_errors_at_line_and_column(raw, match, column):
    with pytest.raises(SpecError, match=match) as info:
        parse_spec(f"broadcast to /d h5 {{\n  {raw}\n}}", path="t.hook", env={})
    assert (info.value.line, info.value.column) == (2, column)
    assert str(info.value).startswith(f"t.hook:2:{column}: ")
    assert info.value.render().splitlines()[-1] == "    " + " " * (column - 1) + "^"


@pytest.mark.parametrize("sl, n, want", [
    (Slice(0, 720), 1000, (0, 720, 1)), (Slice(-100, None), 1000, (900, 1000, 1)),
    (Slice(None, None, 10), 25, (0, 21, 10)), (Slice(3, 10, 3), 10, (3, 10, 3)),
    (Slice(None, -1), 5, (0, 4, 1)), (Slice(0, 5), 5, (0, 5, 1))])
def test_slice_resolution(sl, n, want):
    assert sl.resolve(n) == want
    start, stop, step = want
    assert list(range(start, stop, step)) == list(range(n))[slice(sl.start, sl.stop, sl.step)]


@pytest.mark.parametrize("sl, match", [
    (Slice(0, 11), "stop 11 is out of range"), (Slice(-11, None), "start -11 is out of range"),
    (Slice(5, 5), "selects no frame"), (Slice(7, 3), "selects no frame")])
def test_slice_out_of_range(sl, match):
    with pytest.raises(ValueError, match=match):
        sl.resolve(10)


# -- planning -------------------------------------------------------------------

@pytest.fixture
def scan(tmp_path):
    make_scan(tmp_path / "scan42.h5")
    return tmp_path


def test_dataset_slice_is_described(scan):
    p = plan("broadcast to /tmp/%n/s h5 { scan42.h5:/entry/data/data[2:20:3] }", scan)
    (f,) = p.units("h5")
    assert f.dest == "/tmp/%n/s/scan42.h5" and f.source == str(scan / "scan42.h5")
    (d,) = f.datasets
    assert (d.path, d.start, d.stop, d.step, d.rows) == ("/entry/data/data", 2, 18, 3, 6)
    assert d.out_shape == (6, NY, NX) and d.chunks == (1, NY, NX)
    assert d.dtype == np.uint16 and d.nbytes == 6 * NY * NX * 2
    assert [x.name for x in d.filters] == ["shuffle", "deflate"]
    assert {a.name for a in d.attrs} == {"units", "exposure_s"}
    assert d.selection == "/entry/data/data[2:18:3]" and d.inline is None
    # ancestors come with their attributes (NeXus classes survive)
    assert [g.path for g in f.groups] == ["/", "/entry", "/entry/data"]
    assert dict((a.name, decoded(a)) for a in f.groups[2].attrs)["NX_class"] == b"NXdata"
    assert 0 < d.est_bytes and f.key.endswith(":/entry/data/data[2:18:3]")


def test_whole_dataset_and_group_copy(scan):
    p = plan("broadcast to /d h5 { scan42.h5:/entry/data/data scan42.h5:/entry/instrument }", scan)
    (f,) = p.units("h5")
    paths = [d.path for d in f.datasets]
    assert paths == ["/entry/data/data", "/entry/instrument/detector/distance",
                     "/entry/instrument/detector/flatfield", "/entry/instrument/name"]
    whole = f.datasets[0]
    assert (whole.start, whole.stop, whole.sliced) == (0, FRAMES, False)
    assert f.links[0].path == "/entry/instrument/detector/data"
    assert f.links[0].target == "/entry/data/data"
    small = {d.path: d for d in f.datasets}
    assert small["/entry/instrument/name"].inline[()] == b"1-ID-E"
    assert small["/entry/instrument/detector/flatfield"].inline.shape == (NY, NX)
    assert NY * NX * 4 <= INLINE_BYTES


def test_internal_glob_and_file_glob(scan):
    make_scan(scan / "scan43.h5", seed=1)
    p = plan("broadcast to /d h5 { scan4?.h5:/entry/instrument/* }", scan)
    assert [f.dest for f in p.units("h5")] == ["/d/scan42.h5", "/d/scan43.h5"]
    assert [d.path for d in p.units("h5")[0].datasets] == [
        "/entry/instrument/detector/distance", "/entry/instrument/detector/flatfield",
        "/entry/instrument/name"]
    assert p.blocks[0].files == 2


def test_same_selection_twice_is_staged_once(scan):
    p = plan("broadcast to /d h5 { scan42.h5:/entry/data/data scan42.h5:/entry/data }", scan)
    assert [d.path for d in p.units("h5")[0].datasets] == ["/entry/data/data"]


@pytest.mark.parametrize("entry, match", [
    ("scan42.h5:/entry/data/nope", r"matches no object in .*scan42.h5 \(/entry/data holds: data\)"),
    ("scan42.h5:/entry/nope/data", r"matches no object .*\(/entry holds: angles, data,"),
    ("scan42.h5:/entry/data/data[0:25]", r"slice \[0:25\] out of range: stop 25 is out of range"),
    ("scan42.h5:/entry/data/data[-30:]", "start -30 is out of range"),
    ("scan42.h5:/entry/instrument[0:2]", "is a group, not a dataset"),
    ("scan42.h5:/entry/angles/x", "is a dataset, not a group"),
    ("scan42.h5:/entry/instrument/name[0:1]", "is a scalar dataset"),
    ("nothere.h5:/entry", "matches no file"),
    ("notes.txt:/entry", "cannot open .* as HDF5"),
])
def test_bad_selections_are_refused(scan, entry, match):
    (scan / "notes.txt").write_text("not hdf5")
    with pytest.raises(PlanError, match=match) as info:
        plan(f"broadcast to /d h5 {{\n  {entry}\n}}", scan)
    assert str(info.value).startswith("t.hook:2:3: ")


def test_optional_entry_may_match_nothing(scan):
    p = plan("broadcast to /d h5 { ?scan42.h5:/nothing ?none.h5:/x scan42.h5:/entry/angles }",
             scan)
    assert [d.path for d in p.units("h5")[0].datasets] == ["/entry/angles"]


def test_conflicting_selections_of_one_dataset(scan):
    with pytest.raises(PlanError, match=r"conflicts with /entry/data/data\[0:4:1\]"):
        plan("broadcast to /d h5 { scan42.h5:/entry/data/data[0:4] "
             "scan42.h5:/entry/data/data[4:8] }", scan)


def test_external_link_is_followed_or_refused_naming_its_target(scan):
    with h5py.File(scan / "master.h5", "w") as f:
        f["entry/data/data_000001"] = h5py.ExternalLink("scan42.h5", "/entry/data/data")
    p = plan("broadcast to /d h5 { master.h5:/entry/data }", scan)
    (d,) = p.units("h5")[0].datasets
    assert (d.path, d.read_file, d.read_path, d.origin) == (
        "/entry/data/data_000001", str(scan / "scan42.h5"), "/entry/data/data", "external")
    assert [x[0] for x in p.units("h5")[0].linked] == [str(scan / "scan42.h5")]
    with h5py.File(scan / "master.h5", "a") as f:
        f["entry/data/data_000002"] = h5py.ExternalLink("gone.h5", "/entry/data/data")
    with pytest.raises(PlanError, match=r"/entry/data/data_000002 is an external link to "
                                        r"gone.h5:/entry/data/data, and gone.h5 does not exist"):
        plan("broadcast to /d h5 { master.h5:/entry/data }", scan)


def test_reference_to_an_object_not_staged_is_refused(tmp_path):
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f["a"] = np.arange(3)
        f["g/b"] = np.arange(2)
        f.create_dataset("refs", data=np.array([f["a"].ref], dtype=h5py.ref_dtype))
    with pytest.raises(PlanError, match=r"refs\[0\] refers to /a, which this block does not "
                                        "stage"):
        plan("broadcast to /d h5 { r.h5:/refs }", tmp_path)
    p = plan("broadcast to /d h5 { r.h5:/refs r.h5:/a }", tmp_path)
    refs = {d.path: d for d in p.units("h5")[0].datasets}["/refs"]
    assert refs.values == "refs" and [t.path for t in refs.inline] == ["/a"]


def test_compound_dataset_is_supported(scan):
    p = plan("broadcast to /d h5 { scan42.h5:/entry/log[0:4] }", scan)
    d = p.units("h5")[0].datasets[0]
    vals = np.frombuffer(d.inline.tobytes(), dtype=h5py.h5t.decode(d.h5type).dtype)
    assert d.dtype.names == ("t", "i") and list(vals["i"]) == [0, 1, 2, 3]


def test_same_basename_from_two_directories_conflicts(scan):
    (scan / "b").mkdir()
    make_scan(scan / "b" / "scan42.h5")
    with pytest.raises(PlanError, match="would both land at /d/scan42.h5"):
        plan("broadcast to /d h5 { scan42.h5:/entry/angles b/scan42.h5:/entry/angles }", scan)


def test_whole_file_entry(tmp_path):
    with h5py.File(tmp_path / "small.h5", "w") as f:
        f.attrs["title"] = "t"
        f["a/b"] = np.arange(5)
        f["c"] = 1.5
    p = plan("broadcast to /d h5 { small.h5:/ }", tmp_path)
    (f,) = p.units("h5")
    assert [d.path for d in f.datasets] == ["/a/b", "/c"]
    assert [g.path for g in f.groups] == ["/", "/a"]
    assert decoded(f.groups[0].attrs[0]) == b"t"


def _lzo_file(path):
    # An optional filter may be recorded without its plugin (HDF5 skips it when writing).
    # 305 (LZO) is in no package installed here.
    from h5py import h5d, h5p, h5s, h5t, h5z
    with h5py.File(path, "w") as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk((1, 4))
        dcpl.set_filter(305, h5z.FLAG_OPTIONAL, (0, 2))
        h5d.create(f.id, b"x", h5t.NATIVE_UINT16, h5s.create_simple((3, 4)), dcpl=dcpl)


def test_unavailable_filter_is_one_planning_error_naming_it(tmp_path):
    _lzo_file(tmp_path / "bs.h5")
    with pytest.raises(PlanError, match=r"bs.h5:/x: HDF5 filter 305 \(LZO\) is not available"
                                        r".*HDF5_PLUGIN_PATH.*'files' block") as info:
        plan("broadcast to /d h5 { bs.h5:/x }", tmp_path)
    assert str(info.value).startswith("t.hook:1:22: ")


def test_missing_filter_advice_for_an_hdf5plugin_filter():
    from stager.kinds.h5.filters import missing_advice
    msg = missing_advice(32008, "bitshuffle")
    # hdf5plugin is installed here: the advice must not be the broken HDF5_PLUGIN_PATH one
    assert "32008 (bitshuffle)" in msg and "hdf5plugin's plugin folder" not in msg


def test_refused_output_leaves_no_temporary_file(tmp_path):
    # H5Output raising in its constructor is never aborted by its caller: it must not
    # leave its temporary HDF5 file in the node's destination directory.
    from dataclasses import replace

    from stager.errors import TransferError
    from stager.kinds.h5.types import Filter
    from stager.kinds.h5.write import H5Output
    with h5py.File(tmp_path / "g.h5", "w") as f:
        f.create_dataset("x", data=np.arange(12).reshape(3, 4), chunks=(1, 4),
                         compression="gzip")
    p = plan("broadcast to /d h5 { g.h5:/x }", tmp_path)
    d = replace(p.units("h5")[0].datasets[0], filters=(Filter(305, 1, (0, 2), "LZO", (0, 2)),))
    fp = replace(p.units("h5")[0], datasets=(d,))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(TransferError, match=r"g.h5:/x uses HDF5 filter 305 \(LZO\)"):
        H5Output(fp, str(out_dir / "g.h5"))
    assert list(out_dir.iterdir()) == []
