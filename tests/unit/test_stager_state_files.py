"""The node-local state files, serially: journal, records, lock, trusted opening, temp names.

The layout these implement is ``docs/staging-state.md``; the collective behaviour
(stage, verify, clean) is tested under ``mpirun`` in tests/mpi and tests/e2e.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import pytest

from stager.errors import StagerError
from core import commit, localfs
from stager.nodelocal import record as records
from stager.nodelocal.journal import Journal, read_events
from stager.nodelocal.lock import Holder, LockBusy
from stager.nodelocal.state import STATE_DIR, RootState
from tests.stagerun import read_record
from core.trusted import Untrusted, open_below, open_dir

# -- the journal ------------------------------------------------------------------------


def _dirfd(path):
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_journal_lines_survive_and_a_torn_tail_is_ignored_then_cut(tmp_path):
    fd = _dirfd(tmp_path)
    j = Journal(fd, "j", str(tmp_path / "j"))
    j.append({"op": "copy", "n": 1})
    j.append({"op": "copy", "n": 2})
    j.close()
    with open(tmp_path / "j", "ab") as f:  # a writer killed inside write(): half a line
        f.write(b'{"op":"copy","n":')
    assert [e["n"] for e in read_events(fd, "j", "j")] == [1, 2]
    j = Journal(fd, "j", str(tmp_path / "j"))  # the next writer cuts the tail first
    j.append({"op": "copy", "n": 3})
    j.close()
    assert [e["n"] for e in read_events(fd, "j", "j")] == [1, 2, 3]
    assert (tmp_path / "j").read_bytes().count(b"\n") == 3
    os.close(fd)


def test_a_complete_line_that_does_not_parse_is_corruption_named_by_line(tmp_path):
    (tmp_path / "j").write_bytes(b'{"op":"copy"}\nnot json\n{"op":"copy"}\n')
    os.chmod(tmp_path / "j", 0o600)
    fd = _dirfd(tmp_path)
    with pytest.raises(StagerError, match="corrupt at line 2"):
        read_events(fd, "j", str(tmp_path / "j"))
    os.close(fd)


def test_a_journal_that_is_a_symlink_or_not_ours_is_refused(tmp_path):
    (tmp_path / "real").write_bytes(b"")
    os.symlink(tmp_path / "real", tmp_path / "j")
    fd = _dirfd(tmp_path)
    with pytest.raises(OSError):
        Journal(fd, "j", "j")
    with pytest.raises(Untrusted, match="symlink"):
        read_events(fd, "j", "j")
    (tmp_path / "k").write_bytes(b"{}\n")
    os.chmod(tmp_path / "k", 0o666)
    with pytest.raises(Untrusted, match="writable by group and others"):
        read_events(fd, "k", "k")
    os.close(fd)


# -- records ---------------------------------------------------------------------------


def _entry(**kw):
    d = dict(source="/s/a", source_size=10, source_mtime_ns=5, source_ctime_ns=6,
             source_ino=7, size=10, mtime_ns=5, mode=0o644, checksum="", dev=1, ino=2)
    d.update(kw)
    return records.StagedFile(**d)


def test_record_is_its_file_then_its_journal_and_compaction_is_idempotent(tmp_path):
    state = RootState.create(str(tmp_path / "root"))
    j = records.SpecJournal(state.fd, state.path, "k1")
    j.run(run="r", spec="/s.hook")
    j.copy("a", _entry())
    j.copy("b", _entry(source="/s/b"))
    j.sum("a", "ab" * 16)
    j.drop("b")
    j.close()
    rec = state.load("k1")
    assert rec.files == {"a": _entry(checksum="ab" * 16)} and rec.spec == "/s.hook"
    journal = (tmp_path / "root" / STATE_DIR / "k1.journal").read_bytes()
    records.compact(state.fd, state.path, rec)
    assert not (tmp_path / "root" / STATE_DIR / "k1.journal").exists()
    # a crash between the record's rename and the journal's removal: replaying the
    # journal over the record that already holds it changes nothing
    (tmp_path / "root" / STATE_DIR / "k1.journal").write_bytes(journal)
    os.chmod(tmp_path / "root" / STATE_DIR / "k1.journal", 0o600)
    assert state.load("k1").files == rec.files
    assert state.spec_keys() == ["k1"]
    state.close()
    assert read_record(str(tmp_path / "root"), "k1").files == rec.files
    assert read_record(str(tmp_path / "nowhere"), "k1").files == {}


def test_identity_rules(tmp_path):
    p = tmp_path / "copy"
    p.write_bytes(b"x" * 10)
    st = os.lstat(p)
    e = records.new_entry("/s/a", (10, 5, 6, 7), st, 0o644, None)
    assert e.is_copy(os.lstat(p)) and e.same_file(os.lstat(p)) and e.checksum == ""
    os.utime(p, ns=(1, 1))
    assert not e.is_copy(os.lstat(p)) and e.same_file(os.lstat(p))  # modified, same inode
    p.rename(tmp_path / "old")  # kept, so the new file cannot reuse its inode
    p.write_bytes(b"x" * 10)
    assert not e.same_file(os.lstat(p))  # another file
    assert records.is_source(e, "/s/a", (10, 5, 6, 7))
    assert not records.is_source(e, "/s/a", (10, 5, 99, 7))  # ctime moved: rewritten
    assert not records.is_source(e, "/s/a", (10, 5, 6, 8))   # another inode: replaced
    assert records.is_source(e, "/s/a", (10, 5, -1, -1))     # not known: not compared


# -- the state directory and trusted opening ---------------------------------------------


def test_state_directory_is_private_and_remembers_the_directories_it_made(tmp_path):
    root = tmp_path / "a" / "b" / "root"
    state = RootState.create(str(root))
    assert oct((root / STATE_DIR).stat().st_mode & 0o777) == "0o700"
    assert state.created_dirs() == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(root)]
    state.add_dir(str(root / "sub"))
    os.mkdir(root / "sub", 0o700)
    removed, left = state.remove_dirs(final=True)
    assert removed == 4 and left == [] and not (tmp_path / "a").exists()
    state.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory someone else's needs root")
def test_roots_that_are_not_yours_or_writable_by_others_are_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    with pytest.raises(localfs.UnsafePathError, match="owned by uid 65534"):
        RootState.create(str(other))
    with pytest.raises(Untrusted, match="owned by uid 65534"):
        RootState.open(str(other))
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o775)
    with pytest.raises(localfs.UnsafePathError, match="writable by group"):
        RootState.create(str(loose))
    os.symlink(tmp_path, tmp_path / "link")
    with pytest.raises(Untrusted, match="symlink"):
        open_dir(str(tmp_path / "link"))


def test_walk_below_a_root_never_follows_a_symlinked_directory(tmp_path):
    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "root" / "a" / "b")
    fd = open_dir(str(tmp_path / "root"))
    with pytest.raises(Untrusted, match="symlink"):
        open_below(fd, "a/b", str(tmp_path / "root"))
    with pytest.raises(Untrusted, match="plain relative"):
        open_below(fd, "a/../..", str(tmp_path / "root"))
    os.close(fd)


# -- the lock ------------------------------------------------------------------------------


def _hold(root, started, stop):
    state = RootState.create(root)
    state.take_lock(Holder.here("other-run", "nodeX", "/other.hook"))
    started.set()
    stop.wait(30)
    state.close()


def test_lock_names_its_holder_waits_and_detects_our_own_run(tmp_path):
    root = str(tmp_path / "root")
    ctx = multiprocessing.get_context("fork")
    started, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(root, started, stop))
    p.start()
    assert started.wait(30)
    state = RootState.create(root)
    with pytest.raises(LockBusy) as info:
        state.take_lock(Holder.here("mine", "node0", "/s.hook"))
    msg = str(info.value)
    assert f"pid {p.pid}" in msg and "node nodeX" in msg and "/other.hook" in msg, msg
    assert "--wait" in msg
    t0 = time.monotonic()
    ctx.Process(target=lambda: (time.sleep(0.5), stop.set())).start()
    assert state.take_lock(Holder.here("mine", "node0", "/s.hook"), wait=30) is None
    assert time.monotonic() - t0 >= 0.4 and state.lock is not None
    p.join()
    holder = json.loads((tmp_path / "root" / STATE_DIR / "holder").read_text())
    assert holder["run"] == "mine" and holder["pid"] == os.getpid()
    # another process of *this* run finds it held by us: the root is shared
    q = ctx.Process(target=_same_run, args=(root,))
    q.start()
    q.join(30)
    assert q.exitcode == 0
    state.close()
    assert not (tmp_path / "root" / STATE_DIR / "holder").exists()


def _same_run(root):
    state = RootState.open(root)
    other = state.take_lock(Holder.here("mine", "node1", "/s.hook"))
    os._exit(0 if other is not None and other.node == "node0" else 1)


def _hold_and_die(root, started):
    state = RootState.create(root)
    state.take_lock(Holder.here("dead-run", "node0", "/s.hook"))
    started.set()
    time.sleep(60)


def test_lock_of_a_killed_holder_is_free_and_taken_over(tmp_path):
    root = str(tmp_path / "root")
    ctx = multiprocessing.get_context("fork")
    started = ctx.Event()
    p = ctx.Process(target=_hold_and_die, args=(root, started))
    p.start()
    assert started.wait(30)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    state = RootState.open(root)
    state.take_lock(Holder.here("new", "node0", "/s.hook"))
    assert state.lock.previous is not None and state.lock.previous.run == "dead-run"
    assert state.lock.previous.pid == p.pid
    state.close()


# -- temporary names ---------------------------------------------------------------------


def test_temporary_names_are_short_for_every_legal_name(tmp_path):
    name = "n" * 255
    t = commit.temp_path(str(tmp_path / name))
    assert len(os.path.basename(t).encode()) <= 48 and commit.TEMP_MARK in t
    with localfs.AtomicFile(str(tmp_path / name)) as f:
        f.write(b"data")
        f.commit()
    assert (tmp_path / name).read_bytes() == b"data"
    assert [p.name for p in tmp_path.iterdir()] == [name]
