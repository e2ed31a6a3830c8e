"""Planning: spec → manifest rules (serial; globbing on one process)."""
import os

import pytest

from hooks import parse_spec
from stager.errors import PlanError
from stager.planning.plan import expand_dest
from stager.planning import build_plan as build_manifest
from stager.planning.sources import destination_for, static_prefix


def write(path, data=b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def plan(text, base):
    return build_manifest(parse_spec(text, path="t.hook", env={"HOME": str(base)},
                                     base_dir=str(base)))


@pytest.fixture
def fig6(tmp_path_factory):
    # Figure 6 stages ~/dataset-1 to /tmp: the home directory must not be under /tmp
    # (a destination may not contain a source), so it is made in /var/tmp
    import shutil
    import tempfile
    from pathlib import Path
    base = Path(tempfile.mkdtemp(prefix="mpistage-fig6-", dir="/var/tmp"))
    yield _fig6_data(base)
    shutil.rmtree(base, ignore_errors=True)


def _fig6_data(tmp_path):
    d = tmp_path / "dataset-1"
    write(d / "a.cfg", b"alpha")
    write(d / "b.cfg", b"bravo!")
    write(d / "bulk" / "file1.index", b"index")
    write(d / "bulk" / "p.bin", b"p" * 1000)
    write(d / "bulk" / "q.bin", b"q" * 3000)
    os.chmod(d / "bulk" / "q.bin", 0o600)
    os.utime(d / "a.cfg", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    return tmp_path


FIG6 = """broadcast to /tmp files {
  ~/dataset-1/*.cfg
}
broadcast to /tmp/bulk files {
  ~/dataset-1/bulk/file1.index
  ~/dataset-1/bulk/*.bin
}
"""


def test_figure6_manifest(fig6):
    m = plan(FIG6, fig6)
    src = str(fig6 / "dataset-1")
    assert [(e.source, e.dest, e.size, e.block) for e in m.units("files")] == [
        (f"{src}/a.cfg", "/tmp/a.cfg", 5, 0),
        (f"{src}/b.cfg", "/tmp/b.cfg", 6, 0),
        (f"{src}/bulk/file1.index", "/tmp/bulk/file1.index", 5, 1),
        (f"{src}/bulk/p.bin", "/tmp/bulk/p.bin", 1000, 1),
        (f"{src}/bulk/q.bin", "/tmp/bulk/q.bin", 3000, 1),
    ]
    assert m.total_bytes == 4016
    assert [(b.files, b.bytes) for b in m.blocks] == [(2, 11), (3, 4005)]
    by_name = {os.path.basename(e.source): e for e in m.units("files")}
    assert by_name["q.bin"].mode == 0o600
    assert by_name["a.cfg"].mtime_ns == 1_600_000_000_123_456_789
    from stager.commands.plan import _largest
    assert _largest(m).source.endswith("q.bin")


def test_recursive_pattern_keeps_relative_layout(tmp_path):
    write(tmp_path / "run" / "a" / "1.tif")
    write(tmp_path / "run" / "a" / "b" / "2.tif")
    write(tmp_path / "run" / "3.tif")
    write(tmp_path / "run" / "a" / "skip.txt")
    m = plan("broadcast to /dst/%n files { run/**/*.tif }", tmp_path)
    assert [e.dest for e in m.units("files")] == [
        "/dst/%n/3.tif", "/dst/%n/a/1.tif", "/dst/%n/a/b/2.tif"]
    e = m.units("files")[0]
    assert expand_dest(e.dest, m.blocks[e.block].dest, "node1") == "/dst/node1/3.tif"


def test_plain_pattern_flattens_to_basename(tmp_path):
    write(tmp_path / "x" / "one" / "f.dat")
    write(tmp_path / "x" / "two" / "g.dat")
    m = plan("broadcast to /dst files { x/*/*.dat }", tmp_path)
    assert [e.dest for e in m.units("files")] == ["/dst/f.dat", "/dst/g.dat"]


def test_two_sources_one_destination_is_an_error_naming_both(tmp_path):
    write(tmp_path / "x" / "one" / "f.dat")
    write(tmp_path / "x" / "two" / "f.dat")
    with pytest.raises(PlanError) as info:
        plan("broadcast to /dst files {\n x/*/f.dat\n}", tmp_path)
    msg = str(info.value)
    assert msg.startswith("t.hook:2:2: ")
    assert str(tmp_path / "x/one/f.dat") in msg and str(tmp_path / "x/two/f.dat") in msg
    assert "/dst/f.dat" in msg


def test_conflict_across_blocks(tmp_path):
    write(tmp_path / "a" / "f")
    write(tmp_path / "b" / "sub" / "f")
    with pytest.raises(PlanError, match="would both land at /d/sub/f"):
        plan("broadcast to /d/sub files { a/f }\nbroadcast to /d files { b/sub }", tmp_path)


def test_same_file_twice_is_staged_once(tmp_path):
    write(tmp_path / "a.cfg")
    m = plan("broadcast to /d files { a.cfg *.cfg }", tmp_path)
    assert len(m.units("files")) == 1


def test_no_match_is_an_error_unless_optional(tmp_path):
    with pytest.raises(PlanError) as info:
        plan("broadcast to /d files {\n  nothing/*.tif\n}", tmp_path)
    assert str(info.value).startswith("t.hook:2:3: 'nothing/*.tif' matches no file")
    m = plan("broadcast to /d files {\n ?nothing/*.tif\n}", tmp_path)
    assert m.units("files") == ()


def test_directory_is_copied_recursively(tmp_path):
    write(tmp_path / "params" / "a.txt", b"a")
    write(tmp_path / "params" / "deep" / "b.txt", b"bb")
    m = plan("broadcast to /d files { params }", tmp_path)
    assert [(e.dest, e.size) for e in m.units("files")] == [
        ("/d/params/a.txt", 1), ("/d/params/deep/b.txt", 2)]


def test_dangling_symlink_is_an_error(tmp_path):
    os.symlink(tmp_path / "missing", tmp_path / "link")
    with pytest.raises(PlanError, match="cannot stat"):
        plan("broadcast to /d files { link }", tmp_path)


def test_special_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(PlanError, match="not a regular file"):
        plan("broadcast to /d files { fifo }", tmp_path)


def test_h5_and_file_blocks_are_planned_together(tmp_path):
    # one plan covers every kind: the h5 block's output and bytes count like any file's
    import h5py
    import numpy as np

    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = np.arange(1000, dtype=np.int64)
    m = plan("broadcast to /d h5 { a.h5:/x }\nbroadcast to /e files { a.h5 }", tmp_path)
    assert [(b.kind, b.files) for b in m.blocks] == [("h5", 1), ("files", 1)]
    assert m.blocks[0].data_bytes == 8000 and m.blocks[0].bytes > 8000  # + HDF5 metadata
    assert [e.dest for e in m.units("files")] == ["/e/a.h5"]
    assert [f.dest for f in m.units("h5")] == ["/d/a.h5"]
    assert m.n_outputs == 2 and m.total_bytes == m.blocks[0].bytes + m.blocks[1].bytes


def test_globs_run_once_per_pattern(tmp_path):
    for i in range(5):
        write(tmp_path / f"f{i}")
    calls = []

    def counting_stat(p):
        calls.append(p)
        return os.stat(p)

    spec = parse_spec("broadcast to /d files { f* }", base_dir=str(tmp_path))
    m = build_manifest(spec, stat=counting_stat)
    # one stat per file, and no more: metadata calls are what a parallel filesystem charges for
    files = m.units("files")
    assert len(files) == 5 and sorted(calls) == sorted(e.source for e in files)


@pytest.mark.parametrize("pattern,prefix", [
    ("/a/b/**/*.tif", "/a/b"), ("/a/*/c", "/a"), ("/a/b/c.tif", "/a/b"), ("/*.x", "/"),
    ("/a/b[12]/c", "/a"),
])
def test_static_prefix(pattern, prefix):
    assert static_prefix(pattern) == prefix


def test_destination_for_is_pure():
    assert destination_for("/d", "/s/**/*.x", "/s/a/b.x") == "/d/a/b.x"
    assert destination_for("/d", "/s/*/*.x", "/s/a/b.x") == "/d/b.x"
    assert destination_for("/d", "/s/dir", "/s/dir", within="k/l") == "/d/dir/k/l"


def test_shortfalls_sum_roots_on_one_filesystem():
    from stager.nodelocal.space import RootNeed, shortfalls

    mib = 1 << 20
    rows = [RootNeed("h", 1, "node0", "/d/node0", 5 * mib, 8 * mib),
            RootNeed("h", 1, "node1", "/d/node1", 5 * mib, 8 * mib),
            RootNeed("h", 2, "node0", "/other", 1 * mib, 8 * mib),
            RootNeed("g", 1, "node2", "/d/node2", 5 * mib, 8 * mib)]
    short = shortfalls(rows)
    assert short == ["node node0 -> /d/node0 (5.0 MiB), node node1 -> /d/node1 (5.0 MiB): "
                     "needs 10.0 MiB on host h but only 8.0 MiB is free (short by 2.0 MiB)"]


def test_allocated_rounds_up_to_blocks():
    from stager.nodelocal.space import allocated

    assert [allocated(n, 4096) for n in (0, 1, 4096, 4097)] == [0, 4096, 4096, 8192]


def test_a_matched_directory_and_its_files_are_stated_once_each(tmp_path):
    write(tmp_path / "params" / "a.txt")
    write(tmp_path / "params" / "sub" / "b.txt")
    calls = []

    def counting_stat(p):
        calls.append(p)
        return os.stat(p)

    spec = parse_spec("broadcast to /d files { params }", base_dir=str(tmp_path))
    build_manifest(spec, stat=counting_stat)
    assert sorted(calls) == sorted([str(tmp_path / "params"), str(tmp_path / "params" / "a.txt"),
                                    str(tmp_path / "params" / "sub" / "b.txt")])
