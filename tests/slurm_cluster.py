"""A real four-node Slurm cluster for tests: bring it up, submit, wait, bring it down.

Import the fixture into a test module (``from tests.slurm_cluster import
slurm_cluster``) and mark the tests ``@pytest.mark.slurm``. The cluster is
started with ``slurm/localcluster.sh`` in its own directory under /tmp and on
free ports, so it never meets a cluster a developer has running, and stopped
at the end of the session; teardown checks that no daemon it started is left.

Skips say exactly what is missing (the binaries come from ``apt-get install
slurm-wlm munge openmpi-bin``, which ``make setup`` does). A cluster that does
not come up on a machine that has them is a test *error*, with the logs.
Every wait has a deadline: a job that does not finish is cancelled and the
test fails with its output.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "slurm" / "localcluster.sh"
NEEDED = ("slurmctld", "slurmd", "munged", "mungekey", "munge", "sbatch", "scontrol",
          "squeue", "sinfo", "scancel", "srun", "mpirun")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _ports_free(base: int, count: int) -> bool:
    for port in range(base, base + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port_block(count: int = 5) -> int:
    """A base port such that ``base .. base+count-1`` are free now (pid-seeded search)."""
    start = 20000 + (os.getpid() * 7) % 20000
    for base in range(start, start + 2000, count):
        if _ports_free(base, count):
            return base
    raise RuntimeError("no block of free TCP ports found in 20000-42000")


@dataclass
class Cluster:
    """A running local cluster: its directory, ``SLURM_CONF`` and an env for jobs."""

    dir: Path
    conf: Path
    env: dict

    def run(self, *cmd: str, timeout: float = 60,
            check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def sbatch(self, script: Path, cwd: Path) -> str:
        """Submit ``script``; return the job id."""
        r = self.run("sbatch", "--parsable", str(script), check=False)
        if r.returncode != 0:
            raise AssertionError(f"sbatch {script} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict:
        """``scontrol show job -o`` as a dict (``JobState``, ``ExitCode``, ...)."""
        r = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        if r.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait(self, job_id: str, timeout: float = 240, output: Path | None = None) -> dict:
        """Poll until the job reaches a final state; cancel it and fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        info: dict = {}
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in FINAL_STATES:
                return info
            time.sleep(0.5)
        self.run("scancel", job_id, check=False)
        log = output.read_text() if output and output.exists() else "(no output file)"
        raise AssertionError(f"job {job_id} did not finish within {timeout:.0f} s "
                             f"(last state {info.get('JobState')}); cancelled. Output:\n{log}")

    def pids(self) -> list[int]:
        """Pids of the daemons this cluster started that are still alive."""
        alive = []
        for f in list(self.dir.glob("run/*.pid")) + list(self.dir.glob("munge/*.pid")):
            try:
                pid = int(f.read_text().strip())
                os.kill(pid, 0)
                alive.append(pid)
            except (OSError, ValueError):
                pass
        return alive


def _skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"the local Slurm cluster needs Linux, this is {sys.platform}"
    missing = [c for c in NEEDED
               if shutil.which(c) is None and not os.path.exists(f"/usr/sbin/{c}")]
    if missing:
        return (f"Slurm/munge/MPI commands not installed: {', '.join(missing)} "
                "(apt-get install slurm-wlm munge openmpi-bin, or `make setup`)")
    return None


@pytest.fixture(scope="session")
def slurm_cluster():
    """Session fixture: a running four-node local Slurm cluster (see module docstring)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    cdir = Path(tempfile.mkdtemp(prefix="mpistage-slurm-", dir="/tmp"))
    port = free_port_block(5)
    env = dict(os.environ)
    pythonpath = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(LOCALCLUSTER_DIR=str(cdir), LOCALCLUSTER_PORT=str(port),
               SLURM_CONF=str(cdir / "slurm.conf"),
               PATH=f"/usr/sbin:{os.path.dirname(sys.executable)}:{env.get('PATH', '')}",
               PYTHONPATH=pythonpath,
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # A job inherits this environment (sbatch --export=ALL): drop what would
    # confuse Slurm or MPI inside it when the tests themselves run in a job or under mpirun.
    for k in list(env):
        if k.startswith(("SLURM_", "OMPI_COMM_WORLD", "PMIX_")) and k != "SLURM_CONF":
            del env[k]
    cluster = Cluster(cdir, cdir / "slurm.conf", env)
    try:
        up = subprocess.run(["bash", str(SCRIPT), "up"], env=env, capture_output=True,
                            text=True, timeout=120, check=False)
        if up.returncode != 0:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}"
                             for p in sorted(cdir.glob("log/*.log")))
            pytest.fail(f"slurm/localcluster.sh up failed ({up.returncode}):\n"
                        f"{up.stdout}{up.stderr}\n{logs}", pytrace=False)
        yield cluster
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
        left = cluster.pids()
        shutil.rmtree(cdir, ignore_errors=True)
        assert not left, f"daemons still running after localcluster.sh down: pids {left}"
