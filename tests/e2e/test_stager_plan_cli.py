"""``stager plan`` end to end through the console script (serial)."""
import json
import os
import subprocess
import sys

import pytest

FIG6 = """# comments
broadcast to {dest} files {{
  ~/dataset-1/*.cfg
}}
broadcast to {dest}/bulk files {{
  ~/dataset-1/bulk/file1.index
  ~/dataset-1/bulk/*.bin
}}
"""


def stager(*args, home):
    env = dict(os.environ, HOME=str(home))
    return subprocess.run([sys.executable, "-m", "stager", *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.fixture
def fig6(tmp_path):
    d = tmp_path / "dataset-1" / "bulk"
    d.mkdir(parents=True)
    (tmp_path / "dataset-1" / "a.cfg").write_text("alpha")
    (d / "file1.index").write_text("idx")
    (d / "data.bin").write_bytes(b"\0" * 4096)
    spec = tmp_path / "fig6.hook"
    spec.write_text(FIG6.format(dest=tmp_path / "stage"))
    return tmp_path, spec


def test_plan_text(fig6):
    home, spec = fig6
    r = stager("plan", str(spec), home=home)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "2 block(s), 3 file(s)" in out
    assert "each node receives 4.0 KiB (4104 bytes)" in out
    assert f"largest file: {home}/dataset-1/bulk/data.bin (4.0 KiB)" in out
    assert f"{home}/dataset-1/a.cfg -> {home}/stage/a.cfg  5 B" in out
    assert f"{home}/dataset-1/bulk/data.bin -> {home}/stage/bulk/data.bin  4096 B" in out
    assert ": fits" in out


def test_plan_json(fig6):
    home, spec = fig6
    r = stager("plan", str(spec), "--json", home=home)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["files"] == 3 and doc["bytes"] == 4104
    assert [e["dest"] for e in doc["entries"]] == [
        f"{home}/stage/a.cfg", f"{home}/stage/bulk/data.bin", f"{home}/stage/bulk/file1.index"]
    assert doc["largest"] == {"source": f"{home}/dataset-1/bulk/data.bin", "size": 4096}
    dests = {d["dest"]: d for d in doc["destinations"]}
    # every copy in whole blocks of its filesystem, as stage's capacity check counts it
    bs = os.statvfs(home).f_frsize
    whole = [-(-n // bs) * bs for n in (5, 4096, 3)]
    assert dests[f"{home}/stage"]["needs"] == whole[0] and dests[f"{home}/stage"]["fits"]
    assert dests[f"{home}/stage/bulk"]["filesystem_needs"] == sum(whole)


def test_plan_reports_a_destination_that_does_not_fit(tmp_path):
    (tmp_path / "big").write_bytes(b"")
    os.truncate(tmp_path / "big", 1 << 43)  # sparse 8 TiB: more than this disk holds
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out files {{ big }}")
    r = stager("plan", str(spec), home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "DOES NOT FIT" in r.stdout
    r = stager("plan", str(spec), "--check", home=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "stager plan: 1 destination(s) do not fit on this machine, first " \
        f"{tmp_path}/out (short by" in r.stderr


def test_spec_error_exits_2_with_position(tmp_path):
    spec = tmp_path / "bad.hook"
    spec.write_text("broadcast to /tmp files {\n  /a\n")
    r = stager("plan", str(spec), home=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0] == f"{spec}:1:25: missing '}}': this block is never closed"
    assert lines[-1].strip() == "^"
    assert "Traceback" not in r.stderr


def test_plan_error_exits_2(tmp_path):
    spec = tmp_path / "s.hook"
    spec.write_text("broadcast to /tmp files {\n  nothing-here\n}")
    r = stager("plan", str(spec), home=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith(f"stager plan: {spec}:2:3: 'nothing-here' matches no file")


def test_missing_spec_exits_2(tmp_path):
    r = stager("plan", str(tmp_path / "nope.hook"), home=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == f"{tmp_path}/nope.hook: spec file not found: check the path"


def test_planning_never_loads_mpi():
    code = ("import sys, stager, stager.commands.plan; "
            "sys.exit(1 if 'mpi4py' in sys.modules else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "importing stager for planning loaded mpi4py" + r.stderr
