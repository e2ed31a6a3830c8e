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


def test_load_object_the_one_spec_loader(tmp_path, monkeypatch):
    """``MODULE:NAME``, ``FILE.py:NAME``, a dotted name, a default name, the module itself;
    each failure an ImportError naming what is missing."""
    from core.table import load_object

    (tmp_path / "my_hook.py").write_text("class A:\n    b = 7\nANALYSIS = 'default'\n")
    monkeypatch.chdir(tmp_path)
    assert load_object("json:dumps")([1]) == "[1]"
    assert load_object("my_hook.py:A.b") == 7
    assert load_object("my_hook.py", "ANALYSIS") == "default"
    assert load_object("json").__name__ == "json"
    for spec, match in [("my_hook.py:C", "my_hook.py defines no C"),
                        ("gone.py:f", "file gone.py does not exist"),
                        ("no_such_module_x:f", "no_such_module_x"),
                        ("json:", "expected MODULE:NAME"), (":f", "expected MODULE:NAME"),
                        ("json:1x", "expected MODULE:NAME")]:
        with pytest.raises(ImportError, match=match):
            load_object(spec)


def test_under_an_mpi_launcher_not_a_slurm_batch_step(monkeypatch):
    from core.mpi import launcher

    for var in launcher._RANK + launcher._SIZE:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")
    assert launcher.launcher_rank() == 0 and not launcher.under_mpi_launcher()
    monkeypatch.setenv("PMIX_RANK", "2")
    assert launcher.under_mpi_launcher() and launcher.launcher_rank() == 2
