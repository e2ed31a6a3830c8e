"""The layout is the data path: what may import what, read from every import statement.

Every ``import``/``from ... import`` in the project's packages is read with
``ast`` -- including those inside functions, which hide dependencies from a
reader of the module's head -- and resolved to a package. The rules:

* ``core`` (the shared base: the job, MPI plumbing, options, trusted local files,
  interrupts, the error root, the plug-in table), ``hooks`` (the spec language) and
  ``kernels`` (numba kernels, detector readers) import nothing of this project; the
  stager uses the readers' HDF5 filter table;
* no two packages import each other, directly or through others (the package
  graph has no cycle), and no package imports one above it in :data:`LEVELS`;
* every plug-in table (block kinds, transfer methods, executors, stream protocols,
  commands, analysis sources) is a ``core.table.Table``: no hand-made
  ``{"name": "module:Class"}``;
* inside ``stager`` the subpackages follow the data path: ``planning`` is
  independent of everything after it, ``nodelocal`` does not reach into
  ``staging``, nothing but the command line imports the command line;
* the analyses (``analyses``: contract, geometry, sources, output, runner) sit below
  streaming: ``streams`` and the applications import them, never the reverse, and
  only their offline runner (``analyses.runner``) imports ``workflows``; ``workflows``
  imports neither ``streams`` nor ``analyses``;
* streaming (``streams``) sits beside staging, on the shared base: ``stager``,
  ``hooks``, ``kernels``, ``workflows`` and ``analyses`` never import it (``stager
  stream`` reaches it through a string in ``stager.cli.COMMANDS``);
* the applications (``hedm``, ``stem4d``) are imported by nobody;
* a block kind is one module plus one row of ``stager.planning.kinds``: nothing
  outside a kind's own modules and the tables branches on a kind's name;
* a stream protocol is one folder of ``streams/protocols/`` plus one row of its
  table: nothing outside them branches on a protocol's name (or on ``stream2``);
* one role model and message loop: ``streams`` and ``workflows`` take their MPI
  roles (one ``Roles``), loop (``core.mpi.loop``), link and tags from ``core.mpi``
  and make no point-to-point MPI call of their own;
* the job is the one way to say how ranks form nodes: no function outside the
  command-line modules takes ``emulate_nodes``/``node_id_env``, and nothing uses
  the helpers ``Job.of`` replaced.
"""
from __future__ import annotations

import ast
import os
import re
import sys
from collections import defaultdict
from typing import Dict, Iterator, Set, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("hooks", "stager", "streams", "workflows", "kernels", "hedm", "core", "stem4d",
            "analyses")


def _modules() -> Iterator[Tuple[str, str]]:
    """(dotted module name, path) of every module of the project's packages."""
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            for name in sorted(filenames):
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, name), ROOT)[:-3]
                    parts = rel.split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    yield ".".join(parts), os.path.join(dirpath, name)


def _imports(module: str, path: str) -> Set[str]:
    """Every project module ``module`` imports, anywhere in its body."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_pkg = path.endswith("__init__.py")
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = parts if is_pkg else parts[:-1]
                keep = keep[:len(keep) - (node.level - 1)]
                base = ".".join(keep + ([base] if base else []))
            # "from pkg import sub" may name a submodule: count both spellings
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] in PACKAGES)
    return found


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    return {m: _imports(m, p) for m, p in _modules()}


def _edges(graph: Dict[str, Set[str]], depth: int) -> Dict[str, Set[str]]:
    """Package -> packages it imports, packages cut at ``depth`` dotted parts."""
    out: Dict[str, Set[str]] = defaultdict(set)
    for mod, deps in graph.items():
        a = ".".join(mod.split(".")[:depth])
        for d in deps:
            b = ".".join(d.split(".")[:depth])
            if a != b:
                out[a].add(b)
    return out


def _cycle(edges: Dict[str, Set[str]]) -> list:
    """One cycle of the graph as a list of nodes, or []."""
    state: Dict[str, int] = {}
    stack: list = []

    def visit(n: str) -> list:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(edges):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return []


def test_the_reader_sees_imports_inside_functions(graph):
    # the rules below are only as good as the reading: a function-level import counts
    assert "stager.kinds.h5.check" in graph["stager.kinds.h5"]  # inside H5Kind.verify
    assert any(d.startswith("stager") for d in graph["workflows.leader"])


def test_core_spec_language_and_kernels_import_nothing_of_the_project(graph):
    assert any(m.startswith("core.") for m in graph), "no core package read"
    for mod, deps in graph.items():
        top = mod.split(".")[0]
        if top in ("core", "hooks", "kernels"):
            foreign = sorted(d for d in deps if d.split(".")[0] != top)
            assert not foreign, f"{mod} imports {foreign}: {top} must stand alone"


def test_no_two_packages_import_each_other(graph):
    edges = _edges(graph, 1)
    assert not _cycle(edges), f"package cycle: {' -> '.join(_cycle(edges))}"
    assert "hedm" not in {d for deps in edges.values() for d in deps}, \
        "the HEDM application must not be imported by the library"
    assert edges["stager"] <= {"core", "hooks", "kernels"}, \
        f"stager imports {sorted(edges['stager'])}"
    assert edges["workflows"] <= {"core", "stager", "hooks"}, \
        f"workflows imports {sorted(edges['workflows'])}"
    assert edges["analyses"] <= {"core", "stager", "hooks", "kernels", "workflows"}, \
        f"analyses imports {sorted(edges['analyses'])}"
    assert edges["streams"] <= {"core", "stager", "hooks", "kernels", "analyses"}, \
        f"streams imports {sorted(edges['streams'])}"


def test_only_the_offline_runner_of_the_analyses_imports_workflows(graph):
    # the contract, sources and output run inside a receiving job too: no task runtime
    users = sorted(m for m, deps in graph.items() if m.startswith("analyses")
                   and any(d.split(".")[0] == "workflows" for d in deps))
    assert users == ["analyses.runner"], users
    assert "analyses.output" in graph["streams.job.finalize"], "the stream job's own finish?"


# The floors of the house, lowest first: a package imports only packages on lower floors
# (workflows sits on stager for ``--stage`` and the leader hooks; the analyses' offline
# runner on workflows).
LEVELS = {"core": 0, "hooks": 1, "kernels": 1, "stager": 2, "workflows": 3, "analyses": 4,
          "streams": 5, "hedm": 6, "stem4d": 6}


def test_no_import_from_a_lower_package_to_a_higher_one(graph):
    assert set(PACKAGES) <= set(LEVELS), f"give {sorted(set(PACKAGES) - set(LEVELS))} a level"
    up = sorted(f"{mod} -> {d}" for mod, deps in graph.items() for d in deps
                if LEVELS[d.split(".")[0]] > LEVELS[mod.split(".")[0]])
    assert not up, "imports of a higher package: " + "; ".join(up)
    same = sorted(f"{mod} -> {d}" for mod, deps in graph.items() for d in deps
                  if d.split(".")[0] != mod.split(".")[0]
                  and LEVELS[d.split(".")[0]] == LEVELS[mod.split(".")[0]])
    assert not same, "imports between packages of one floor: " + "; ".join(same)


def test_streaming_sits_beside_staging(graph):
    # stager is the shared base: streams sits on it, never the other way round
    # (the applications, hedm here and stem4d, sit on streams and the analyses)
    users = sorted(m for m, deps in graph.items()
                   if any(d.split(".")[0] == "streams" for d in deps)
                   and m.split(".")[0] in ("stager", "hooks", "kernels", "workflows", "analyses"))
    assert not users, f"{users} import streams"
    from stager.cli import COMMANDS
    assert COMMANDS["stream"] == "streams.cli"


# What each stager subpackage may import (besides itself, core and stager.errors).
STAGER_LAYERS = {
    "stager.planning": {"hooks"},
    "stager.nodelocal": {"stager.planning"},
    "stager.staging": {"stager.planning", "stager.nodelocal", "hooks"},
    "stager.stageout": {"stager.planning", "stager.nodelocal", "stager.drainlog"},
    "stager.drainlog": {"stager.nodelocal"},
    "streams": {"stager.planning", "stager.nodelocal", "stager.staging"},
    # the block kinds: plug-ins above the machinery that asks them through the table
    # (stager.planning.kinds names each by "module:Class", imported when first asked)
    # (kernels.io.h5filters: the one filter table, shared with the readers)
    "stager.kinds": {"stager.planning", "stager.nodelocal", "stager.staging", "hooks",
                     "kernels"},
    # the SimGrid twin replays a plan with the staging code's own arithmetic and constants
    "stager.simulate": {"stager.planning", "stager.staging"},
}


def test_stager_subpackages_follow_the_data_path(graph):
    edges = _edges({m: {".".join(d.split(".")[:2]) if d.startswith("stager.") else
                        d.split(".")[0] for d in deps}
                    for m, deps in graph.items()}, 2)
    assert not _cycle(edges), f"stager cycle: {' -> '.join(_cycle(edges))}"
    for layer, allowed in STAGER_LAYERS.items():
        extra = edges.get(layer, set()) - allowed - {"core", "stager.errors"}
        assert not extra, f"{layer} imports {sorted(extra)}; allowed: {sorted(allowed)}"
    users = {a for a, deps in edges.items() if deps & {"stager.commands", "stager.cli"}}
    # the node flags and job_of every command shares are core.job's
    assert users <= {"stager.cli", "stager.commands", "stager.__main__"}, users


# A kind's own modules: its module or package in stager/kinds/.
KIND_OWNED = ("stager/kinds/",)
# comparing with a kind's name, a (kind, index) key, asking the plan for one kind
_BRANCH = re.compile(r"""(==|!=)\s*["'](files|h5)["']|["'](files|h5)["']\s*(==|!=|in\b)"""
                     r"""|\(\s*["'](files|h5)["']\s*,\s*\w+\s*\)|units\(\s*["']"""
                     r"""|kind\s*=\s*["'](files|h5)["']""")


def _lines(pattern: re.Pattern[str], where) -> list:
    """``rel:line: text`` of every line matching ``pattern`` in the modules
    ``where(module, relative path)`` selects."""
    found = []
    for mod, path in _modules():
        rel = os.path.relpath(path, ROOT)
        if where(mod, rel):
            with open(path, encoding="utf-8") as f:
                found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(f, 1)
                          if pattern.search(line)]
    return found


def test_a_block_kind_is_one_module_plus_one_row(graph):
    found = _lines(_BRANCH, lambda mod, rel: mod.startswith("stager")
                   and not rel.startswith(KIND_OWNED))
    assert not found, ("code branching on a block kind's name outside the kind's module "
                       "(ask the kind through stager.planning.kinds): " + "; ".join(found))
    # nothing imports a kind but the kinds themselves (the table names them by string)
    users = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                   if d.startswith("stager.kinds.") and not m.startswith("stager.kinds"))
    assert not users, "a kind imported outside stager/kinds/: " + "; ".join(users)
    # every row names one module of stager/kinds/, and every such module has its row
    from stager.planning.kinds import ROWS
    builtin = {r.partition(":")[0] for r in ROWS.values() if isinstance(r, str)}
    modules = {m for m, _ in _modules() if m.startswith("stager.kinds.") and m.count(".") == 2}
    assert builtin == modules, (builtin, modules)


# The simulators' command line (python -m streams.simulate) picks the Stream V2
# simulator with --stream2-bind: a front door, like the table.
PROTOCOL_OWNED = ("streams/protocols/", "streams/simulate.py")
_PROTOCOL_BRANCH = re.compile(r"""(==|!=)\s*["'](native|stream2|dectris-stream2)["']"""
                              r"""|["'](native|stream2|dectris-stream2)["']\s*(==|!=|in\b)"""
                              r"""|\b(if|elif|and|or|not)\b[^#]*\bstream2\b""")


def test_a_stream_protocol_is_one_folder_plus_one_row():
    found = _lines(_PROTOCOL_BRANCH, lambda mod, rel: mod.startswith("streams")
                   and not rel.startswith(PROTOCOL_OWNED))
    assert not found, ("code branching on a stream protocol outside its folder (ask the "
                       "protocol through streams.protocols): " + "; ".join(found))
    # every row names one folder of streams/protocols/, and every folder has its row
    from streams.protocols import ROWS
    builtin = {r.partition(":")[0] for r in ROWS.values() if isinstance(r, str)}
    folders = {m for m, path in _modules() if m.count(".") == 2
               and m.startswith("streams.protocols.") and path.endswith("__init__.py")}
    assert builtin == folders, (builtin, folders)
    # a protocol's options are rows of its own, not fields of the job's options
    from streams import protocols
    from streams.job.session import SessionOptions
    own = {o.name: o for o in protocols.options()}
    assert not set(own) & set(SessionOptions.__dataclass_fields__), own
    assert all(o.env == "STAGER_STREAM_" + o.name.upper() for o in own.values()), own


# The workflows' command line (workflows/run.py) runs the collective MPI executor on every
# rank itself (each executor picks its own keywords from the flags: run_options): a front
# door, like the table. Nothing else branches on an executor's name.
EXECUTOR_OWNED = ("workflows/executors/", "workflows/run.py")
_EXECUTOR_BRANCH = re.compile(r"""(==|!=)\s*["'](inline|local|mpi|parsl)["']"""
                              r"""|["'](inline|local|mpi|parsl)["']\s*(==|!=|in\b)""")


def test_an_executor_is_one_module_plus_one_row():
    found = _lines(_EXECUTOR_BRANCH, lambda mod, rel: not rel.startswith(EXECUTOR_OWNED))
    assert not found, ("code branching on an executor's name outside workflows/executors/ "
                       "(ask workflows.executors.make): " + "; ".join(found))
    with open(os.path.join(ROOT, "workflows", "executors", "__init__.py"),
              encoding="utf-8") as f:
        assert not _EXECUTOR_BRANCH.search(f.read()), "make() branches: use the table"
    # every row names a module of workflows/executors/ whose class exists
    import pkgutil

    from workflows.executors import ROWS
    for name, row in ROWS.items():
        module, _, cls = row.partition(":")
        assert module.startswith("workflows.executors.") and cls, (name, row)
        assert callable(pkgutil.resolve_name(row)), row   # engines load only when built


# point-to-point MPI calls (and matched probes): only core.mpi makes them
_P2P = re.compile(r"""\.(isend|irecv|Isend|Irecv|Iprobe|iprobe|improbe|mprobe|Probe)\("""
                  r"""|\bcomm\w*\.(send|recv|Send|Recv|probe)\(""")


def test_streams_and_workflows_take_their_mpi_link_from_stager_mpi(graph):
    found = _lines(_P2P, lambda mod, rel: mod.split(".")[0] in ("streams", "workflows"))
    assert not found, ("point-to-point MPI outside core.mpi (send through "
                       "core.mpi.link.Link): " + "; ".join(found))
    # both loops use the one link, the one loop and the one role rule and Roles
    for loop in ("streams.job.ranks", "workflows.executors.mpi.executor"):
        assert "core.mpi.link" in graph[loop], f"{loop} does not use core.mpi.link"
    for loop in ("streams.job.ranks", "workflows.executors.mpi.server",
                 "workflows.executors.mpi.worker"):
        assert "core.mpi.loop" in graph[loop], f"{loop} does not use core.mpi.loop"
    for roles in ("streams.job.roles", "workflows.executors.mpi.roles"):
        assert "core.mpi.roles" in graph[roles], f"{roles} does not use core.mpi.roles"
    others = _lines(re.compile(r"^class Roles\b"), lambda mod, rel: mod != "core.mpi.roles")
    assert not others, "a second Roles (the one is core.mpi.roles.Roles): " + "; ".join(others)


# A hand-made plug-in table: a literal dict whose values name project modules
# ("pkg.module:Attr", "pkg.module", or such a string first in a tuple).
_ROW = re.compile(r"^(" + "|".join(PACKAGES) + r")(\.\w+)+(:\w+)?$")


def _tables() -> Tuple[Set[str], Set[str]]:
    """``(every dict literal of rows, those that are the rows argument of Table(...))``,
    each as ``path:line``."""
    rows: Set[str] = set()
    in_table: Set[str] = set()
    for _, path in _modules():
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                values = [v.elts[0] if isinstance(v, ast.Tuple) and v.elts else v
                          for v in node.values]
                if any(isinstance(v, ast.Constant) and isinstance(v.value, str)
                       and _ROW.match(v.value) for v in values):
                    rows.add(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Table":
                in_table.update(f"{rel}:{a.lineno}" for a in node.args
                                if isinstance(a, ast.Dict))
    return rows, in_table


def test_every_plug_in_table_is_built_with_the_one_helper():
    from core.table import Table
    from stager.cli import COMMANDS
    from stager.planning.kinds import ROWS as KINDS
    from stager.staging.transfer import METHODS
    from streams.protocols import ROWS as PROTOCOLS
    from workflows.executors import ROWS as EXECUTORS
    from analyses.sources import SOURCES

    tables = {"kinds": KINDS, "methods": METHODS, "executors": EXECUTORS,
              "protocols": PROTOCOLS, "commands": COMMANDS, "sources": SOURCES}
    for name, table in tables.items():
        assert isinstance(table, Table), f"the {name} table is not a core.table.Table"
        assert table.names(), name
    rows, in_table = _tables()
    assert len(in_table) >= len(tables), in_table   # the reading finds the six
    assert rows <= in_table, ("a plug-in table made by hand (use core.table.Table): "
                              + "; ".join(sorted(rows - in_table)))


#: The command-line modules: the only ones where a parameter may carry an older spelling of
#: ``--node-id`` (their argument parsing turns it into ``node_id``, :func:`core.nodes.node_id_of`).
NODE_FLAG_MODULES = ("stager.commands.stage", "stager.commands.verify", "stager.commands.clean",
                     "stager.commands.drain", "streams.cli", "workflows.run", "hedm.demo")
OLD_NODE_PARAMETERS = {"emulate_nodes", "node_id_env"}
#: Gone: a job is made once (``Job.from_comm``) or from a communicator by ``Job.of`` alone.
REMOVED_JOB_HELPERS = {"comm_and_job", "acquire_job", "job_for", "co_located"}


def _python_files(*tops: str) -> Iterator[Tuple[str, str]]:
    yield from _modules()
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            for name in sorted(f for f in filenames if f.endswith(".py")):
                yield top, os.path.join(dirpath, name)


def test_the_job_is_the_one_way_to_say_how_ranks_form_nodes():
    params, helpers = [], []
    for module, path in _python_files("tests", "bench"):
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        where = os.path.relpath(path, ROOT)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                    and module.split(".")[0] in PACKAGES and module not in NODE_FLAG_MODULES:
                a = node.args
                params += [f"{where}:{node.lineno} {x.arg}" for x in
                           (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                           if x is not None and x.arg in OLD_NODE_PARAMETERS]
            used = (node.id if isinstance(node, ast.Name) else
                    node.attr if isinstance(node, ast.Attribute) else
                    node.name.rsplit(".", 1)[-1] if isinstance(node, ast.alias) else None)
            if used in REMOVED_JOB_HELPERS:
                helpers.append(f"{where}:{getattr(node, 'lineno', '?')} {used}")
    assert not params, ("a library function takes an older node keyword; take a core.job.Job "
                        "(or a comm, made a job by Job.of): " + "; ".join(params))
    assert not helpers, "a removed job helper is used (Job.of replaces them): " + "; ".join(helpers)


#: The one spec loader (``MODULE:NAME``, ``FILE.py:NAME``, a module by name or file) and
#: the one list of what a launcher tells a process.
LOADER_MODULE, LAUNCHER_MODULE = "core.table", "core.mpi.launcher"
#: ``hooks`` imports nothing of the project (above): its kind table resolves its own rows.
OWN_LOADER = {"hooks.kinds"}
#: Calls that load a module or object named at run time: only the loader makes them.
LOADING_CALLS = {"import_module", "spec_from_file_location", "module_from_spec",
                 "resolve_name"}
#: The launcher's variables (Open MPI, PMI, PMIx, srun's rank and size).
LAUNCHER_VARIABLE = re.compile(r"(OMPI_COMM_WORLD_\w+|PMIX?_\w+|SLURM_PROCID|SLURM_STEP_\w+)")


def _own_loaders_and_launcher_lists():
    loaders, variables = [], []
    for module, path in _modules():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        where = os.path.relpath(path, ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and module not in {LOADER_MODULE, *OWN_LOADER}:
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                # a module name built from a constant (f"{__package__}.{name}") is the
                # package's own plug-in, not a spec given from outside
                given = node.args and isinstance(node.args[0], (ast.Name, ast.Attribute,
                                                                 ast.Subscript, ast.Call))
                if name in LOADING_CALLS and given:
                    loaders.append(f"{where}:{node.lineno} {name}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    module != LAUNCHER_MODULE and LAUNCHER_VARIABLE.fullmatch(node.value):
                variables.append(f"{where}:{node.lineno} {node.value}")
    return loaders, variables


def test_one_spec_loader_and_one_launcher_variable_list():
    """``MODULE:NAME`` / ``FILE.py:NAME`` is loaded by ``core.table.load_object`` (or
    ``load_module``) alone, and what a launcher sets is read by ``core.mpi.launcher``
    alone: no library module imports a name it was given, or names a launcher variable."""
    loaders, variables = _own_loaders_and_launcher_lists()
    assert not loaders, ("a loader of its own (use core.table.load_object or load_module): "
                         + "; ".join(loaders))
    assert not variables, ("a launcher variable outside core.mpi.launcher (use launcher_rank, "
                           "launcher_size, under_mpi_launcher): " + "; ".join(variables))


def test_the_layout_reading_finds_an_own_loader_and_a_launcher_list(tmp_path, monkeypatch):
    """The reading above on a planted module: it would see the old spellings."""
    pkg = tmp_path / "core"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "planted.py").write_text(
        "import importlib, os\n"
        "def load(spec):\n"
        "    where, _, name = spec.rpartition(':')\n"
        "    return getattr(importlib.import_module(where), name)\n"
        "def under_mpirun():\n"
        "    return any(v in os.environ for v in ('OMPI_COMM_WORLD_SIZE', 'PMI_SIZE'))\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("core",))
    loaders, variables = _own_loaders_and_launcher_lists()
    assert loaders == ["core/planted.py:4 import_module"]
    assert [v.rsplit(" ", 1)[1] for v in variables] == ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]


#: The one temporary-then-rename writer: ``core.localfs.AtomicFile`` (an unpredictable name
#: made ``O_EXCL|O_NOFOLLOW``), renaming through ``core.commit``; and the state files'
#: writer on a trusted directory's descriptor (``core.trusted``).
RENAMING_MODULES = {"core.commit", "core.trusted"}
#: Modules that still rename a temporary file of their own (issue 44: onto AtomicFile); the
#: list only shrinks. ``kernels`` imports nothing of the project, so its writer stays.
OWN_RENAMERS_LEFT = {"kernels.io.writers", "stager.nodelocal.state",
                     "streams.security", "workflows.results",
                     "workflows.examples.mapreduce"}


def _own_renamers() -> Dict[str, list]:
    """Module -> its ``os.replace``/``os.rename`` calls (``file:line``), outside the writer."""
    found: Dict[str, list] = defaultdict(list)
    for module, path in _modules():
        if module in RENAMING_MODULES:
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr in ("replace", "rename", "renames") \
                    and isinstance(f.value, ast.Name) and f.value.id == "os":
                found[module].append(f"{os.path.relpath(path, ROOT)}:{node.lineno} os.{f.attr}")
    return found


def test_one_temporary_then_rename_writer():
    """Issue 44: a library module writes a file whole through ``core.localfs.AtomicFile``
    (``hedm.common.output_file`` for the HEDM writers), not a temporary name of its own
    renamed into place (``hedm.common.replacing`` made ``path.tmp-PID``, which a planted
    link redirected)."""
    found = _own_renamers()
    own = [w for m, where in sorted(found.items()) if m not in OWN_RENAMERS_LEFT for w in where]
    assert not own, ("a temporary-then-rename writer of its own (use core.localfs.AtomicFile "
                     "or write_bytes_atomic; hedm: hedm.common.output_file): " + "; ".join(own))
    gone = sorted(OWN_RENAMERS_LEFT - set(found))
    assert not gone, f"no longer renaming, drop from OWN_RENAMERS_LEFT: {gone}"


def test_the_layout_reading_finds_an_own_renamer(tmp_path, monkeypatch):
    """The reading above on a planted module holding the old ``replacing``."""
    pkg = tmp_path / "hedm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "planted.py").write_text(
        "import os\n"
        "def replacing(path):\n"
        "    tmp = f'{path}.tmp-{os.getpid()}'\n"
        "    yield tmp\n"
        "    os.replace(tmp, path)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("hedm",))
    assert dict(_own_renamers()) == {"hedm.planted": ["hedm/planted.py:5 os.replace"]}
