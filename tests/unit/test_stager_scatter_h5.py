"""``scatter ... h5``, serially: how HDF5 selections are split into frame ranges
(:mod:`stager.kinds.h5.frames`), their names and placement, and ``stager plan --nodes``."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from hooks import parse_spec
from stager.errors import PlanError
from stager.locality import Where
from stager.planning import build_plan
from stager.kinds.h5.frames import range_dest, split, split_rows
from stager.planning.plan import FrameRange
from stager.planning.scatter import node_bytes, placement

h5py = pytest.importorskip("h5py")


def test_split_rows_contiguous_aligned_and_even():
    rng = random.Random(3)
    for _ in range(500):
        frames, parts, align = rng.randint(1, 400), rng.randint(1, 20), rng.choice([1, 2, 4, 7])
        rs = split_rows(frames, parts, align)
        assert rs[0][0] == 0 and rs[-1][1] == frames
        assert all(a[1] == b[0] for a, b in zip(rs, rs[1:]))  # contiguous, no gap or overlap
        assert len(rs) == min(parts, -(-frames // align))
        assert all(lo % align == 0 for lo, _ in rs)            # stored chunks stay whole
        sizes = [hi - lo for lo, hi in rs[:-1]] or [rs[0][1] - rs[0][0]]
        assert max(sizes) - min(sizes) <= align, (frames, parts, align, rs)
    assert split_rows(0, 3) == [] and split_rows(5, 0) == []


def test_frame_range_rows_and_names():
    fr = FrameRange(100, 131, 3)   # frames 100, 103, ..., 130
    assert len(fr) == 11 and 103 in fr and 104 not in fr and 131 not in fr
    assert fr.row(130) == 10
    assert range_dest("/d/%n/scan.h5", FrameRange(0, 250)) == "/d/%n/scan.frames0-250.h5"
    assert range_dest("/d/%n/scan.h5", fr) == "/d/%n/scan.frames100-131.h5"


def _nxmx(path, frames=21, chunk=1, compression=None, omega=True):
    with h5py.File(path, "w") as f:
        e = f.create_group("entry")
        e.attrs["NX_class"] = "NXentry"
        e.create_dataset("data/data", data=np.arange(frames * 6 * 5, dtype=np.uint16)
                         .reshape(frames, 6, 5), chunks=(chunk, 6, 5), compression=compression)
        if omega:
            e.create_dataset("sample/goniometer/omega", data=np.arange(frames) * 0.5)
        e.create_dataset("instrument/detector/pixel_mask", data=np.zeros((6, 5), np.uint32))
        e["instrument/detector/count_time"] = 0.1


def _plan(tmp_path, body, replicas=1):
    spec = parse_spec(f"scatter to {tmp_path}/out/%n h5 replicas {replicas} {{ {body} }}\n",
                      path=str(tmp_path / "s.hook"))
    return build_plan(spec)


def test_frames_and_per_frame_metadata_split_the_rest_copied_whole(tmp_path):
    _nxmx(tmp_path / "scan.h5")
    plan = _plan(tmp_path, f"{tmp_path}/scan.h5:/entry")
    assert plan.blocks[0].mode == "scatter" and len(plan.units("h5")) == 1  # the split needs nodes
    parts = split(plan, 4)
    names = [p.dest.rsplit("/", 1)[1] for p in parts.units("h5")]
    assert names == ["scan.frames0-5.h5", "scan.frames5-10.h5", "scan.frames10-15.h5",
                     "scan.frames15-21.h5"]
    for p in parts.units("h5"):
        ds = {d.path: d for d in p.datasets}
        a, b = p.frames[:2]
        assert (ds["/entry/data/data"].start, ds["/entry/data/data"].stop) == (a, b)
        om = ds["/entry/sample/goniometer/omega"]    # per-frame: split with the frames
        values = np.frombuffer(om.inline.tobytes(), "<f8")  # raw, in the file type
        assert (om.start, om.stop) == (a, b) and list(values) == [i * 0.5 for i in range(a, b)]
        mask = ds["/entry/instrument/detector/pixel_mask"]
        assert not mask.sliced and mask.rows == 6    # another length: copied whole
        assert ds["/entry/instrument/detector/count_time"].shape == ()
    assert parts.blocks[0].files == 4
    assert split(parts, 4) == parts   # splitting a split plan changes nothing
    # every range on one node, one range per node
    held = placement(parts, 4)
    assert sorted(h for hs in held.values() for h in hs) == [0, 1, 2, 3]
    per = node_bytes(parts, 4)
    assert max(per) - min(per) <= max(p.est_bytes for p in parts.units("h5"))


def test_ranges_keep_stored_chunks_whole(tmp_path):
    _nxmx(tmp_path / "scan.h5", frames=40, chunk=4, compression="gzip")
    parts = split(_plan(tmp_path, f"{tmp_path}/scan.h5:/entry"), 3)
    bounds = [p.frames[:2] for p in parts.units("h5")]
    assert bounds == [(0, 12), (12, 24), (24, 40)]
    assert all(a % 4 == 0 for a, _ in bounds)


def test_fewer_frames_than_nodes_and_a_slice_with_a_step(tmp_path):
    _nxmx(tmp_path / "scan.h5", frames=3, omega=False)
    parts = split(_plan(tmp_path, f"{tmp_path}/scan.h5:/entry/data/data"), 8)
    assert [p.frames for p in parts.units("h5")] == [(0, 1, 1), (1, 2, 1), (2, 3, 1)]
    _nxmx(tmp_path / "big.h5", frames=30, omega=False)
    parts = split(_plan(tmp_path, f"{tmp_path}/big.h5:/entry/data/data[1:30:4]"), 2)
    # frames 1, 5, ..., 29 (8 of them): 4 per node, named by source frame numbers
    assert [p.frames for p in parts.units("h5")] == [(1, 14, 4), (17, 30, 4)]
    assert [p.dest.rsplit("/", 1)[1] for p in parts.units("h5")] == ["big.frames1-14.h5",
                                                             "big.frames17-30.h5"]


def test_an_output_of_one_frame_is_placed_whole_under_its_name(tmp_path):
    # its 2-D mask has more bytes than its one 3-D frame: the stack is still the frames
    _nxmx(tmp_path / "one.h5", frames=1, omega=False)
    parts = split(_plan(tmp_path, f"{tmp_path}/one.h5:/entry"), 4)
    h5 = parts.units("h5")
    assert [p.dest.rsplit("/", 1)[1] for p in h5] == ["one.h5"] and not h5[0].frames


def test_region_references_are_refused_at_planning(tmp_path):
    with h5py.File(tmp_path / "r.h5", "w") as f:
        d = f.create_dataset("data", data=np.zeros((10, 4), np.uint8))
        f.create_dataset("roi", data=[d.regionref[2:4]], dtype=h5py.regionref_dtype)
    with pytest.raises(PlanError, match=r"s.hook:1:1: .*r.h5 holds region references"):
        _plan(tmp_path, f"{tmp_path}/r.h5:/")


def test_where_names_the_holder_of_each_frame(tmp_path):
    _nxmx(tmp_path / "scan.h5", frames=12)
    w = Where(_plan(tmp_path, f"{tmp_path}/scan.h5:/entry", replicas=2), ["a", "b", "c"])
    ranges = w.frame_ranges(str(tmp_path / "scan.h5"))
    assert [(fr.first, fr.stop) for fr, _ in ranges] == [(0, 4), (4, 8), (8, 12)]
    assert all(len(nodes) == 2 for _, nodes in ranges)
    assert sorted(n for _, nodes in ranges for n in nodes) == ["a", "a", "b", "b", "c", "c"]
    with pytest.raises(KeyError, match="frame 12 of"):
        w.frames_at(str(tmp_path / "scan.h5"), 12, "a")


def _plan_cli(*args):
    return subprocess.run([sys.executable, "-m", "stager", "plan", *args],
                          capture_output=True, text=True, timeout=60)


def test_plan_cli_shows_the_ranges_and_bytes_per_node(tmp_path):
    _nxmx(tmp_path / "scan.h5", frames=20)
    spec = tmp_path / "s.hook"
    spec.write_text(f"scatter to {tmp_path}/out/%n h5 {{ {tmp_path}/scan.h5:/entry }}\n")
    r = _plan_cli(str(spec), "--nodes", "2")
    assert r.returncode == 0, r.stderr
    assert f"frames 0..9 of {tmp_path}/scan.h5" in r.stdout
    assert "scan.frames10-20.h5" in r.stdout and "bytes per node on 2 node(s)" in r.stdout
    doc = json.loads(_plan_cli(str(spec), "--nodes", "2", "--json").stdout)
    assert sorted(doc["h5_holders"].values()) == [[0], [1]]
    assert [h["frames"] for h in doc["h5"]] == [[0, 10, 1], [10, 20, 1]]
