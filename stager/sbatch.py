"""sbatch templates: discovery, declared parameters, and a pure ``render``.

A template is a plain text file (``slurm/*.sbatch``) with ``${name}`` placeholders and a
header of ``#@`` lines declaring its parameters; the syntax and the search path
(keyword > ``$STAGER_TEMPLATE_PATH`` > ``slurm/`` of this source tree >
``<prefix>/share/mpistage/slurm``) are in ``slurm/README.md``. Only *lower-case, braced*
names are placeholders, so a batch script's shell variables (``$SLURM_JOB_ID``,
``${SLURMD_NODENAME}``) stay literal without escaping (:class:`string.Template`'s
machinery, with that one pattern). Rendering fails with one :class:`TemplateError`
naming *every* missing parameter and unknown ``--set`` key, so a user fixes all of them
in one go.
"""
from __future__ import annotations

import os
import re
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stager.errors import StagerError

__all__ = ["SUFFIX", "Param", "TemplateError", "TemplateInfo", "find_templates", "load_template",
           "parse_assignments", "parse_header", "placeholders", "render", "template_dirs"]

#: file name suffix of a template; the name is the file name without it
SUFFIX = ".sbatch"
ENV_PATH = "STAGER_TEMPLATE_PATH"

_NAME = r"[a-z][a-z0-9_]*"
_HEADER = re.compile(r"^#@\s?(.*)$")
_PARAM = re.compile(
    rf"^param\s+(?P<name>{_NAME})\s*(?:=(?P<default>[^|]*?))?\s*(?:\|\s*(?P<help>.*?))?\s*$")
_DESCRIPTION = re.compile(r"^description:\s*(?P<text>.*?)\s*$")


class TemplateError(StagerError):
    """A template could not be found, parsed or rendered (missing/unknown parameters)."""


# Only ${lower_case} is a placeholder; every other "$" is shell text. The
# "named" and "invalid" groups string.Template requires can never match.
_PATTERN = rf"""
    \$(?:
      (?P<escaped>\$) |
      \{{(?P<braced>{_NAME})\}} |
      (?P<named>(?!x)x) |
      (?P<invalid>(?!x)x)
    )"""
_PLACEHOLDER = re.compile(_PATTERN, re.VERBOSE)


class _Template(string.Template):
    # flags=0: string.Template's default IGNORECASE would make ${HOME} a placeholder.
    flags = re.RegexFlag(0)
    pattern = _PATTERN  # type: ignore[assignment]  # compiled by Template.__init_subclass__


@dataclass(frozen=True)
class Param:
    """A declared template parameter; ``default is None`` means required."""

    name: str
    default: str | None = None
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is None


@dataclass(frozen=True)
class TemplateInfo:
    """A template file and what its header declares."""

    name: str
    path: str
    description: str
    params: tuple[Param, ...]


def placeholders(text: str) -> list[str]:
    """Names of the ``${name}`` placeholders in ``text``, in first-use order."""
    seen: dict[str, None] = {}
    for m in _PLACEHOLDER.finditer(text):
        if m.group("braced"):
            seen.setdefault(m.group("braced"), None)
    return list(seen)


def parse_header(text: str, where: str = "<template>") -> tuple[str, tuple[Param, ...], str]:
    """Split a template into (description, declared params, body without ``#@`` lines).

    Raises
    ------
    TemplateError
        A malformed ``#@`` line or a parameter declared twice (``where:LINE: ...``).
    """
    description = ""
    params: dict[str, Param] = {}
    body: list[str] = []
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        m = _HEADER.match(line.rstrip("\r\n"))
        if not m:
            body.append(line)
            continue
        content = m.group(1).strip()
        if not content:
            continue
        d = _DESCRIPTION.match(content)
        p = _PARAM.match(content)
        if d:
            description = d.group("text")
        elif p:
            name = p.group("name")
            if name in params:
                raise TemplateError(f"{where}:{lineno}: parameter '{name}' declared twice")
            default = p.group("default")
            params[name] = Param(name, None if default is None else default.strip(),
                                 (p.group("help") or "").strip())
        else:
            raise TemplateError(
                f"{where}:{lineno}: cannot read header line {line.strip()!r}; expected "
                "'#@ description: TEXT' or '#@ param NAME[=DEFAULT] | HELP' (NAME lower-case)")
    return description, tuple(params.values()), "".join(body)


def render(template_text: str, params: Mapping[str, str], where: str = "<template>") -> str:
    """Render a template: defaults from its header, then ``params``, into ``${name}``.

    Pure: no file or environment access.

    Parameters
    ----------
    template_text : str
        The template, header included.
    params : mapping of str to str
        Values by parameter name; they override the header's defaults.
    where : str
        Name used in error messages (the template's path or name).

    Returns
    -------
    str
        The batch script, without the ``#@`` header lines.

    Raises
    ------
    TemplateError
        Naming every required parameter without a value and every key of
        ``params`` the template does not use.
    """
    _, declared, body = parse_header(template_text, where)
    used = placeholders(body)
    known = {p.name for p in declared} | set(used)
    values = {p.name: p.default for p in declared if p.default is not None}
    values.update({k: str(v) for k, v in params.items()})
    missing = [n for n in used if n not in values]
    missing += [p.name for p in declared if p.required and p.name not in values
                and p.name not in missing]
    unknown = sorted(k for k in params if k not in known)
    problems = []
    if missing:
        problems.append("missing required parameter" + ("s " if len(missing) > 1 else " ")
                        + ", ".join(repr(n) for n in missing)
                        + " (give " + " ".join(f"--set {n}=VALUE" for n in missing) + ")")
    if unknown:
        problems.append("unknown parameter" + ("s " if len(unknown) > 1 else " ")
                        + ", ".join(repr(n) for n in unknown)
                        + " (this template takes: " + (", ".join(sorted(known)) or "none") + ")")
    if problems:
        raise TemplateError(f"{where}: " + "; ".join(problems))
    return _Template(body).substitute(values)


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["key=value", ...]`` (the ``--set`` options) into a dict, strictly.

    Raises
    ------
    TemplateError
        An item without ``=``, a key that is not a lower-case name, a key given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise TemplateError(f"--set {item!r}: expected KEY=VALUE")
        if not re.fullmatch(_NAME, key):
            raise TemplateError(f"--set {item!r}: '{key}' is not a parameter name "
                                "(lower-case letters, digits and _)")
        if key in out:
            raise TemplateError(f"--set {key}=...: given twice")
        out[key] = value
    return out


def template_dirs(dirs: Sequence[str] | None = None,
                  env: Mapping[str, str] | None = None) -> list[str]:
    """Directories searched for templates, first match wins (keyword > env > default)."""
    if dirs:
        return [str(d) for d in dirs]
    env = os.environ if env is None else env
    if env.get(ENV_PATH):
        return [d for d in env[ENV_PATH].split(os.pathsep) if d]
    found = []
    source_tree = Path(__file__).resolve().parent.parent / "slurm"
    installed = Path(sys.prefix) / "share" / "mpistage" / "slurm"
    for d in (source_tree, installed):
        if d.is_dir() and str(d) not in found:
            found.append(str(d))
    return found


def _info(path: Path) -> TemplateInfo:
    try:
        text = path.read_text()
    except OSError as e:
        raise TemplateError(f"cannot read template {path}: {e.strerror}") from e
    description, params, _ = parse_header(text, str(path))
    return TemplateInfo(path.name[: -len(SUFFIX)], str(path), description, params)


def find_templates(dirs: Sequence[str] | None = None) -> list[TemplateInfo]:
    """Every ``*.sbatch`` template in the search directories, sorted by name."""
    seen: dict[str, TemplateInfo] = {}
    for d in template_dirs(dirs):
        for path in sorted(Path(d).glob("*" + SUFFIX)):
            info = _info(path)
            seen.setdefault(info.name, info)
    return sorted(seen.values(), key=lambda t: t.name)


def load_template(name_or_path: str, dirs: Sequence[str] | None = None) -> tuple[TemplateInfo, str]:
    """Find a template by name (``stage-run-drain``) or path; return its info and text.

    Raises
    ------
    TemplateError
        Not found: the message lists the directories searched and the names there.
    """
    path = Path(name_or_path)
    if path.is_file():
        info = _info(path)
        return info, path.read_text()
    name = name_or_path.removesuffix(SUFFIX)
    templates = find_templates(dirs)
    for info in templates:
        if info.name == name:
            return info, Path(info.path).read_text()
    searched = template_dirs(dirs)
    raise TemplateError(
        f"no template named {name_or_path!r} in {', '.join(searched) or '(no directory)'}; "
        f"available: {', '.join(t.name for t in templates) or 'none'} "
        f"(set {ENV_PATH} or give a path)")
