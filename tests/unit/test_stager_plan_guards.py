"""Planning guards (serial): disjoint sources and destinations, links under ``**``, identity.

A destination equal to, inside or containing a source is
refused before anything is written (naming both); ``**`` and a matched directory
never follow a link to a directory, so two links to a parent plan in bounded time,
and a symlink loop is one short message; a same-size rewrite with the old mtime
restored changes the identity the stager compares.
"""
from __future__ import annotations

import os
import time

import pytest

from hooks import parse_spec
from stager.errors import PlanError
from stager.planning import build_plan
from stager.planning.sources import SourceArea, changed, glob_matches, overlap, source_id


def plan(text, base):
    return build_plan(parse_spec(text, path=str(base / "t.hook"), env={"HOME": str(base)},
                                 base_dir=str(base)))


def write(p, data=b"x"):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


# -- disjoint sources and destinations (item 1) ------------------------------------------------

@pytest.mark.parametrize("dest, src, how", [
    ("data", "data/*.tif", "is the directory holding"),         # copies over the originals
    ("data/out", "data/**/*.tif", "is inside"),                # inside a ** tree
    ("data/out", "data/*", "is matched by"),                   # the next run would match it
    ("data/out/deeper", "data/*", "is inside a path matched by"),
    ("data/x.tif", "data/x.tif", "is matched by"),
    ("data/sub", "data/sub", "is"),                            # a matched directory
    ("", "data/*.tif", "contains"),                            # containing the sources
    ("data/sub/deeper", "data/sub", "is inside"),
])
def test_destination_overlapping_a_source_is_refused_naming_both(tmp_path, dest, src, how):
    write(tmp_path / "data" / "x.tif", b"original")
    write(tmp_path / "data" / "sub" / "y.tif", b"original")
    text = f"broadcast to {tmp_path}/{dest} files {{\n  {tmp_path}/{src}\n}}\n"
    with pytest.raises(PlanError) as info:
        plan(text, tmp_path)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path}/t.hook:1:14: destination ") and f" {how} " in msg, msg
    assert "choose a destination outside every source" in msg
    assert (tmp_path / "data" / "x.tif").read_bytes() == b"original"


def test_destination_next_to_the_sources_is_fine(tmp_path):
    write(tmp_path / "data" / "x.tif")
    p = plan(f"broadcast to {tmp_path}/staged/%n files {{\n  {tmp_path}/data/*.tif\n}}\n"
             f"broadcast to {tmp_path}/data/out files {{\n  {tmp_path}/data/*.tif\n}}\n",
             tmp_path)
    assert len(p.units("files")) == 2 and p.areas


def test_a_node_destination_inside_a_source_tree_is_refused_for_every_node(tmp_path):
    write(tmp_path / "run" / "a.tif")
    with pytest.raises(PlanError, match="is inside the source tree"):
        plan(f"broadcast to {tmp_path}/run/%n files {{\n  {tmp_path}/run/**/*.tif\n}}\n",
             tmp_path)


def test_destination_reached_through_a_symlink_is_compared_by_its_real_path(tmp_path):
    write(tmp_path / "data" / "x.tif")
    os.symlink(tmp_path / "data", tmp_path / "alias")
    with pytest.raises(PlanError, match="is the directory holding"):
        plan(f"broadcast to {tmp_path}/alias files {{\n  {tmp_path}/data/*.tif\n}}\n", tmp_path)


def test_overlap_rules_are_pure():
    tree = SourceArea("tree", "/d/run", "t:1:1")
    assert overlap("/d/run", tree) == "is"
    assert overlap("/d/run/x", tree) == "is inside"
    assert overlap("/d", tree) == "contains"
    assert overlap("/d/runs", tree) is None
    pat = SourceArea("pattern", "/d/*", "t:2:3")
    assert overlap("/d/out/x", pat) == "is inside a path matched by"
    assert overlap("/d/.hidden", pat) is None  # glob's * skips hidden names
    assert overlap("/e/out", pat) is None


# -- links under ** and in matched directories (item 7) ----------------------------------------

def test_links_to_a_parent_under_double_star_are_not_followed_and_planning_ends(tmp_path):
    write(tmp_path / "tree" / "a" / "f.tif")
    write(tmp_path / "tree" / "b" / "g.tif")
    os.symlink(tmp_path / "tree", tmp_path / "tree" / "a" / "up")   # two links to a parent:
    os.symlink(tmp_path / "tree", tmp_path / "tree" / "b" / "up2")  # glob would never end
    outside = write(tmp_path / "outside" / "h.tif")
    os.symlink(outside.parent, tmp_path / "tree" / "b" / "out")     # would pull a tree in
    t0 = time.monotonic()
    p = plan(f"broadcast to {tmp_path}/dst files {{\n  {tmp_path}/tree/**/*.tif\n}}\n", tmp_path)
    assert time.monotonic() - t0 < 5
    assert sorted(os.path.relpath(e.source, tmp_path) for e in p.units("files")) == \
        ["tree/a/f.tif", "tree/b/g.tif"]
    assert sorted(os.path.basename(s) for s in p.skipped_links) == ["out", "up", "up2"]


def test_a_matched_directory_follows_the_same_rule(tmp_path):
    write(tmp_path / "params" / "p.txt")
    os.symlink(tmp_path / "params", tmp_path / "params" / "loop")
    p = plan(f"broadcast to {tmp_path}/dst files {{\n  {tmp_path}/params\n}}\n", tmp_path)
    assert [os.path.basename(e.source) for e in p.units("files")] == ["p.txt"]
    assert [os.path.basename(s) for s in p.skipped_links] == ["loop"]


def test_double_star_matches_what_glob_matches_without_links(tmp_path):
    import glob
    for rel in ("x.tif", "a/y.tif", "a/b/z.tif", ".hidden/w.tif", "a/.h.tif", "a/b/n.txt"):
        write(tmp_path / "t" / rel)
    for pattern in ("t/**/*.tif", "t/**", "t/a/**/z.tif", "t/**/b/*"):
        full = f"{tmp_path}/{pattern}"
        want = sorted(p.rstrip("/") for p in glob.glob(full, recursive=True))
        assert [m.rstrip("/") for m in glob_matches(full)] == want, pattern


def test_a_symlink_loop_is_one_short_message(tmp_path):
    os.symlink(tmp_path / "b.tif", tmp_path / "a.tif")
    os.symlink(tmp_path / "a.tif", tmp_path / "b.tif")
    with pytest.raises(PlanError) as info:
        plan(f"broadcast to {tmp_path}/dst files {{\n  {tmp_path}/*.tif\n}}\n", tmp_path)
    msg = str(info.value)
    assert "symbolic link loop" in msg and len(msg) < 300 and "\n" not in msg, msg


# -- source identity (item 6) -----------------------------------------------------------------

def test_same_size_rewrite_with_the_old_mtime_restored_changes_the_identity(tmp_path):
    p = write(tmp_path / "s.bin", b"a" * 1000)
    before = source_id(os.stat(p))
    st = os.stat(p)
    time.sleep(0.01)
    p.write_bytes(b"b" * 1000)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(p)
    assert (after.st_size, after.st_mtime_ns) == before[:2]  # what was compared before
    diff = changed(before, after)
    assert diff is not None and "ctime_ns" in diff
    assert changed(before[:2] + (-1, -1), after) is None  # unknown fields are not compared
