"""The PFS staging benchmark (bench/pfs_stage.py) leaves no mount behind when interrupted.

Needs FUSE (root, /dev/fuse) and mpirun; serial (the benchmark starts its own mpirun).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.pfs import fuse_mounts_under  # noqa: E402

CAN_RUN = (os.path.exists("/dev/fuse") and os.geteuid() == 0
           and shutil.which("fusermount3") is not None and shutil.which("mpirun") is not None)


@pytest.mark.fuse
@pytest.mark.slow
@pytest.mark.skipif(not CAN_RUN, reason="needs /dev/fuse, fusermount3, mpirun and root")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_benchmark_removes_its_mount(tmp_path, sig):
    # A 4 MB/s cap makes the 32 MiB naive run last ~8 s: long enough to be interrupted mid-read.
    cmd = [sys.executable, str(REPO / "bench" / "pfs_stage.py"), "--tiny", "--datasets", "frames",
           "--methods", "naive", "--nodes", "1", "--bandwidth", "4e6",
           "--work", str(tmp_path / "work"), "--dest-dir", str(tmp_path / "dest"),
           "--no-local-copy", "--out", str(tmp_path / "out" / "r")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not fuse_mounts_under(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fuse_mounts_under(tmp_path), f"benchmark never mounted: {proc.communicate()}"
    time.sleep(1.0)  # let mpirun start reading through the mount
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert fuse_mounts_under(tmp_path) == []
    assert not (tmp_path / "out" / "r.json").exists()  # no partial results pretending to be whole
    assert list((tmp_path / "dest").iterdir()) == []  # the run's node copies are removed
