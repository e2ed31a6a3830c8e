"""Helpers of the end-to-end tests that run ``stager`` under a real ``mpirun``.

Each run is a fresh job in its own session (so a test can signal ``mpirun`` or its
ranks, and a hang is killed as a group). A wrapper script records each rank's pid
in ``PIDDIR/pid.RANK`` before ``exec``-ing the stager, so tests can signal one rank.
"""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

WRAPPER = """#!/bin/sh
echo $$ > "$STAGER_TEST_PIDDIR/pid.$OMPI_COMM_WORLD_RANK"
exec "$@"
"""


def mpi_env(**extra: str) -> Dict[str, str]:
    """The environment of a fresh job. ``STAGER_TEST_CODE=DIR`` runs the stager from
    another checkout (``git archive main | tar -x -C DIR``): how these tests were shown
    to fail on code without the guards they check."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if os.environ.get("STAGER_TEST_CODE"):
        env["PYTHONPATH"] = os.environ["STAGER_TEST_CODE"]
    for k in list(env):  # a fresh job even if pytest itself runs under mpirun
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "OMPI_MCA_ess", "OMPI_MCA_orte")):
            env.pop(k)
    env.update(extra)
    return env


class Job:
    """``mpirun -n NP stager ARGS`` started in the background."""

    def __init__(self, tmp: Path, np: int, args: List[str], user: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.piddir = tmp / f"pids-{time.monotonic_ns()}"
        self.piddir.mkdir()
        os.chmod(self.piddir, 0o777)
        wrapper = tmp / "rankpid.sh"
        wrapper.write_text(WRAPPER)
        wrapper.chmod(0o755)
        cmd = ["mpirun", "-n", str(np), str(wrapper), sys.executable, "-m", "stager", *args]
        if user is not None:
            cmd = ["runuser", "-u", user, "--", *cmd]
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=mpi_env(STAGER_TEST_PIDDIR=str(self.piddir), HOME=str(tmp), **(env or {})),
            start_new_session=True)
        self.np = np

    def rank_pids(self, timeout: float = 30) -> List[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = sorted(glob.glob(str(self.piddir / "pid.*")))
            if len(files) == self.np:
                try:
                    return [int(Path(f).read_text()) for f in files]
                except ValueError:
                    pass
            time.sleep(0.01)
        raise AssertionError(f"ranks did not start: {self.cmd}")

    def signal_mpirun(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 120) -> subprocess.CompletedProcess:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # mpirun and every rank it started
            out, err = self.proc.communicate()
            raise AssertionError(f"no result in {timeout} s: {' '.join(self.cmd)}\n{out}\n"
                                 f"{err}") from None
        return subprocess.CompletedProcess(self.cmd, self.proc.returncode, out, err)


def run(tmp: Path, np: int, *args: str, timeout: float = 120, user: Optional[str] = None,
        env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    return Job(tmp, np, list(args), user=user, env=env).wait(timeout)


def wait_for(cond: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def journal_lines(root: Path) -> int:
    """Complete copy entries in the journals of a root's state directory."""
    n = 0
    for j in (root / ".stager").glob("*.journal"):
        n += sum(1 for line in j.read_bytes().split(b"\n") if b'"op":"copy"' in line)
    return n


def stager_lines(stderr: str, prefix: str = "stager ") -> List[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith(prefix)]


def temp_files(root: Path) -> List[str]:
    """Temporary files anywhere below ``root`` (``.stager-tmp-*``)."""
    return sorted(str(p) for p in root.rglob(".stager-tmp-*"))


def read_record(root: str, key: str) -> Any:
    """Spec ``key``'s record in ``root`` (empty if none), read without taking the lock."""
    from stager.nodelocal import record as records
    from stager.nodelocal.state import RootState

    state = RootState.open(root)
    if state is None:
        return records.SpecRecord(key=key, root=os.path.normpath(os.path.abspath(root)))
    try:
        return state.load(key)
    finally:
        state.close()
