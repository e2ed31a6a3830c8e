"""``clean`` cannot be turned against its user: the planted-record attack, run for real.

Another user (``nobody``, through ``runuser``) pre-creates a
node's destination root in a shared sticky directory (like ``/tmp``), plants the
stager's records there -- the old ``.stager-manifest.json``/``.stager-record.json``
and this version's ``.stager/KEY.record``, with the exact device, inode, size and
mtime of the victim's file -- and makes ``sub`` a symlink to the victim's
directory. The victim's ``stage`` refuses the foreign root; the victim's ``clean``
(which the sbatch template runs in an EXIT trap, after a failed stage too) must
leave the victim's file untouched and say why. Root runs these tests as the victim.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.stagerun import run, stager_lines

pytestmark = [
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                       reason="acting as a second user needs root and runuser"),
]

ATTACK = r"""
import json, os, sys
root, victim, key, important = sys.argv[1:5]
st = os.stat(important)
os.mkdir(root, 0o777)
os.chmod(root, 0o777)
os.symlink(victim, os.path.join(root, "sub"))
entry = {"source": "/x", "source_size": st.st_size, "source_mtime_ns": st.st_mtime_ns,
         "source_ctime_ns": st.st_ctime_ns, "source_ino": st.st_ino, "size": st.st_size,
         "mtime_ns": st.st_mtime_ns, "mode": 0o644, "checksum": "", "dev": st.st_dev,
         "ino": st.st_ino}
old = {"version": 2, "algorithm": "xxh3_128", "root": root, "created_dirs": [root],
       "files": {"sub/important.dat": {"source": "/x", "size": st.st_size,
                                       "mtime_ns": st.st_mtime_ns, "mode": 420,
                                       "checksum": "", "source_size": st.st_size}}}
for name in (".stager-manifest.json", ".stager-record.json"):
    with open(os.path.join(root, name), "w") as f:
        json.dump(old, f)
state = os.path.join(root, ".stager")
os.mkdir(state, 0o777)
os.chmod(state, 0o777)
rec = {"version": 3, "algorithm": "xxh3_128", "key": key, "spec": "s.hook", "root": root,
       "files": {"sub/important.dat": entry}}
with open(os.path.join(state, key + ".record"), "w") as f:
    json.dump(rec, f)
with open(os.path.join(state, "dirs"), "w") as f:
    f.write(json.dumps({"op": "dir", "path": os.path.join(root, "sub")}) + "\n")
"""


@pytest.fixture
def world():
    # pytest's tmp_path is private to root: the other user must reach a shared directory
    base = Path(tempfile.mkdtemp(prefix="mpistage-hostile-", dir="/tmp"))
    os.chmod(base, 0o755)
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp: anyone may create, only owners may remove
    victim = base / "victim"
    victim.mkdir()
    (victim / "important.dat").write_bytes(b"the victim's data\n")
    src = base / "src"
    src.mkdir()
    (src / "a.dat").write_bytes(os.urandom(4096))
    spec = base / "s.hook"
    spec.write_text(f"broadcast to {shared}/%n files {{\n  {src}/a.dat\n}}\n")
    os.chmod(spec, 0o644)
    yield base, shared, victim, spec
    shutil.rmtree(base, ignore_errors=True)


def _attack(root: Path, victim: Path, spec: Path) -> None:
    from stager.planning import spec_key

    r = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", ATTACK,
                        str(root), str(victim), spec_key(str(spec)),
                        str(victim / "important.dat")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert root.stat().st_uid != 0 and (root / "sub").is_symlink()


def test_planted_record_in_a_foreign_root_deletes_nothing(world):
    base, shared, victim, spec = world
    _attack(shared / "node0", victim, spec)
    important = victim / "important.dat"
    before = (important.read_bytes(), important.stat().st_ino)

    r = run(base, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = stager_lines(r.stderr)
    assert "node node0" in line and "owned by uid 65534" in line, line

    r = run(base, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert (important.read_bytes(), important.stat().st_ino) == before, "the victim's file"
    left = stager_lines(r.stderr, "stager clean: left ")
    assert any(str(shared / "node0") in ln and "owned by uid 65534" in ln for ln in left), \
        r.stderr
    assert (shared / "node0" / "sub").is_symlink()  # the attacker's things are not ours either


def test_planted_record_in_a_root_left_writable_by_others_deletes_nothing(world):
    """The victim's own root, but mode 0777: the other user replaces the record and
    plants the symlink; clean trusts neither the root nor a record that is not the
    victim's."""
    base, shared, victim, spec = world
    r = run(base, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    assert r.returncode == 0, r.stderr
    root = shared / "node1"
    os.chmod(root, 0o777)  # the victim's mistake
    os.chmod(root / ".stager", 0o777)
    from stager.planning import spec_key
    key = spec_key(str(spec))
    (root / ".stager" / f"{key}.record").unlink()
    plant = subprocess.run(
        ["runuser", "-u", "nobody", "--", sys.executable, "-c",
         "import json, os, sys; r, v, k = sys.argv[1:4]; st = os.stat(v + '/important.dat');"
         "os.symlink(v, r + '/sub');"
         "e = dict(source='/x', source_size=st.st_size, source_mtime_ns=st.st_mtime_ns,"
         " source_ctime_ns=st.st_ctime_ns, source_ino=st.st_ino, size=st.st_size,"
         " mtime_ns=st.st_mtime_ns, mode=420, checksum='', dev=st.st_dev, ino=st.st_ino);"
         "json.dump(dict(version=3, algorithm='xxh3_128', key=k, spec='s', root=r,"
         " files={'sub/important.dat': e}), open(r + '/.stager/' + k + '.record', 'w'))",
         str(root), str(victim), key], capture_output=True, text=True)
    assert plant.returncode == 0, plant.stderr
    important = victim / "important.dat"
    before = important.read_bytes()
    r = run(base, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert important.read_bytes() == before
    assert any(str(root) in ln and "writable by group and others" in ln
               for ln in stager_lines(r.stderr, "stager clean: left ")), r.stderr
    # node0's root was never touched by anyone else: cleaned completely
    assert not (shared / "node0").exists()


def test_symlinked_root_is_never_followed(world):
    base, shared, victim, spec = world
    os.symlink(victim, shared / "node0")  # planted where node0's root should be
    important = victim / "important.dat"
    before = important.read_bytes()
    r = run(base, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert important.read_bytes() == before
    assert any("symlink" in ln for ln in stager_lines(r.stderr, "stager clean: left ")), r.stderr
    r = run(base, 2, "stage", str(spec), "--emulate-nodes", "2", "--no-progress")
    assert r.returncode == 1 and "symlink" in r.stderr, r.stderr
    assert sorted(os.listdir(victim)) == ["important.dat"], "stage wrote through the link"
