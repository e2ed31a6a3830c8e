"""A block kind is one module plus one row: the toy ``text`` kind (tests/toykind.py),
registered through the table, is parsed, planned and described serially with no
other change to the stager (staged under mpirun: tests/mpi/test_stager_toy_kind_mpi.py)."""
import os

import pytest

import tests.toykind  # noqa: F401  (registers the kind: its one row)
from hooks import SpecError, parse_spec
from stager.commands.plan import render_text
from stager.planning import build_plan
from stager.planning.kinds import kind, names


def _tree(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("ünïcode\n", encoding="utf-8")
    (tmp_path / "src" / "b.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / "src" / "c.dat").write_bytes(b"\x00\x01")
    return tmp_path


def test_the_table_holds_the_toy_after_the_built_in_kinds():
    assert names()[-1] == "text" and kind("text").name == "text"
    assert len(names()) >= 3


def test_a_text_block_is_parsed_with_the_kinds_entry_syntax(tmp_path):
    d = _tree(tmp_path)
    spec = parse_spec(f"broadcast to {d}/out text {{ src/a.txt src/b.txt@latin-1 }}\n"
                      f"broadcast to {d}/raw files {{ src/c.dat }}", base_dir=str(d))
    assert [b.kind for b in spec.blocks] == ["text", "files"]
    assert [p.selection for p in spec.blocks[0].patterns] == ["utf-8", "iso8859-1"]
    assert spec.blocks[0].patterns[1].text == os.path.join(d, "src", "b.txt")


def test_an_unknown_encoding_is_a_spec_error_at_its_column(tmp_path):
    with pytest.raises(SpecError) as e:
        parse_spec("broadcast to /tmp/out text {\n  a.txt@nope\n}", base_dir=str(tmp_path))
    assert (e.value.line, e.value.column) == (2, 9)
    assert "unknown encoding 'nope'" in str(e.value)


def test_the_kind_plans_and_describes_its_units(tmp_path):
    d = _tree(tmp_path)
    spec = parse_spec(f"broadcast to {d}/out text {{ src/*.txt@latin-1 }}\n"
                      f"scatter to {d}/raw files {{ src/c.dat }}", base_dir=str(d))
    plan = build_plan(spec)
    text = plan.units("text")
    assert [os.path.basename(u.source) for u in text] == ["a.txt", "b.txt"]
    assert {u.encoding for u in text} == {"iso8859-1"}
    assert text[0].key.endswith("@iso8859-1")
    assert len(plan.units("files")) == 1 and plan.n_outputs == 3
    assert plan.blocks[0].kind == "text" and plan.blocks[0].files == 2
    out = render_text(plan, [], "node0")
    assert "text, 2 file(s) checked to decode" in out
    assert f"{d}/src/a.txt (iso8859-1) -> {d}/out/a.txt" in out
    doc = plan.to_dict()
    assert [u["encoding"] for u in doc["outputs"]["text"]] == ["iso8859-1"] * 2


def test_two_kinds_never_land_on_one_name(tmp_path):
    from stager.errors import PlanError

    d = _tree(tmp_path)
    (d / "other").mkdir()
    (d / "other" / "a.txt").write_text("x")
    spec = parse_spec(f"broadcast to {d}/out text {{ src/a.txt }}\n"
                      f"broadcast to {d}/out files {{ other/a.txt }}", base_dir=str(d))
    with pytest.raises(PlanError, match="a.txt"):
        build_plan(spec)
