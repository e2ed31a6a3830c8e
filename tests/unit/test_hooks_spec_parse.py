"""The hook spec language: what parses, and how it expands (serial, no MPI)."""
import os

import pytest

import stager.planning.kinds  # noqa: F401  (the block kinds the spec language knows)
from hooks import SpecError, load_spec, parse_spec

FIG6 = """\
# comments
broadcast to /tmp files {
  ~/dataset-1/*.cfg
}
broadcast to /tmp/bulk files {
  ~/dataset-1/bulk/file1.index
  ~/dataset-1/bulk/*.bin
}
"""

ENV = {"HOME": "/home/ada", "USER": "ada", "DATA": "/pfs/run7", "SLURM_JOB_ID": "4242"}


def test_figure6_blocks_and_positions():
    spec = parse_spec(FIG6, path="fig6.hook", env=ENV)
    assert [b.dest for b in spec.blocks] == ["/tmp", "/tmp/bulk"]
    assert [b.kind for b in spec.blocks] == ["files", "files"]
    assert [p.text for p in spec.blocks[1].patterns] == [
        "/home/ada/dataset-1/bulk/file1.index", "/home/ada/dataset-1/bulk/*.bin"]
    first = spec.blocks[0]
    assert (first.location.line, first.location.column) == (2, 1)
    assert (first.dest_location.line, first.dest_location.column) == (2, 14)
    assert str(first.patterns[0].location) == "fig6.hook:3:3"


def test_variables_braces_and_tilde():
    spec = parse_spec("broadcast to ${HOME}/stage files {\n $DATA/*.tif\n ${DATA}x/a\n}",
                      env=ENV)
    block = spec.blocks[0]
    assert block.dest == "/home/ada/stage"
    assert [p.text for p in block.patterns] == ["/pfs/run7/*.tif", "/pfs/run7x/a"]


def test_quoted_paths_with_spaces():
    text = 'broadcast to "/tmp/my stage" files {\n "$DATA/scan 1/*.tif"\n \'/lit/$DATA\'\n}'
    block = parse_spec(text, env=ENV).blocks[0]
    assert block.dest == "/tmp/my stage"
    assert block.patterns[0].text == "/pfs/run7/scan 1/*.tif"
    assert block.patterns[1].text == "/lit/$DATA"  # single quotes: literal


def test_escaped_dollar_in_double_quotes():
    block = parse_spec('broadcast to /t files { "/a/\\$DATA" }', env=ENV).blocks[0]
    assert block.patterns[0].text == "/a/$DATA"


def test_destination_placeholders():
    spec = parse_spec("broadcast to /tmp/%u/%j/%n/100%% files { /a }", env=ENV)
    dest = spec.blocks[0].dest
    assert dest == "/tmp/ada/4242/%n/100\x00"
    assert spec.blocks[0].display_dest == "/tmp/ada/4242/%n/100%"


def test_job_placeholder_without_slurm():
    env = {k: v for k, v in ENV.items() if k != "SLURM_JOB_ID"}
    assert parse_spec("broadcast to /s/%j files { /a }", env=env).blocks[0].dest == "/s/nojob"


def test_optional_marker_and_recursive_pattern():
    spec = parse_spec("broadcast to /d files {\n ?/x/*.cfg\n ? /y/**/*.bin\n /z/a#b\n}",
                      env=ENV)
    pats = spec.blocks[0].patterns
    assert [(p.text, p.optional) for p in pats] == [
        ("/x/*.cfg", True), ("/y/**/*.bin", True), ("/z/a#b", False)]


def test_comments_anywhere_and_one_line_blocks():
    spec = parse_spec("broadcast to /d files { /a /b } # trailing\n# x\n"
                      "broadcast to /e files { /c }", env=ENV)
    assert [len(b.patterns) for b in spec.blocks] == [2, 1]


def test_relative_patterns_are_relative_to_the_spec_file(tmp_path):
    (tmp_path / "s.hook").write_text("broadcast to /d files { data/*.tif ../up }")
    spec = load_spec(str(tmp_path / "s.hook"), env=ENV)
    assert [p.text for p in spec.blocks[0].patterns] == [
        str(tmp_path / "data" / "*.tif"), str(tmp_path.parent / "up")]


def test_h5_kind_is_parsed():
    assert parse_spec("broadcast to /d h5 { /a.h5:/ }", env=ENV).blocks[0].kind == "h5"


def test_destination_is_normalised():
    assert parse_spec("broadcast to /d//e/ files { /a }", env=ENV).blocks[0].dest == "/d/e"


def test_load_missing_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(str(tmp_path / "nope.hook"))
    assert str(info.value) == f"{tmp_path / 'nope.hook'}: spec file not found: check the path"


def test_load_directory(tmp_path):
    with pytest.raises(SpecError, match="is a directory"):
        load_spec(str(tmp_path))


def test_default_env_is_os_environ(monkeypatch):
    monkeypatch.setenv("MPISTAGE_TEST_DIR", "/from/env")
    spec = parse_spec("broadcast to /d files { $MPISTAGE_TEST_DIR/a }")
    assert spec.blocks[0].patterns[0].text == "/from/env/a"
    assert os.environ["MPISTAGE_TEST_DIR"] == "/from/env"
