"""Sphinx configuration of mpistage's user guide and API reference.

``make docs`` builds it with warnings as errors (``-W --keep-going``); Read the Docs
builds it from ``.readthedocs.yaml``. The Markdown pages are read through MyST. The
API reference is generated at every build from the ``__all__`` of each public package
of ``stager``, ``workflows``, ``analyses``, ``streams``, ``kernels`` and ``hooks``
(``docs/api/generated/``, not committed), so it follows the code when modules move. No
MPI is needed: ``mpi4py`` is always mocked, and so is any other heavy import that is not
installed (on Read the Docs: the parallel h5py, numba, ...).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

project = "mpistage"
author = "the mpistage developers"
copyright = "2026, the mpistage developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
root_doc = "index"
html_theme = "alabaster"
html_static_path = ["_static"]
html_css_files = ["wrap.css"]   # wide code blocks wrap

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}
autosummary_generate = False
suppress_warnings = [
    # NumPy-style types such as "ndarray of int64, shape (k,)" make Sphinx look up
    # "shape" (or "index", "frames") as a name, and several classes have such an
    # attribute: the ambiguity is in the type's prose, not a broken reference.
    "ref.python",
    # Pygments' EBNF lexer stops at a backslash in docs/hook-spec.md's grammar; the
    # block is still shown (in relaxed mode).
    "misc.highlighting_failure",
]

# Imports the docs build must not need: MPI always (the docs build runs without
# mpirun or an MPI library); the rest only where it is not installed.
_ALWAYS_MOCK = ["mpi4py"]
_MOCK_IF_MISSING = ["h5py", "numba", "hdf5plugin", "zmq", "msgpack", "cbor2", "lz4",
                    "dectris_compression", "parsl", "matplotlib", "tifffile", "fabio",
                    "rsciio", "libertem", "stempy", "scipy", "xxhash", "lark", "dill", "tqdm"]
autodoc_mock_imports = _ALWAYS_MOCK + [
    m for m in _MOCK_IF_MISSING if importlib.util.find_spec(m) is None]

# The packages whose public names (``__all__``) get an API page.
API_PACKAGES = ["core", "stager", "workflows", "analyses", "streams", "kernels", "hooks"]
GENERATED = DOCS / "api" / "generated"


def _declares_all(init: Path) -> bool:
    """Whether a package's ``__init__.py`` assigns ``__all__`` (read, not imported)."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for node in tree.body)


def public_packages():
    """Dotted names of the packages below API_PACKAGES that declare ``__all__``."""
    found = []
    for top in API_PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            if _declares_all(init):
                found.append(".".join(init.parent.relative_to(ROOT).parts))
    return found


def _directive(obj) -> str:
    if inspect.ismodule(obj):
        return ""
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    if callable(obj):
        return "autofunction"
    return "autodata"


def write_api_pages() -> None:
    """One page per public package: its docstring, a summary table, every public name."""
    from sphinx.ext.autodoc.mock import mock

    GENERATED.mkdir(parents=True, exist_ok=True)
    for old in GENERATED.glob("*.rst"):
        old.unlink()
    seen: set = set()
    with mock(autodoc_mock_imports):
        for modname in public_packages():
            module = importlib.import_module(modname)
            names = list(module.__all__)
            lines = [modname, "=" * len(modname), "", f".. automodule:: {modname}",
                     "   :no-members:", "", f".. currentmodule:: {modname}", "",
                     ".. autosummary::", ""]
            lines += [f"   {n}" for n in names]
            lines.append("")
            for name in names:
                try:
                    obj = getattr(module, name)
                except AttributeError:
                    raise RuntimeError(f"{modname}.__all__ names {name!r}, which {modname} "
                                       "does not define: remove it from __all__ or define "
                                       "it") from None
                directive = _directive(obj)
                if not directive:
                    lines += [f"``{name}``: the module :mod:`{obj.__name__}`.", ""]
                    continue
                lines.append(f".. {directive}:: {name}")
                if directive == "autoclass":
                    lines.append("   :members:")
                key = id(obj) if directive != "autodata" else (modname, name)
                if key in seen:  # the same object re-exported: its entry is elsewhere
                    lines.append("   :no-index:")
                seen.add(key)
                lines.append("")
            (GENERATED / f"{modname}.rst").write_text("\n".join(lines), encoding="utf-8")


def _no_inherited_value_docs(app, what, name, obj, options, lines):
    """A constant (a numpy array, a tuple) has no docstring of its own: autodoc would
    show its type's (ndarray's) instead; show nothing."""
    inherited = inspect.getdoc(type(obj)) if what in ("data", "attribute") else None
    if not isinstance(inherited, str):
        return
    type_lines = [ln.strip() for ln in inherited.splitlines() if ln.strip()][:6]
    if any(ln.strip() in type_lines for ln in lines if ln.strip()):
        lines.clear()


def setup(app):
    app.connect("autodoc-process-docstring", _no_inherited_value_docs)


write_api_pages()
