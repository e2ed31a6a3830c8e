"""``core.outputs``: no output over an input, and how the project's results are told
from other files (serial, real files)."""
from __future__ import annotations

import json
import os

import pytest

from core.errors import OutputError
from core.outputs import check_outputs, mark, ours, run_directory

h5py = pytest.importorskip("h5py")


def _h5(path, marked=True, **attrs):
    with h5py.File(path, "w") as f:
        f["x"] = [1]
        if marked:
            mark(f.attrs)
        f.attrs.update(attrs)
    return str(path)


def test_an_output_that_is_an_input_or_inside_one_is_refused_naming_both(tmp_path):
    src = _h5(tmp_path / "scan.h5", marked=False)
    with pytest.raises(OutputError, match=f"output {src} is the input {src}"):
        check_outputs([src], [src], overwrite=True)   # --overwrite never covers an input
    link = tmp_path / "alias.h5"
    link.symlink_to(src)
    with pytest.raises(OutputError, match="is the input"):
        check_outputs([str(link)], [src])
    with pytest.raises(OutputError, match="is inside the input directory"):
        check_outputs([str(tmp_path / "sub" / "r.h5")], [str(tmp_path)])
    # a directory that does not exist yet, given as one (trailing /)
    later = str(tmp_path / "later") + "/"
    with pytest.raises(OutputError, match="is inside the input directory"):
        check_outputs([str(tmp_path / "later" / "node0" / "r.h5")], [later])
    check_outputs([str(tmp_path / "out" / "scan.h5")], [src, None])    # beside is fine
    assert issubclass(OutputError, ValueError)      # bad input: the commands exit 2


def test_an_existing_file_not_written_by_mpistage_needs_overwrite(tmp_path):
    foreign = tmp_path / "r.h5"
    _h5(foreign, marked=False)
    with pytest.raises(OutputError, match="exists and was not written by mpistage"):
        check_outputs([str(foreign)], [])
    check_outputs([str(foreign)], [], overwrite=True)
    check_outputs([_h5(tmp_path / "ours.h5")], [])
    check_outputs([str(tmp_path / "new.h5")], [])           # not there yet


def test_what_counts_as_written_by_mpistage(tmp_path):
    assert ours(_h5(tmp_path / "a.h5"))
    assert not ours(_h5(tmp_path / "b.h5", marked=False))
    # results of earlier versions, by their layout
    with h5py.File(tmp_path / "old.h5", "w") as f:
        f["frames_complete"] = [True]
        f.attrs["analysis"] = "sum"
    assert ours(str(tmp_path / "old.h5"))
    assert ours(_h5(tmp_path / "ff.h5", marked=False, workflow="hedm_ff"))
    # JSON records
    (tmp_path / "r.json").write_text(json.dumps({"written_by": "mpistage"}))
    (tmp_path / "x.json").write_text(json.dumps({"scan": "s"}))
    assert ours(str(tmp_path / "r.json")) and not ours(str(tmp_path / "x.json"))
    # side files are ours when the HDF5 result they are named after is
    (tmp_path / "a.csv").write_text("1,2\n")
    (tmp_path / "b.csv").write_text("1,2\n")
    assert ours(str(tmp_path / "a.csv")) and not ours(str(tmp_path / "b.csv"))
    # ... or the name before a last "_word" (hedm.nfreduce's a_binary.npy beside a.h5)
    for name in ("a_binary.npy", "b_binary.npy", "a_2.npy"):
        (tmp_path / name).write_bytes(b"\x93NUMPY")
    assert ours(str(tmp_path / "a_binary.npy"))
    assert not ours(str(tmp_path / "b_binary.npy")) and not ours(str(tmp_path / "a_2.npy"))
    (tmp_path / "c.h5").write_bytes(b"not HDF5")
    assert not ours(str(tmp_path / "c.h5"))


def test_run_directory_is_new_and_private(tmp_path):
    a = run_directory("stem4d-flow", str(tmp_path))
    b = run_directory("stem4d-flow", str(tmp_path))
    assert a != b and os.path.isdir(a) and os.path.isdir(b)
    assert os.path.basename(a).startswith("stem4d-flow-out-")
    assert os.stat(a).st_mode & 0o777 == 0o700
