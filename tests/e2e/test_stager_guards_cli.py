"""Guards through the command line under real ``mpirun``.

* a destination equal to the sources' directory is refused at planning (exit 2),
  naming both, with the sources intact -- also when only one node's ``%n`` makes it so;
* ``100%new.txt`` and ``run%n.dat`` keep their names through stage, verify, drain, clean;
* a drain that fails part-way (permission denied, as a user who cannot read one
  result) is continued by the same command once the cause is fixed, without
  ``--overwrite``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.stagerun import run, stager_lines

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")


def _src(tmp: Path, names, sub="src") -> Path:
    d = tmp / sub
    d.mkdir(parents=True)
    for n in names:
        (d / n).write_bytes(n.encode() * 100)
    return d


def test_destination_equal_to_the_source_is_refused_and_the_sources_stay(tmp_path):
    src = _src(tmp_path, ["a.dat", "b.dat"])
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {src} files {{\n  {src}/*.dat\n}}\n")
    for cmd in (["plan"], ["stage", "--emulate-nodes", "2"]):
        r = run(tmp_path, 2, cmd[0], str(spec), *cmd[1:]) if cmd[0] == "stage" else \
            run(tmp_path, 1, "plan", str(spec))
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        (line,) = [ln for ln in r.stderr.splitlines() if "destination" in ln][:1]
        assert f"{spec}:1:14: destination {src} is the directory holding sources in {src}" \
            in line, line
    r = run(tmp_path, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_a_node_root_that_lands_on_the_sources_is_refused_before_any_write(tmp_path):
    """``DIR/%n`` is fine for planning, but on node0 it is the sources' directory."""
    src = _src(tmp_path, ["a.dat"], sub="node0")
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/%n files {{\n  {src}/a.dat\n}}\n")
    r = run(tmp_path, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = stager_lines(r.stderr)
    assert "node node0" in line and f"destination {src} is the directory holding" in line, line
    assert not (tmp_path / "node1").exists(), "node1's root was made before the check"
    assert os.listdir(src) == ["a.dat"]


def test_percent_n_in_names_is_kept_end_to_end(tmp_path):
    names = ["100%new.txt", "run%n.dat", "%%.bin", "x%j%u.dat"]
    src = _src(tmp_path, names)
    (src / "a%nb").mkdir()
    (src / "a%nb" / "in%n.txt").write_bytes(b"deep")
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {src}/**\n}}\n")
    r = run(tmp_path, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    for node in ("node0", "node1"):
        got = sorted(str(p.relative_to(tmp_path / "out" / node))
                     for p in (tmp_path / "out" / node).rglob("*")
                     if not p.relative_to(tmp_path / "out" / node).parts[0].startswith(".stager"))
        assert got == sorted(names + ["a%nb", "a%nb/in%n.txt"]), got
    r = run(tmp_path, 2, "verify", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0 and "verified 10 staged copies" in r.stdout, r.stdout + r.stderr
    r = run(tmp_path, 2, "drain", f"{tmp_path}/out/%n", str(tmp_path / "back"),
            "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "back" / "node1" / "a%nb" / "in%n.txt").read_bytes() == b"deep"
    assert (tmp_path / "back" / "node0" / "run%n.dat").exists()
    r = run(tmp_path, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                    reason="a permission error root cannot override needs another user")
def test_drain_resumes_after_a_permission_error_without_overwrite():
    base = Path(tempfile.mkdtemp(prefix="mpistage-drain-", dir="/tmp"))
    try:
        os.chmod(base, 0o777)
        for node in ("node0", "node1"):
            d = base / "local" / node
            d.mkdir(parents=True)
            for i in range(4):
                (d / f"r{i}.txt").write_bytes(f"{node} result {i}\n".encode() * 50)
        blocked = base / "local" / "node1" / "r2.txt"
        for p in base.rglob("*"):
            os.chown(p, 65534, 65534)
        os.chown(base, 65534, 65534)
        os.chmod(blocked, 0o000)  # the user cannot read one of its results
        args = ["drain", f"{base}/local/%n", str(base / "out"), "--emulate-nodes", "2"]
        r = run(base, 2, *args, user="nobody")
        assert r.returncode == 1, r.stdout + r.stderr
        (line,) = stager_lines(r.stderr)
        assert "r2.txt" in line and "Permission denied" in line and "only the rest" in line, line
        drained = sorted(str(p.relative_to(base / "out")) for p in (base / "out").rglob("r*"))
        assert "node1/r0.txt" in drained and "node1/r2.txt" not in drained, drained
        os.chmod(blocked, 0o644)  # the cause is fixed
        r = run(base, 2, *args, "--json", str(base / "d.json"), user="nobody")
        assert r.returncode == 0, r.stdout + r.stderr  # no --overwrite needed
        assert "already drained (same checksum), skipped" in r.stdout, r.stdout + r.stderr
        rep = json.loads((base / "d.json").read_text())
        copied = {n["node"]: n["files"] for n in rep["nodes"]}
        assert sum(copied.values()) == 8 - len(drained), (copied, drained)
        for node in ("node0", "node1"):
            for i in range(4):
                assert (base / "out" / node / f"r{i}.txt").read_bytes() == \
                    (base / "local" / node / f"r{i}.txt").read_bytes()
        assert not list((base / "out").rglob(".stager-tmp-*"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
