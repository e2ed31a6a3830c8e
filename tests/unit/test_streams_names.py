"""A scan's output name (:mod:`streams.job.names`): a name whose files are in OUT is
never reused without ``--overwrite``; the name is held by an exclusive record."""
from __future__ import annotations

import json

from streams.job.names import OutputNames


def test_a_taken_name_becomes_the_next_free_one_and_says_so(tmp_path):
    (tmp_path / "s1.live.png").write_bytes(b"an earlier job's snapshot")
    (tmp_path / "s1.2.h5").write_bytes(b"an earlier rename's result")
    (tmp_path / "s10.h5").write_bytes(b"another scan")       # not s1's
    said = []
    names = OutputNames(str(tmp_path), say=said.append)
    assert names.name("s1") == "s1.3" and names.name("s1") == "s1.3"
    assert "scan s1 is written as s1.3" in said[0] and "s1.live.png" in said[0]
    assert names.name("s10") == "s10.2" and names.name("s2") == "s2"
    record = json.loads((tmp_path / "s1.3.receiving").read_text())
    assert record["state"] == "receiving" and record["scan_as_sent"] == "s1"
    assert record["written_by"] == "mpistage"
    # another job writing into the same OUT does not take a name held here
    assert OutputNames(str(tmp_path)).name("s2") == "s2.2"


def test_release_removes_only_its_own_record(tmp_path):
    names = OutputNames(str(tmp_path))
    assert names.name("a") == "a"
    names.release("a")
    assert not (tmp_path / "a.receiving").exists()
    assert names.name("b") == "b"
    (tmp_path / "b.receiving").unlink()
    (tmp_path / "b.receiving").write_text("{}")       # someone else's file in its place
    names.release("b")
    assert (tmp_path / "b.receiving").read_text() == "{}"


def test_overwrite_keeps_every_name(tmp_path):
    (tmp_path / "s1.h5").write_bytes(b"x")
    names = OutputNames(str(tmp_path), overwrite=True)
    assert names.name("s1") == "s1" and not (tmp_path / "s1.receiving").exists()


def test_the_record_is_never_seen_before_it_is_written(tmp_path, monkeypatch):
    # the record used to be created, then written: a reader (the no-loss e2e test, under
    # load) found it empty
    from streams.job import names as mod

    seen = []
    dump = mod.json.dump
    monkeypatch.setattr(mod.json, "dump", lambda obj, f: (
        seen.append((tmp_path / "s1.receiving").exists()), dump(obj, f)))
    assert OutputNames(str(tmp_path)).name("s1") == "s1"
    assert seen == [False]
    assert json.loads((tmp_path / "s1.receiving").read_text())["state"] == "receiving"
    assert [p.name for p in tmp_path.iterdir()] == ["s1.receiving"]   # no temporary left
