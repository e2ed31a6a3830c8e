"""Command apps: run an unmodified external program as a task.

The science codes are not changed or relinked: a task is an argv template whose
``{placeholders}`` are filled from the app's arguments, run with a working
directory, extra environment, and stdout/stderr sent to files. A non-zero exit
raises :class:`CommandExit` on the worker, which the runtime turns into a
:class:`~workflows.errors.CommandFailure` carrying the exit code and the tail
of stderr.

The template is split with :func:`shlex.split` *before* filling in values, so
a value with spaces stays one argument, and a token that is exactly
``{name}`` whose value is a list or tuple expands to one argument per item.
No shell is involved.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["CommandSpec", "CommandResult", "CommandExit"]

#: How much of stderr a failure message carries.
TAIL_CHARS = 2000


class CommandExit(Exception):
    """Raised on the worker when the program exits non-zero (or times out)."""

    def __init__(self, message: str, exit_code: int, stderr_tail: str):
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail

    def __reduce__(self):
        return (type(self), (self.args[0], self.exit_code, self.stderr_tail))


@dataclass(frozen=True)
class CommandResult:
    """A finished command: its argv, exit code, and where its output went."""

    argv: Tuple[str, ...]
    returncode: int
    cwd: str
    stdout_path: Optional[str]
    stderr_path: Optional[str]
    stdout: Optional[str]
    seconds: float


@dataclass(frozen=True)
class CommandSpec:
    """An argv template with its options; calling it with values runs the program."""

    name: str
    argv: Tuple[str, ...]
    cwd: Optional[str] = None
    env: Tuple[Tuple[str, str], ...] = field(default_factory=tuple)
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    timeout: Optional[float] = None

    @classmethod
    def make(cls, name: str, argv: Union[str, Sequence[str]], cwd: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, stdout: Optional[str] = None,
             stderr: Optional[str] = None, timeout: Optional[float] = None) -> CommandSpec:
        """Validate and normalise the template (a string is split like a shell)."""
        tokens = tuple(shlex.split(argv)) if isinstance(argv, str) else tuple(argv)
        if not tokens or not all(isinstance(t, str) for t in tokens):
            raise ValueError(
                f"command {name}: argv must be a non-empty list of strings, got {argv!r}"
            )
        if timeout is not None and timeout <= 0:
            raise ValueError(f"command {name}: timeout must be positive, got {timeout!r}")
        pairs = tuple(sorted((str(k), str(v)) for k, v in (env or {}).items()))
        return cls(name, tokens, cwd, pairs, stdout, stderr, timeout)

    def render(self, values: Mapping[str, Any]) -> Tuple[List[str], Optional[str], Dict[str, str]]:
        """Fill the template: (argv, cwd, extra env). Raises KeyError naming a missing key."""
        argv: List[str] = []
        for token in self.argv:
            key = token[1:-1] if token.startswith("{") and token.endswith("}") else None
            if (
                key is not None
                and key.isidentifier()
                and isinstance(values.get(key), (list, tuple))
            ):
                argv.extend(str(v) for v in values[key])
            else:
                argv.append(_fill(token, values, self.name))
        cwd = _fill(self.cwd, values, self.name) if self.cwd else None
        env = {k: _fill(v, values, self.name) for k, v in self.env}
        return argv, cwd, env

    def __call__(self, **values: Any) -> CommandResult:
        argv, cwd, extra_env = self.render(values)
        run_dir = os.path.abspath(cwd or os.getcwd())
        os.makedirs(run_dir, exist_ok=True)
        out_path = self._path(self.stdout, values, run_dir)
        err_path = self._path(self.stderr, values, run_dir)
        env = dict(os.environ)
        env.update(extra_env)
        start = time.time()
        with _open(out_path) as out, _open(err_path) as err:
            try:
                proc = subprocess.run(argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL,
                                      stdout=out if out is not None else subprocess.PIPE,
                                      stderr=err if err is not None else subprocess.PIPE,
                                      timeout=self.timeout, check=False)
            except FileNotFoundError as exc:
                raise CommandExit(
                    f"{argv[0]}: program not found ({exc.strerror})", 127, ""
                ) from None
            except subprocess.TimeoutExpired as exc:
                tail = _tail(err_path, exc.stderr)
                raise CommandExit(
                    f"{shlex.join(argv)} timed out after {self.timeout} s", -9, tail
                ) from None
        stdout = None if out_path else proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            tail = _tail(err_path, proc.stderr)
            raise CommandExit(
                f"{shlex.join(argv)} exited with code {proc.returncode}"
                + (f"; stderr ends with:\n{tail}" if tail else ""),
                proc.returncode,
                tail,
            )
        return CommandResult(tuple(argv), proc.returncode, run_dir, out_path, err_path, stdout,
                             time.time() - start)

    def _path(
        self, template: Optional[str], values: Mapping[str, Any], run_dir: str
    ) -> Optional[str]:
        if not template:
            return None
        path = os.path.join(run_dir, _fill(template, values, self.name))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return path


def _fill(template: str, values: Mapping[str, Any], name: str) -> str:
    try:
        return template.format_map(values)
    except KeyError as exc:
        raise KeyError(
            f"command {name}: template {template!r} names {exc.args[0]!r}, which is not an "
            f"argument of the app (arguments: {sorted(values)})"
        ) from None


def _open(path: Optional[str]) -> Any:
    """Open ``path`` for writing, or yield None (output captured instead)."""
    return open(path, "wb") if path else contextlib.nullcontext()


def _tail(path: Optional[str], captured: Optional[bytes]) -> str:
    if path:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - TAIL_CHARS))
                data = fh.read()
        except OSError:
            data = b""
    else:
        data = (captured or b"")[-TAIL_CHARS:]
    return data.decode(errors="replace").strip()
