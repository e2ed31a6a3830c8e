"""sbatch templates: the pure renderer, discovery, and `stager sbatch` (no Slurm needed)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stager import sbatch
from stager.sbatch import TemplateError, parse_assignments, render

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sbatch.find_templates([str(REPO / "slurm")])


def _values(info: sbatch.TemplateInfo) -> dict:
    """A value for every required parameter, distinct so each can be found in the output."""
    return {p.name: f"VALUE-{p.name}" for p in info.params if p.required}


def _stager(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stager", *args], check=False, capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=60)


def test_the_issue_templates_exist() -> None:
    names = {t.name for t in TEMPLATES}
    assert {"stage-run-drain", "datawarp-private", "datawarp-striped", "lua-bb"} <= names


@pytest.mark.parametrize("info", TEMPLATES, ids=lambda t: t.name)
def test_declared_parameters_match_placeholders(info: sbatch.TemplateInfo) -> None:
    text = Path(info.path).read_text()
    _, params, body = sbatch.parse_header(text, info.path)
    declared = {p.name for p in params}
    used = set(sbatch.placeholders(body))
    assert used == declared, f"undeclared: {used - declared}, unused: {declared - used}"
    assert info.description, "every template needs a '#@ description:' line"
    assert all(p.help for p in params), [p.name for p in params if not p.help]


@pytest.mark.parametrize("info", TEMPLATES, ids=lambda t: t.name)
def test_render_with_required_parameters(info: sbatch.TemplateInfo) -> None:
    values = _values(info)
    assert values, "each template has required parameters"
    out = render(Path(info.path).read_text(), values, where=info.name)
    assert out.startswith("#!/bin/bash\n")
    assert "#@" not in out
    for name, value in values.items():
        assert value in out, name
    for p in info.params:
        if not p.required and p.default:
            assert p.default in out, f"default of {p.name} not rendered"
    assert sbatch.placeholders(out) == []
    # Shell variables survive: every template uses SLURM or DataWarp variables.
    assert "$SLURM" in out or "$DW_JOB" in out or "${!BB_VAR" in out
    # sbatch reads #SBATCH lines only before the first command.
    lines = out.splitlines()
    first_cmd = next(i for i, ln in enumerate(lines[1:], 1)
                     if ln.strip() and not ln.startswith("#"))
    assert all(i < first_cmd for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    if shutil.which("bash"):
        check = subprocess.run(["bash", "-n"], check=False, input=out, text=True,
                               capture_output=True)
        assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("info", TEMPLATES, ids=lambda t: t.name)
def test_render_without_required_parameters_names_every_one(info: sbatch.TemplateInfo) -> None:
    required = [p.name for p in info.params if p.required]
    with pytest.raises(TemplateError) as e:
        render(Path(info.path).read_text(), {}, where=info.name)
    for name in required:
        assert repr(name) in str(e.value)
        assert f"--set {name}=VALUE" in str(e.value)
    # Leaving out exactly one names that one only.
    values = _values(info)
    dropped = required[-1]
    del values[dropped]
    with pytest.raises(TemplateError, match=f"missing required parameter '{dropped}'"):
        render(Path(info.path).read_text(), values, where=info.name)


def test_render_overrides_defaults_and_rejects_unknown_keys() -> None:
    text = "#!/bin/sh\n#@ param a | required one\n#@ param b=dflt | optional\necho ${a} ${b}\n"
    assert render(text, {"a": "1"}).endswith("echo 1 dflt\n")
    assert render(text, {"a": "1", "b": "2"}).endswith("echo 1 2\n")
    with pytest.raises(TemplateError, match=r"unknown parameter 'bb'.*takes: a, b"):
        render(text, {"a": "1", "bb": "2"})


def test_only_lower_case_braced_names_are_placeholders() -> None:
    text = 'echo ${x} $x ${HOME} $SLURM_JOB_ID ${SLURMD_NODENAME} "$@" $$$$ ${x_2}\n'
    out = render(text, {"x": "X", "x_2": "Y"})
    assert out == 'echo X $x ${HOME} $SLURM_JOB_ID ${SLURMD_NODENAME} "$@" $$ Y\n'


def test_an_undeclared_placeholder_is_still_required() -> None:
    with pytest.raises(TemplateError, match="missing required parameter 'zz'"):
        render("echo ${zz}\n", {})


def test_empty_default_and_default_with_spaces() -> None:
    text = ("#@ param extra= | may be empty\n"
            "#@ param launch=mpirun --map-by ppr:1:node | spaces\n${extra}|${launch}\n")
    assert render(text, {}) == "|mpirun --map-by ppr:1:node\n"


@pytest.mark.parametrize("header, message", [
    ("#@ param Bad | upper case", "cannot read header line"),
    ("#@ nonsense", "cannot read header line"),
    ("#@ param a | x\n#@ param a | y", "parameter 'a' declared twice"),
])
def test_malformed_header_is_an_error_with_its_line(header: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message) as e:
        render("#!/bin/sh\n" + header + "\n", {}, where="t.sbatch")
    assert "t.sbatch:2:" in str(e.value) or "t.sbatch:3:" in str(e.value)


@pytest.mark.parametrize("items, message", [
    (["novalue"], "expected KEY=VALUE"),
    (["Bad=1"], "not a parameter name"),
    (["a=1", "a=2"], "given twice"),
])
def test_parse_assignments_is_strict(items: list, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        parse_assignments(items)


def test_parse_assignments_keeps_equals_in_values() -> None:
    assert parse_assignments(["workflow=a=b c", "empty="]) == {"workflow": "a=b c", "empty": ""}


def test_template_dirs_precedence(tmp_path: Path) -> None:
    assert sbatch.template_dirs([str(tmp_path)]) == [str(tmp_path)]
    env = {sbatch.ENV_PATH: f"{tmp_path}{os.pathsep}/nonexistent"}
    assert sbatch.template_dirs(None, env) == [str(tmp_path), "/nonexistent"]
    assert str(REPO / "slurm") in sbatch.template_dirs(None, {})


def test_load_template_by_name_path_and_unknown(tmp_path: Path) -> None:
    info, text = sbatch.load_template("stage-run-drain", [str(REPO / "slurm")])
    assert info.name == "stage-run-drain" and "${nodes}" in text
    own = tmp_path / "mine.sbatch"
    own.write_text("#!/bin/bash\n#@ description: mine\n#@ param n | nodes\n#SBATCH -N ${n}\n")
    info2, _ = sbatch.load_template(str(own))
    assert info2.name == "mine" and info2.params[0].name == "n"
    with pytest.raises(TemplateError,
                       match="no template named 'nope'.*available: .*stage-run-drain"):
        sbatch.load_template("nope", [str(REPO / "slurm")])


def test_cli_list_shows_templates_and_parameters() -> None:
    r = _stager("sbatch", "--list")
    assert r.returncode == 0, r.stderr
    for t in TEMPLATES:
        assert t.name in r.stdout
        for p in t.params:
            assert f"--set {p.name}=..." in r.stdout
    assert "[required]" in r.stdout and "[default '00:30:00']" in r.stdout


def test_cli_renders_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "job.sbatch"
    r = _stager("sbatch", "stage-run-drain", "--set", "nodes=4", "--set", "spec=/s/run.hook",
                "--set", "results=/tmp/r/%n", "--set", f"shared_out={tmp_path}",
                "--set", "workflow=echo 'quoted' \"twice\"", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "#SBATCH --nodes=4" in text and 'SPEC="/s/run.hook"' in text
    assert "echo 'quoted' \"twice\"" in text
    assert os.access(out, os.X_OK)
    assert [p.name for p in tmp_path.iterdir()] == ["job.sbatch"]  # no temporary file left


def test_cli_missing_parameters_exit_2_and_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "job.sbatch"
    r = _stager("sbatch", "stage-run-drain", "--set", "nodes=4", "-o", str(out))
    assert r.returncode == 2
    assert "missing required parameters 'spec'" in r.stderr
    assert not out.exists()
    r = _stager("sbatch", "stage-run-drain", "--set", "nodes")
    assert r.returncode == 2 and "expected KEY=VALUE" in r.stderr
    r = _stager("sbatch")
    assert r.returncode == 2 and "--list" in r.stderr


def test_cli_uses_the_environment_search_path(tmp_path: Path) -> None:
    (tmp_path / "only.sbatch").write_text("#!/bin/bash\n#@ description: only\necho hi\n")
    env = dict(os.environ, **{sbatch.ENV_PATH: str(tmp_path)})
    r = _stager("sbatch", "--list", env=env)
    assert r.returncode == 0 and "only" in r.stdout and "stage-run-drain" not in r.stdout
