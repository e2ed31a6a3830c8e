"""Leader hooks: resolving hook names (serial)."""
from __future__ import annotations

import os

import pytest

from workflows.leader import HookContext, leader_hooks_from, resolve_hook
from workflows import HookError

CALLS_DIR_ENV = "LEADER_HOOK_TEST_DIR"


def record(ctx: HookContext) -> None:
    """A hook: one file per call, named after the phase and node."""
    path = os.path.join(os.environ[CALLS_DIR_ENV], f"{ctx.phase}-{ctx.node}-{ctx.rank}")
    with open(path, "w") as fh:
        fh.write(f"{ctx.node_index}/{ctx.n_nodes}")


def broken(ctx: HookContext) -> None:
    raise OSError(f"scratch on {ctx.node} is read-only")


# -- serial -----------------------------------------------------------------
def test_resolve_module_function_and_file(tmp_path):
    assert resolve_hook("tests.unit.test_workflows_leader_hooks:record") is record
    spec = tmp_path / "h.hook"
    spec.write_text("broadcast to /tmp/x files { /etc/hostname }\n")
    assert resolve_hook(str(spec)) == str(spec)
    assert resolve_hook(record) is record


@pytest.mark.parametrize("bad,match", [
    ("", "expected a hook spec file"),
    ("nofile-and-no-colon", "not of the form module:function"),
    ("no_such_module_qq:f", "cannot import"),
    ("os:sep", "not callable"),
])
def test_resolve_errors(bad, match):
    with pytest.raises(HookError, match=match):
        resolve_hook(bad)


def test_module_that_raises_while_importing_is_a_hook_error(tmp_path, monkeypatch):
    # Only ImportError/AttributeError used to be caught: any other error while the
    # module ran escaped before agree(), so the ranks that imported fine hung there.
    (tmp_path / "hookmod_raises.py").write_text("raise RuntimeError('no scratch here')\n")
    (tmp_path / "hookmod_syntax.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HookError, match="cannot import.*RuntimeError: no scratch here"):
        resolve_hook("hookmod_raises:f")
    with pytest.raises(HookError, match="cannot import.*SyntaxError"):
        resolve_hook("hookmod_syntax:f")


def test_flags_win_over_environment():
    env = {"STAGER_LEADER_HOOK_STARTUP": "a:b", "STAGER_LEADER_HOOK_SHUTDOWN": "c:d"}
    assert leader_hooks_from(None, None, env).startup == "a:b"
    hooks = leader_hooks_from("x:y", None, env)
    assert (hooks.startup, hooks.shutdown) == ("x:y", "c:d")
    assert leader_hooks_from(None, None, {}).startup is None


# -- MPI --------------------------------------------------------------------
