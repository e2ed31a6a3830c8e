"""``--then``: a program run on a scan's drained results while the job serves the next.

An argv template (no shell; ``{scan}``, ``{h5}``, ``{out}`` filled in) run on rank
0's node once ``OUT/<scan>.h5`` is drained, output in ``OUT/<scan>.then.log``
(docs/guide/hedm.md, "Live"); the job waits for every command and exits 1 if one
failed. The child runs without the launcher's variables
(:func:`core.mpi.launcher.without_launcher`), so a program that starts MPI becomes
its own job instead of a second rank 0 of this one.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from typing import Dict, List, Tuple

from core.mpi.launcher import without_launcher

__all__ = ["AfterScan"]


class AfterScan:
    """Rank 0's ``--then`` commands: :meth:`start` one per drained scan, :meth:`wait` for
    all. A template that does not split or names no executable program is refused
    (ValueError) before the job starts."""

    def __init__(self, template: str, out: str, say=print) -> None:
        try:
            self.argv = shlex.split(template)
        except ValueError as e:
            raise ValueError(f"--then {template!r}: {e}") from None
        if not self.argv:
            raise ValueError("--then: an empty command")
        broken = [i for i, a in enumerate(self.argv) if not a.strip()]
        if broken:
            raise ValueError(f"--then {template!r}: argument {broken[0]} "
                             f"{self.argv[broken[0]]!r} is a line break (a backslash-newline "
                             "inside quotes?): give the command on one line")
        if shutil.which(self.argv[0]) is None:
            where = "is not an executable file" if os.sep in self.argv[0] else \
                "is not found on PATH"
            raise ValueError(f"--then {template!r}: the program {self.argv[0]!r} {where}")
        self.out = out
        self.say = say
        self.running: List[Tuple[str, subprocess.Popen, str]] = []
        self.failed: List[str] = []

    def start(self, scan: str) -> None:
        """Start the command for ``scan`` (its files drained to ``out``), or say why not."""
        report = os.path.join(self.out, f"{scan}.json")
        try:
            with open(report, encoding="utf-8") as f:
                served = bool(json.load(f).get("served"))
        except (OSError, ValueError, AttributeError) as e:
            served, report = False, f"{report} unreadable: {e}"
        if not served:
            self.say(f"stager stream: scan {scan}: --then not run: the scan was not served "
                     f"(see {report})")
            self.failed.append(scan)
            return
        values = {"{scan}": scan, "{h5}": os.path.join(self.out, f"{scan}.h5"),
                  "{out}": self.out}
        argv = [_fill(t, values) for t in self.argv]
        log = os.path.join(self.out, f"{scan}.then.log")
        try:        # never raises: it runs inside the scan's collective finish, on rank 0
            with contextlib.suppress(FileNotFoundError):
                os.unlink(log)      # an earlier job's; never opened through a planted link
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644)
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd,
                                        stderr=subprocess.STDOUT, env=without_launcher())
            finally:
                os.close(fd)
        except OSError as e:
            self.say(f"stager stream: scan {scan}: --then {argv[0]}: {e.strerror} "
                     f"({e.filename or log})")
            self.failed.append(scan)
            return
        self.say(f"stager stream: scan {scan}: started {shlex.join(argv)} (log {log})")
        self.running.append((scan, proc, log))

    def wait(self) -> bool:
        """Wait for every command; say how each ended. True when all exited 0 (and every
        scan was handed on)."""
        for scan, proc, log in self.running:
            rc = proc.wait()
            self.say(f"stager stream: scan {scan}: --then exited {rc} (log {log})")
            if rc != 0:
                self.failed.append(scan)
        self.running = []
        return not self.failed

    def stop(self) -> None:
        """End the commands still running (the job was interrupted or failed)."""
        for _, proc, _ in self.running:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in self.running:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.running = []


def _fill(token: str, values: Dict[str, str]) -> str:
    for key, value in values.items():
        token = token.replace(key, value)
    return token
