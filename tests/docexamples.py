"""The shell and Python examples of README.md, docs/guide/*.md and docs/api/*.md, as data,
and how to run them.

Every fenced block whose info string is ``sh`` or ``python`` is an example, and so is an
unlabelled block preceded by ``<!-- docs-test: hook-spec -->`` (a hook spec, parsed
with :func:`hooks.parse_spec`). A block preceded by ``<!-- docs-test: skip REASON -->``
is not run, and the reason is reported. A Python block whose first line is a comment
naming a file (``# my_udf.py``) is written to that file for the examples after it;
any other Python block is run with ``python``.

The examples of one document run in order, in one sandbox, as a user runs them from a
clone: the current directory holds links to the clone's tracked top-level entries (so
``workflows/examples/mapreduce.py`` is found) and receives what the examples write;
``HOME`` is the sandbox (``~/tour``), ``USER`` is unique to the run (``/dev/shm/$USER``),
exported variables and the current directory carry over from one block to the next, and
a shell block's background jobs (``... &``) are waited for and must exit 0.

Hand-written rather than Sybil or pytest-examples: those run Python blocks in one
interpreter, while almost every example here is a shell block that starts ``mpirun``
and background jobs, which needs a sandboxed ``bash`` per block anyway. Parsing is
markdown-it-py's (what MyST itself uses), so a block is an example exactly when Sphinx
renders it as one.
"""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md"] + sorted(
    str(p.relative_to(ROOT)) for folder in ("guide", "api")
    for p in (ROOT / "docs" / folder).glob("*.md"))
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<word>[\w-]+)\s*(?P<rest>.*?)\s*-->", re.S)
FILE_LINE = re.compile(r"#\s*(?P<name>[\w.-]+\.py)\s*$")
#: Seconds one example may take. The HEDM guide's manual run compiles every numba kernel
#: on a cold cache in a fresh clone: 80 s at load average 1.5, more than 180 s in a CI
#: run at load 6-9 (measured 2026-11-27), so the allowance is generous.
TIMEOUT = 420


@dataclass(frozen=True)
class Example:
    """One fenced block of a document."""

    document: str
    line: int             #: 1-based line of the opening fence
    kind: str             #: "sh", "python", "hook-spec"
    text: str
    skip: Optional[str] = None   #: why it is not run (the directive's reason)

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def file_name(self) -> Optional[str]:
        """The file a Python block is written to (its first line names it), or None."""
        if self.kind != "python":
            return None
        first = self.text.lstrip("\n").split("\n", 1)[0]
        m = FILE_LINE.fullmatch(first.strip())
        return m.group("name") if m else None


def examples(document: str) -> List[Example]:
    """The examples of ``document`` (a path relative to the clone), in order."""
    from markdown_it import MarkdownIt

    text = (ROOT / document).read_text(encoding="utf-8")
    found: List[Example] = []
    pending: Optional[re.Match] = None
    for tok in MarkdownIt("commonmark").parse(text):
        if tok.type in ("html_block", "html_inline"):
            pending = DIRECTIVE.search(tok.content) or pending
            continue
        if tok.type != "fence":
            if tok.type.endswith("_open") or tok.type in ("inline",):
                # a directive applies to the very next block, not to one after a paragraph
                if tok.type == "inline" or tok.type == "paragraph_open":
                    pending = None
            continue
        info = tok.info.strip().split()[0] if tok.info.strip() else ""
        word = pending.group("word") if pending else None
        line = (tok.map[0] + 1) if tok.map else 0
        kind = {"sh": "sh", "python": "python"}.get(info)
        if word == "hook-spec" and not info:
            kind = "hook-spec"
        if kind is not None:
            skip = None
            if word == "skip":
                skip = pending.group("rest") if pending else None
                if not skip:
                    raise ValueError(f"{document}:{line}: docs-test: skip needs a reason")
            found.append(Example(document, line, kind, tok.content, skip))
        elif word not in (None,):
            raise ValueError(f"{document}:{line}: docs-test: {word} before a block that is "
                             f"not an example (info {info!r})")
        pending = None
    return found


def all_examples() -> List[Example]:
    return [e for doc in DOCUMENTS for e in examples(doc)]


class Sandbox:
    """Where one document's examples run, one after the other."""

    def __init__(self, folder: Path, document: str):
        self.folder = folder
        self.user = f"mpistage-docs-{os.getpid()}-{Path(document).stem.lower()}"
        self.state = folder / ".docs-test-env"
        for name in _tracked_entries(ROOT):
            (folder / name).symlink_to(ROOT / name)
        env = dict(os.environ)
        env.update(HOME=str(folder), USER=str(self.user), LOGNAME=str(self.user),
                   PYTHONPATH=str(ROOT), PATH=os.path.dirname(sys.executable) + os.pathsep
                   + env.get("PATH", ""),
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", STAGER_PROGRESS="0",
                   PYTHONDONTWRITEBYTECODE="1")
        self.env = env
        self.cwd = folder

    def run(self, example: Example) -> subprocess.CompletedProcess:
        """Run one example; raise ``AssertionError`` with its output if it fails."""
        if example.kind == "hook-spec":
            import stager.planning.kinds  # noqa: F401  (registers the kinds, as `stager plan`)
            from hooks import parse_spec

            parse_spec(example.text, path=f"{example.id}")
            return subprocess.CompletedProcess([], 0, "", "")
        if example.kind == "python":
            name = example.file_name
            if name:
                (self.cwd / name).write_text(example.text, encoding="utf-8")
                return subprocess.CompletedProcess([], 0, f"wrote {name}", "")
            script = self.folder / f".docs-test-{example.line}.py"
            script.write_text(example.text, encoding="utf-8")
            return self._call([sys.executable, str(script)], example)
        script = self.folder / f".docs-test-{example.line}.sh"
        script.write_text(_wrapped(example.text, self.state), encoding="utf-8")
        return self._call(["bash", str(script)], example)

    def _call(self, argv: List[str], example: Example) -> subprocess.CompletedProcess:
        proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            # SIGTERM first: mpirun passes it on to its ranks (they have process groups
            # of their own), then SIGKILL whatever is left
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            raise AssertionError(f"{example.id}: still running after {TIMEOUT} s\n"
                                 f"{out[-4000:]}") from None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # anything the example left running
            except ProcessLookupError:
                pass
        cwd_file = self.state.with_suffix(".cwd")
        if cwd_file.exists():
            self.cwd = Path(cwd_file.read_text().strip())
        if proc.returncode != 0:
            raise AssertionError(f"{example.id}: exit {proc.returncode}\n"
                                 f"--- example ---\n{example.text}--- output ---\n{out[-6000:]}")
        return subprocess.CompletedProcess(argv, 0, out, "")

    def close(self) -> None:
        """Remove what the examples left in ``/dev/shm/$USER`` and ``/tmp/$USER``."""
        for root in ("/dev/shm", "/tmp"):
            shutil.rmtree(os.path.join(root, self.user), ignore_errors=True)


def _tracked_entries(root: Path) -> List[str]:
    """The clone's top-level entries a user finds in a fresh clone: the tracked ones
    (``git ls-files``), not what a run made there (``make demo``'s ``demo-out/``, which
    an example writing ``demo-out/`` must not write through). Not a git checkout (an
    unpacked archive): every entry ``.gitignore`` does not name. Hidden entries never."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                             capture_output=True, text=True).stdout
        names = {path.split("/", 1)[0] for path in out.split("\0") if path}
    except (OSError, subprocess.CalledProcessError):
        ignore = root / ".gitignore"
        patterns = [line.strip().strip("/") for line in
                    (ignore.read_text().splitlines() if ignore.exists() else [])]
        names = {e.name for e in root.iterdir()
                 if not any(p and fnmatch.fnmatch(e.name, p) for p in patterns)}
    return sorted(n for n in names if not n.startswith(".") and (root / n).exists())


def _wrapped(text: str, state: Path) -> str:
    """``text`` run with ``set -e``, the previous block's variables and directory, and its
    background jobs waited for (each must exit 0)."""
    return "\n".join([
        "set -e",
        f"[ -f {state} ] && source {state}",
        f"[ -f {state.with_suffix('.cwd')} ] && cd \"$(cat {state.with_suffix('.cwd')})\"",
        text,
        "for _job in $(jobs -p); do wait $_job || { _rc=$?; "
        "echo \"docs-test: a background job exited $_rc\" >&2; exit $_rc; }; done",
        f"export -p > {state}",
        f"pwd > {state.with_suffix('.cwd')}",
        ""])


def summary(reports) -> List[str]:
    """Lines for the end of the test session: how many examples ran, were skipped, and why."""
    passed = failed = 0
    skipped: Dict[str, int] = {}
    for rep in reports:
        if rep.when == "call" and rep.passed:
            passed += 1
        elif rep.failed:
            failed += 1
        elif rep.skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            reason = reason.removeprefix("Skipped: ")
            skipped[reason] = skipped.get(reason, 0) + 1
    lines = [f"docs examples: {passed + failed} ran ({passed} passed, {failed} failed), "
             f"{sum(skipped.values())} skipped"]
    lines += [f"  skipped {n}: {why}" for why, n in sorted(skipped.items())]
    return lines
