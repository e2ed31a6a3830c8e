"""core.table.Table, the one plug-in table: lazy rows, register, names, one unknown-name error."""
from __future__ import annotations

import doctest
import sys

import pytest

import core.table
from core.errors import MpistageError, UnknownName
from core.table import Table


def test_the_module_example_runs():
    assert doctest.testmod(core.table).failed == 0


def test_a_row_is_imported_only_when_first_asked_for(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    made = []
    t = Table("thing", {"hsv": "colorsys:rgb_to_hsv"}, make=lambda f: made.append(f) or f)
    assert "colorsys" not in sys.modules
    assert list(t) == ["hsv"] and t["hsv"] == "colorsys:rgb_to_hsv"
    assert t.load("hsv")(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules
    assert t.load("hsv") is t.load("hsv") and len(made) == 1   # made once


def test_register_adds_or_replaces_a_row_and_forgets_what_was_loaded():
    t = Table("thing", {"a": "string:capwords"}, about={"a": "capitalise"})
    obj = object()
    t.register("b", obj, about="an object")
    assert t.names() == ("a", "b") and t.load("b") is obj and t.about("b") == "an object"
    assert t.about("a") == "capitalise"
    t.load("a")
    t.register("a", "string:ascii_letters")
    assert t.load("a") == "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def test_an_unknown_name_is_one_error_naming_the_known_ones():
    t = Table("transfer method", {"stripe": "x:y", "naive": "x:z"}, hint="see the docs")
    for call in (t.load, t.check, t.about):
        with pytest.raises(UnknownName) as e:
            call("strip")
        assert str(e.value) == ("unknown transfer method 'strip': use one of stripe, naive "
                                "(see the docs)")
        assert isinstance(e.value, ValueError) and isinstance(e.value, MpistageError)
    with pytest.raises(UnknownName):
        t.load("string:capwords")   # a module path is a name only where the table says so


def test_paths_resolve_a_module_attr_not_in_the_table():
    t = Table("protocol", {}, make=lambda cls: cls(), paths=True)
    assert t.load("collections:OrderedDict") == {}
    with pytest.raises(UnknownName, match=r"use one of \(none\)"):
        t.load("native")


def test_load_path_imports_a_file_once_registered_and_forgets_a_failed_one(tmp_path):
    import sys

    from core.table import load_path

    good = tmp_path / "my-flow.py"
    good.write_text("VALUE = 41 + 1\n")
    mod = load_path(str(good))
    assert mod.VALUE == 42 and sys.modules["mpistage_my_flow"] is mod
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('broken on import')\n")
    with pytest.raises(RuntimeError, match="broken on import"):
        load_path(str(bad), "mpistage_test_bad")
    assert "mpistage_test_bad" not in sys.modules
    with pytest.raises(ImportError, match="cannot load"):
        load_path(str(tmp_path / "notes.txt"), "mpistage_test_txt")
    sys.modules.pop("mpistage_my_flow", None)
