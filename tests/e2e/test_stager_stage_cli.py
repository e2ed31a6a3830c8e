"""``stager stage|verify|clean`` end to end: a real ``mpirun -n 2`` per command."""
import os
import shutil
import subprocess
import sys

import pytest

NP = 2
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def _stager(*args, cwd):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    for k in list(env):  # run as a fresh job even if pytest itself runs under mpirun
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "OMPI_MCA_ess", "OMPI_MCA_orte")):
            env.pop(k)
    return subprocess.run(["mpirun", "-n", str(NP), "--oversubscribe", sys.executable, "-m",
                           "stager", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def dataset(tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(5):
        (src / "d" / f"{i}.dat").write_bytes(os.urandom(1000 * (i + 1)))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/nodes/%n files {{\n  {src}/**/*.dat\n}}\n")
    return tmp_path, spec


def test_stage_verify_clean_roundtrip(dataset):
    tmp, spec = dataset
    r = _stager("stage", str(spec), "--emulate-nodes", "2", "--json", str(tmp / "r.json"),
                "--method", "bcast", "--chunk-size", "4K", cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert "staged 5 files" in r.stdout and "amplification" in r.stdout
    import json
    rep = json.loads((tmp / "r.json").read_text())
    assert rep["method"] == "bcast" and rep["nodes"] == ["node0", "node1"]
    assert rep["bytes_written"] == 2 * 15000 and rep["files_skipped"] == 0
    for n in ("node0", "node1"):
        copy = tmp / "nodes" / n / "d" / "4.dat"
        assert copy.read_bytes() == (tmp / "src/d/4.dat").read_bytes()
    r = _stager("verify", str(spec), "--emulate-nodes", "2", cwd=tmp)
    assert r.returncode == 0 and "all match" in r.stdout, r.stderr
    victim = tmp / "nodes" / "node1" / "d" / "2.dat"
    victim.write_bytes(b"\x00" + victim.read_bytes()[1:])
    r = _stager("verify", str(spec), "--emulate-nodes", "2", cwd=tmp)
    assert r.returncode == 1
    assert f"mismatch: node node1: {victim}" in r.stderr
    # clean removes a file only if it is still the recorded copy: the one changed
    # since staging is reported and left, everything else goes
    r = _stager("clean", str(spec), "--emulate-nodes", "2", cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert f"stager clean: left {victim}: modified since it was staged" in r.stderr
    left = sorted(str(p.relative_to(tmp)) for p in (tmp / "nodes").rglob("*"))
    assert left == ["nodes/node1", "nodes/node1/d", "nodes/node1/d/2.dat"], left


def test_exit_codes_and_one_line_reasons(dataset):
    tmp, spec = dataset
    r = _stager("stage", str(tmp / "missing.hook"), cwd=tmp)
    assert r.returncode == 2 and "missing.hook" in r.stderr
    r = _stager("stage", str(spec), "--emulate-nodes", "3", cwd=tmp)
    assert r.returncode == 2 and "emulated nodes" in r.stderr
    (tmp / "nodes" / "node0").mkdir(parents=True)
    (tmp / "nodes" / "node0" / "d").symlink_to(tmp)
    r = _stager("stage", str(spec), "--emulate-nodes", "2", cwd=tmp)
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("stager stage:")]
    assert len(lines) == 1 and "symlink" in lines[0] and "node node0" in lines[0], r.stderr
