"""Local-write safety: 0700 dirs, symlinks refused, no escape, atomic temp+rename."""
import os
import stat

import pytest

from core import checksum, localfs
from stager.nodelocal import space
from core.errors import LocalFileError, MpistageError


def test_inside_refuses_escapes(tmp_path):
    root = str(tmp_path / "r")
    assert localfs.inside(root, "a/b") == os.path.join(root, "a", "b")
    assert localfs.inside(root, os.path.join(root, "x")) == os.path.join(root, "x")
    for bad in ("../x", "a/../../x", "/etc/passwd", root + "-other/x"):
        with pytest.raises(localfs.UnsafePathError, match="escapes"):
            localfs.inside(root, bad)


def test_ensure_dir_creates_private_dirs_and_records_them(tmp_path):
    root = tmp_path / "a" / "root"
    created = []
    p = localfs.ensure_dir(str(root), str(root / "x" / "y"), created)
    assert os.path.isdir(p)
    assert created == [str(tmp_path / "a"), str(root), str(root / "x"), str(root / "x" / "y")]
    for d in created:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    again = []
    localfs.ensure_dir(str(root), str(root / "x" / "y"), again)
    assert again == []


def test_ensure_dir_refuses_symlinked_levels(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "sub").symlink_to(elsewhere)
    with pytest.raises(localfs.UnsafePathError, match="symlink"):
        localfs.ensure_dir(str(root), str(root / "sub" / "deeper"))
    assert list(elsewhere.iterdir()) == []
    (tmp_path / "lroot").symlink_to(elsewhere)
    with pytest.raises(localfs.UnsafePathError, match="symlink"):
        localfs.ensure_dir(str(tmp_path / "lroot"), str(tmp_path / "lroot"))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_ensure_dir_refuses_dirs_owned_by_others(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    os.chown(root, 65534, 65534)
    with pytest.raises(localfs.UnsafePathError, match="owned by uid 65534"):
        localfs.ensure_dir(str(root), str(root / "x"))
    assert not (root / "x").exists()


def test_atomic_file_keeps_mode_mtime_and_leaves_no_temp(tmp_path):
    dest = str(tmp_path / "f")
    mtime = 1_600_000_000_123_456_789
    with localfs.AtomicFile(dest, mode=0o100751, mtime_ns=mtime) as f:
        f.write(b"hello ")
        f.write(memoryview(b"world"))
        assert not os.path.exists(dest)  # nothing visible before commit
        f.commit()
    st = os.stat(dest)
    assert open(dest, "rb").read() == b"hello world"
    assert stat.S_IMODE(st.st_mode) == 0o751 and st.st_mtime_ns == mtime
    assert f.hexdigest() == checksum.hexdigest(b"hello world")
    assert os.listdir(tmp_path) == ["f"]


def test_atomic_file_abort_removes_temp_and_keeps_old(tmp_path):
    dest = tmp_path / "f"
    dest.write_bytes(b"old")
    with localfs.AtomicFile(str(dest)) as f:
        f.write(b"new, partial")
    assert dest.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_failed_commit_leaves_no_temp(tmp_path):
    # an mtime the platform cannot set makes utime fail inside commit(), after the
    # descriptor is handed over: the temporary file must still be removed
    dest = tmp_path / "f"
    f = localfs.AtomicFile(str(dest), mtime_ns=2**100)
    f.write(b"data")
    with pytest.raises(OverflowError):
        f.commit()
    f.abort()  # what callers do after a failed commit: must not raise
    assert os.listdir(tmp_path) == []


def test_atomic_file_refuses_symlink_at_destination(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "f").symlink_to(victim)
    with pytest.raises(localfs.UnsafePathError, match="symlink"):
        localfs.write_bytes_atomic(str(tmp_path / "f"), b"evil")
    assert victim.read_bytes() == b"precious"
    assert issubclass(localfs.UnsafePathError, LocalFileError)
    assert issubclass(LocalFileError, MpistageError)


def test_symlink_planted_during_write_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    f = localfs.AtomicFile(str(tmp_path / "f"))
    f.write(b"data")
    (tmp_path / "f").symlink_to(victim)
    with pytest.raises(localfs.UnsafePathError):
        f.commit()
    assert victim.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["f", "victim"]


def test_copy_file_atomic(tmp_path):
    src = tmp_path / "src"
    data = os.urandom(100_000)
    src.write_bytes(data)
    os.chmod(src, 0o640)
    os.utime(src, ns=(10**18, 10**18))
    digest = localfs.copy_file_atomic(str(src), str(tmp_path / "dst"))
    assert digest == checksum.hexdigest(data)
    st = os.stat(tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == data
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_mtime_ns == 10**18


def test_free_space_of_missing_path_uses_existing_ancestor(tmp_path):
    missing = str(tmp_path / "a" / "b")
    assert space.existing_ancestor(missing) == str(tmp_path)
    assert space.free_bytes(missing) > 0
    assert space.filesystem_id(missing) == os.stat(tmp_path).st_dev
