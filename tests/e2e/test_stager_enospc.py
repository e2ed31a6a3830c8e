"""A full disk in the middle of staging: real small tmpfs mounts (root only).

After ``ENOSPC`` every copy committed before it stays recorded,
no temporary file is left, the failure says how much is complete, the re-run (once
there is room) transfers only the rest, and ``clean`` leaves the mount empty. Two
ways to fill a real filesystem while the capacity check passed:

* out of inodes (``nr_inodes``): deterministic, the N-th file cannot be created;
* out of bytes (``size=8m``), because another process fills the disk while the
  stager writes -- what a co-scheduled job does.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.stagerun import Job, journal_lines, run, stager_lines, temp_files, wait_for

pytestmark = [
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]


@pytest.fixture
def mnt(tmp_path):
    m = tmp_path / "mnt"
    m.mkdir()
    yield m
    subprocess.run(["umount", str(m)], capture_output=True)


def _mount(m: Path, opts: str) -> None:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(m)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs -o {opts} failed here: {r.stderr.strip()}")


def _dataset(tmp: Path, n: int, size: int, dest: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for i in range(n):
        (src / f"f{i:03d}.bin").write_bytes(os.urandom(size))
    spec = tmp / "s.hook"
    spec.write_text(f"broadcast to {dest}/%n files {{\n  {src}/*.bin\n}}\n")
    return spec


def _whole_copies(tmp: Path, root: Path) -> set:
    names = set()
    for p in root.glob("f*.bin"):
        assert p.read_bytes() == (tmp / "src" / p.name).read_bytes(), f"{p} is not whole"
        names.add(p.name)
    return names


def _recorded(tmp: Path, root: Path) -> set:
    from tests.stagerun import read_record
    from stager.planning import spec_key

    return set(read_record(str(root), spec_key(str(tmp / "s.hook"))).files)


def _after_enospc(tmp: Path, mnt: Path, spec: Path, r, n: int, opts: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = stager_lines(r.stderr)
    assert "No space left on device" in line, line
    assert "complete and recorded on 2 node(s)" in line and "only the rest" in line, line
    assert temp_files(mnt) == []
    have = {node: _whole_copies(tmp, mnt / node) for node in ("node0", "node1")}
    for node in have:
        assert _recorded(tmp, mnt / node) == have[node], node
    assert any(len(v) < n for v in have.values())
    subprocess.run(["mount", "-o", f"remount,{opts}", str(mnt)], check=True)
    r = run(tmp, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress",
            "--json", str(tmp / "r.json"))
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp / "r.json").read_text())
    assert rep["files_skipped"] == len(have["node0"] & have["node1"]), rep
    assert rep["bytes_written"] == sum(
        (tmp / "src" / f"f{i:03d}.bin").stat().st_size
        for node in have for i in range(n) if f"f{i:03d}.bin" not in have[node])
    for node in have:
        assert _whole_copies(tmp, mnt / node) == {f"f{i:03d}.bin" for i in range(n)}
    r = run(tmp, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert os.listdir(mnt) == [], os.listdir(mnt)


def test_out_of_inodes_mid_transfer(tmp_path, mnt):
    _mount(mnt, "size=32m,nr_inodes=40")
    spec = _dataset(tmp_path, 30, 100 << 10, mnt)
    r = run(tmp_path, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    _after_enospc(tmp_path, mnt, spec, r, 30, "nr_inodes=1000")


def test_disk_filled_by_another_process_mid_transfer(tmp_path, mnt):
    """An 8 MiB tmpfs; the stager needs 6 MiB, which fits; then a filler takes the rest."""
    _mount(mnt, "size=8m")
    spec = _dataset(tmp_path, 24, 128 << 10, mnt)  # 3 MiB per node
    job = Job(tmp_path, 2, ["stage", str(spec), "--emulate-nodes", "2", "--no-progress",
                            "--chunk-size", "1K", "--small-file-threshold", "512"])
    wait_for(lambda: journal_lines(mnt / "node0") >= 2 or job.proc.poll() is not None,
             what="the first copies")
    assert job.proc.poll() is None, "the run ended before the disk was filled"
    with open(mnt / "filler", "wb") as f:  # another job takes every free byte
        try:
            while True:
                f.write(b"\0" * (64 << 10))
                f.flush()
        except OSError:
            pass
    r = job.wait(60)
    os.unlink(mnt / "filler")
    _after_enospc(tmp_path, mnt, spec, r, 24, "size=32m")
