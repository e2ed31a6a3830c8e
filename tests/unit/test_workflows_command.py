"""Command apps: unmodified programs as tasks, exit codes, output files (serial)."""
from __future__ import annotations

import os
import sys

import pytest

from workflows import CommandFailure, DependencyFailure, app, command, executors

PY = sys.executable


@command([PY, "-c", "import sys; print(' '.join(sys.argv[1:]))", "{words}", "{tag}"],
         stdout="{out}")
def echo(words, tag, out):
    "Print the words and the tag into OUT."


@command([PY, "-c", "import sys; sys.stderr.write('line1\\nreason: ' + sys.argv[1]); "
          "sys.exit(int(sys.argv[2]))", "{msg}", "{code}"], stderr="{err}")
def exit_with(msg, code, err="err.txt"):
    "Write MSG to stderr and exit with CODE."


@command(f"{PY} -c 'import os; print(os.getcwd(), os.environ[\"STAGE\"])'",
         cwd="{workdir}", env={"STAGE": "{stage}"})
def where_am_i(workdir, stage):
    "Print the working directory and $STAGE (captured)."


@app
def read_text(result):
    with open(result.stdout_path) as fh:
        return fh.read()


@pytest.fixture(params=["inline", "local"])
def executor(request):
    options = {"max_workers": 2} if request.param == "local" else {"debug": True}
    with executors.make(request.param, **options) as ex:
        yield ex


def test_command_success_writes_stdout_file(executor, tmp_path):
    out = str(tmp_path / "sub" / "out.txt")
    res = echo(["a b", "c"], "t1", out)
    assert res.result().returncode == 0
    # "a b" stays one argument; the list expands to one argument per item.
    assert read_text(res).result() == "a b c t1\n"


def test_command_cwd_and_env(executor, tmp_path):
    res = where_am_i(str(tmp_path / "wd"), "stage-7").result()
    assert res.stdout.split() == [str(tmp_path / "wd"), "stage-7"]
    assert os.path.isdir(tmp_path / "wd")


def test_nonzero_exit_is_a_command_failure(executor, tmp_path):
    fut = exit_with("disk on fire", 3, str(tmp_path / "e.txt"))
    err = fut.exception()
    assert isinstance(err, CommandFailure)
    assert err.exit_code == 3
    assert "reason: disk on fire" in err.stderr_tail
    assert "exited with code 3" in str(err)
    with open(tmp_path / "e.txt") as fh:
        assert "disk on fire" in fh.read()
    dependent = read_text(fut)
    assert isinstance(dependent.exception(), DependencyFailure)


def test_exit_zero_after_retry_not_needed(executor, tmp_path):
    assert exit_with("fine", 0, str(tmp_path / "e.txt")).result().returncode == 0


def test_missing_program(executor):
    @command(["/nonexistent/program-xyz", "{x}"])
    def missing(x):
        "No such program."

    err = missing(1).exception()
    assert isinstance(err, CommandFailure) and err.exit_code == 127


def test_template_key_must_be_an_argument():
    with pytest.raises(KeyError, match="nope"):
        @command(["echo", "{nope}"])
        def bad(x):
            "Template names an argument that does not exist."


def test_bad_arguments_fail_at_call():
    with executors.make("inline"):
        with pytest.raises(TypeError, match="echo"):
            echo("only-one")
