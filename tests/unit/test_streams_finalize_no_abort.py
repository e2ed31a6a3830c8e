"""No ``MPI_Abort`` after a scan's data arrived (issue 41): the finalize path of a
receiving job -- merge, write, drain, ``--then`` -- never aborts; a drain that fails is
caught on every rank alike and its results kept (:func:`streams.job.output.drained`).
Read from the library's source (AST), the path a failing drain takes."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = ("streams/job/session.py", "streams/job/finalize.py", "streams/job/output.py",
           "streams/job/names.py",
           "streams/after.py", "streams/cli.py")


def _functions():
    """Every function (nested ones too) of the finalize path's modules, by name."""
    out = {}
    for m in MODULES:
        for node in ast.walk(ast.parse((ROOT / m).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.setdefault(node.name, []).append((m, node))
    return out


def _called(fn):
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            yield f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                f, ast.Attribute) else None


def _reachable(funcs, start):
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        for _, fn in funcs[name]:
            todo.extend(c for c in _called(fn) if c)
    return seen


def test_the_finalize_path_calls_no_abort():
    funcs = _functions()
    # finalize and what it calls; the command's drain callback (a closure of _receive)
    reach = _reachable(funcs, ["finalize", "drain", "drained", "start"])
    assert {"finalize", "drained", "drain"} <= reach
    for name in reach:
        for m, fn in funcs[name]:
            aborts = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                      and n.attr in ("Abort", "abort_all")]
            assert not aborts, f"{m}:{aborts}: {name} is on the finalize path and aborts"


def test_the_drain_callback_is_called_only_where_its_failure_is_caught():
    """``on_written`` (the drain) raised out of ``finalize`` into the loop, which
    aborted every rank: it is called only inside :func:`drained`'s ``try``."""
    funcs = _functions()
    (_, fin), = funcs["finalize"]
    assert "on_written" not in set(_called(fin)), "finalize calls the drain unguarded"
    (_, dr), = funcs["drained"]
    tries = [n for n in ast.walk(dr) if isinstance(n, ast.Try)]
    assert any("drain" in set(_called(t)) and t.handlers for t in tries)
