"""stager drain: the pure helpers (serial)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stager.errors import TransferError
from core import checksum, localfs
from stager.stageout import (
    DrainFile,
    DrainReport,
    NodeDrain,
    list_results,
    merge_conflicts,
    targets,
)

# ---------------------------------------------------------------- serial, pure


def test_list_results_sorted_relative_and_skips_temp_files(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.h5").write_bytes(b"12345")
    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / f".a.txt{localfs.TEMP_MARK}abc").write_bytes(b"partial")
    files = list_results(str(tmp_path))
    assert files == [DrainFile("a.txt", 0), DrainFile("b/x.h5", 5)]


def test_list_results_refuses_symlinks(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(TransferError, match="link is a symlink"):
        list_results(str(tmp_path))


def test_list_results_missing_and_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list_results(str(tmp_path / "nope"))
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(TransferError, match="not a directory"):
        list_results(str(tmp_path / "f"))


def test_list_results_fails_on_a_directory_it_cannot_list(tmp_path: Path) -> None:
    # A directory os.walk cannot scan (here: its path exceeds PATH_MAX, which even root
    # cannot list by name) must fail the listing, not leave its results silently behind.
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(18):  # 18 x 256 characters > PATH_MAX (4096)
            os.mkdir("d" * 255, dir_fd=fd)
            nxt = os.open("d" * 255, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("result.h5", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    finally:
        os.close(fd)
    with pytest.raises(TransferError, match="cannot list results in .*would not be drained"):
        list_results(str(tmp_path))


def test_list_results_leaves_files_of_others_and_files_not_written_by_the_job(
        tmp_path: Path) -> None:
    (tmp_path / "s1").mkdir()
    for name in ("s1.h5", "s1.json", "extra.txt", "theirs.txt"):
        (tmp_path / "s1" / name).write_text(name)
    if os.geteuid() == 0:      # chown needs root
        os.chown(tmp_path / "s1" / "theirs.txt", 65534, 65534)
    left: list = []
    got = list_results(str(tmp_path / "s1"), {"s1.h5", "s1.json", "theirs.txt"}, left)
    assert [f.rel for f in got] == ["s1.h5", "s1.json"] + \
        ([] if os.geteuid() == 0 else ["theirs.txt"])
    assert any(x.endswith("extra.txt: not written by this job") for x in left), left
    if os.geteuid() == 0:
        assert any("theirs.txt: owned by uid 65534" in x for x in left), left
    left = []
    assert len(list_results(str(tmp_path / "s1"), None, left)) == \
        (3 if os.geteuid() == 0 else 4)


def test_targets_per_node_and_merged() -> None:
    files = [DrainFile("a", 1), DrainFile("d/b", 2)]
    assert targets("/out", "node3", files, merge=False) == ["/out/node3/a", "/out/node3/d/b"]
    assert targets("/out", "node3", files, merge=True) == ["/out/a", "/out/d/b"]
    with pytest.raises(localfs.UnsafePathError):
        targets("/out", "n", [DrainFile("../escape", 1)], merge=True)


def test_merge_conflicts_names_nodes() -> None:
    listings = {"n0": [DrainFile("a", 1), DrainFile("u0", 1)],
                "n1": [DrainFile("a", 1), DrainFile("u1", 1)],
                "n2": [DrainFile("a", 1)]}
    assert merge_conflicts(listings) == {"a": ["n0", "n1", "n2"]}
    assert merge_conflicts({"n0": [DrainFile("a", 1)], "n1": [DrainFile("b", 1)]}) == {}


def test_report_totals_and_json() -> None:
    r = DrainReport(dest="/out", merge=False, seconds=2.0,
                    nodes=(NodeDrain("n0", "/l/n0", 2, 3_000_000_000),
                           NodeDrain("n1", "/l/n1", 0, 0, True)),
                    files_detail={"n0": (DrainFile("a", 1, "ff"),), "n1": ()})
    assert (r.files, r.bytes, r.gbps) == (2, 3_000_000_000, 1.5)
    assert "no results on n1" in r.summary()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["checksums"]["n0"] == {"a": "ff"} and d["checksum_algorithm"] == checksum.ALGORITHM
