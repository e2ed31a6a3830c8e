"""Starting a receiving job and a viewer's handle on it: ``mpirun`` here (:func:`launch`)
or a Slurm batch job (:func:`launch_sbatch`, a process through :class:`SlurmJob`)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from typing import Any, Dict, Optional, Sequence

from streams.errors import StreamError
from streams.view.client import LiveJob

__all__ = ["launch", "launch_sbatch", "SlurmJob", "SLURM_FINAL_STATES"]


def launch(rendezvous: str, out: str, args: Sequence[str] = (), np_: int = 4,
           mpirun: Sequence[str] = ("mpirun", "--oversubscribe"), timeout: float = 120.0,
           **popen: Any) -> LiveJob:
    """Start ``mpirun -n np_ stager stream receive ARGS`` here (``popen`` to
    :class:`subprocess.Popen`); the job's handle. StreamError when the job exits or
    writes no rendezvous file within ``timeout`` s."""
    rendezvous, out = os.path.abspath(rendezvous), os.path.abspath(out)
    if os.path.exists(rendezvous):
        os.unlink(rendezvous)       # never attach to an earlier job's file
    cmd = [*mpirun, "-n", str(np_), sys.executable, "-m", "stager", "stream", "receive",
           "--rendezvous", rendezvous, "--out", out, *args]
    proc = subprocess.Popen(cmd, **popen)
    end = time.monotonic() + timeout
    while not os.path.exists(rendezvous):
        if proc.poll() is not None:
            raise StreamError(f"the receiving job exited with status {proc.returncode} "
                              f"before writing {rendezvous}: {' '.join(cmd)}")
        if time.monotonic() > end:
            proc.kill()
            raise StreamError(f"no rendezvous file {rendezvous} within {timeout} s")
        time.sleep(0.1)
    return LiveJob(rendezvous, out, process=proc)


#: Slurm job states after which a job runs no more (``scontrol show job``'s ``JobState``)
SLURM_FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "PREEMPTED"})


class SlurmJob:
    """A submitted batch job seen as a process (``poll``, ``wait``, ``kill``, ``returncode``)
    through ``scontrol show job``, no accounting database. ``returncode``: ``ExitCode``
    minus the ending signal; -1 when Slurm forgot the job before this handle saw it end."""

    def __init__(self, job_id: str, env: Optional[Dict[str, str]] = None) -> None:
        self.job_id = job_id
        self.env = env
        self.state = "PENDING"
        self.returncode: Optional[int] = None

    def _scontrol(self) -> Dict[str, str]:
        r = subprocess.run(["scontrol", "show", "job", "-o", self.job_id], env=self.env,
                           capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            if "invalid job id" in r.stderr.lower():
                return {"JobState": "UNKNOWN"}
            raise StreamError(f"scontrol show job {self.job_id}: {r.stderr.strip()}")
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def poll(self) -> Optional[int]:
        if self.returncode is not None:
            return self.returncode
        info = self._scontrol()
        self.state = info.get("JobState", "UNKNOWN")
        if self.state == "UNKNOWN":
            self.returncode = -1
        elif self.state in SLURM_FINAL_STATES:
            status, _, sig = info.get("ExitCode", "0:0").partition(":")
            self.returncode = -int(sig) if sig and int(sig) else int(status)
            if self.returncode == 0 and self.state != "COMPLETED":
                self.returncode = -1        # e.g. cancelled before it started
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        """The job's exit status once it ended (subprocess.TimeoutExpired after ``timeout`` s)."""
        end = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"slurm job {self.job_id}", float(timeout or 0))
            time.sleep(0.5)
        return rc

    def kill(self) -> None:
        """``scancel`` the job (the session script then writes every open scan's report)."""
        subprocess.run(["scancel", self.job_id], env=self.env, capture_output=True,
                       timeout=60, check=False)


def launch_sbatch(rendezvous: str, out: str, args: Sequence[str] = (), nodes: int = 1,
                  params: Optional[Dict[str, str]] = None, timeout: float = 600.0,
                  env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None) -> LiveJob:
    """Submit ``slurm/stream-session.sbatch`` with ``sbatch``; the job's handle once it
    wrote its rendezvous file.

    Rendered as ``stager sbatch stream-session`` does: ``rendezvous``, ``out``,
    ``nodes`` and ``params`` are its parameters, ``args`` its ``receive_options``;
    ``env`` and ``cwd`` are ``sbatch``'s, ``scontrol``'s and ``scancel``'s. The
    handle's process is a :class:`SlurmJob`. StreamError when ``sbatch`` refuses, or
    the job ends or writes no rendezvous file within ``timeout`` s (then cancelled).
    """
    from stager.sbatch import load_template, render

    rendezvous, out = os.path.abspath(rendezvous), os.path.abspath(out)
    if os.path.exists(rendezvous):
        os.unlink(rendezvous)       # never attach to an earlier job's file
    info, text = load_template("stream-session")
    script = render(text, {"nodes": str(nodes), "rendezvous": rendezvous, "out": out,
                           "receive_options": shlex.join(args), **(params or {})},
                    where=info.path)
    r = subprocess.run(["sbatch", "--parsable"], input=script, env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=120, check=False)
    if r.returncode != 0:
        raise StreamError(f"sbatch refused {info.path} ({r.returncode}): {r.stderr.strip()}")
    job = SlurmJob(r.stdout.strip().split(";")[0], env)
    end = time.monotonic() + timeout
    while not os.path.exists(rendezvous):
        if job.poll() is not None:
            raise StreamError(f"slurm job {job.job_id} ended ({job.state}, exit status "
                              f"{job.returncode}) before writing {rendezvous}: see its "
                              "output file (template parameter 'output')")
        if time.monotonic() > end:
            job.kill()
            raise StreamError(f"slurm job {job.job_id} ({job.state}) wrote no rendezvous "
                              f"file {rendezvous} within {timeout} s; cancelled")
        time.sleep(0.5)
    return LiveJob(rendezvous, out, process=job)
