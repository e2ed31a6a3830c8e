"""Ranks as OS-level nodes on one machine: the cluster's path without a cluster.

``--emulate-nodes`` splits one host's ranks into named groups; the ranks still share
one host name, one filesystem and one shared-memory domain, so the stager's leaders
exchange through a shared-memory window. On a cluster the leaders are on different
hosts, talk by messages, learn their node from the host name, and each node's local
directory is really its own. :class:`OSNodes` gives a test that situation on this
machine (docs/contributing.md, "OS-level nodes"):

* Open MPI is given a host file of made-up hosts (``nodeA``, ``nodeB``, ...) and
  ``tests/osnode_launch.sh`` as its remote-shell agent (``plm_rsh_agent``); the agent
  starts each host's ``orted`` here, in new UTS and mount namespaces, with the host
  name set and ``ROOT/<host>`` bind-mounted over one path, :attr:`OSNodes.local`.
  Every rank of that node inherits both.
* So ``stager stage`` runs *without* ``--emulate-nodes``: nodes come from
  ``MPI_COMM_TYPE_SHARED`` and the host names, leaders of different nodes exchange
  over TCP on the loopback interface, and a destination ``LOCAL/data`` (no ``%n``) is
  a different directory on every node. The test reads node ``H``'s copies from
  outside at :meth:`OSNodes.node_dir` (``ROOT/H``).

Needs ``mpirun`` and the right to create namespaces and mount (root here); the
:meth:`OSNodes.create` skips, naming what failed, when either is missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from tests.stagerun import mpi_env

LAUNCHER = Path(__file__).resolve().parent / "osnode_launch.sh"
REPO = LAUNCHER.parent.parent


def unavailable(tmp: Path) -> Optional[str]:
    """Why OS-level nodes cannot run here, or None: tries what the launcher does."""
    if shutil.which("mpirun") is None:
        return "mpirun is not installed"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = tmp / "probe"
    (probe / "a").mkdir(parents=True, exist_ok=True)
    (probe / "b").mkdir(exist_ok=True)
    r = subprocess.run(["unshare", "--uts", "--mount", "--propagation", "private", "--",
                        "/bin/sh", "-c", 'hostname osnode-probe && mount --bind "$0" "$1" '
                        '&& hostname', str(probe / "a"), str(probe / "b")],
                       capture_output=True, text=True, timeout=30)
    shutil.rmtree(probe, ignore_errors=True)
    if r.returncode != 0 or r.stdout.strip() != "osnode-probe":
        return ("cannot create UTS and mount namespaces and bind-mount here (needs root "
                f"or CAP_SYS_ADMIN): {r.stderr.strip() or r.stdout.strip()}")
    return None


class OSNodes:
    """``len(hosts)`` OS-level nodes with ``ranks_per_node`` slots each (see the module).

    Parameters
    ----------
    tmp : pathlib.Path
        A fresh directory: holds the host file, ``nodes/<host>`` (each node's local
        directory, seen from outside) and ``local`` (the path every node sees as its
        own local directory).
    hosts : sequence of str
        Host names, one per node.
    ranks_per_node : int
        Slots per host in the host file; ``mpirun -n`` fills nodes in order.
    """

    @classmethod
    def create(cls, tmp: Path, hosts: Sequence[str] = ("nodeA", "nodeB", "nodeC", "nodeD"),
               ranks_per_node: int = 1) -> OSNodes:
        """The nodes, or ``pytest.skip`` naming what is missing (see :func:`unavailable`)."""
        why = unavailable(tmp)
        if why:
            pytest.skip(why)
        return cls(tmp, hosts, ranks_per_node)

    def __init__(self, tmp: Path, hosts: Sequence[str] = ("nodeA", "nodeB", "nodeC", "nodeD"),
                 ranks_per_node: int = 1) -> None:
        self.tmp = tmp
        self.hosts = list(hosts)
        self.ranks_per_node = ranks_per_node
        self.root = tmp / "nodes"
        self.local = tmp / "local"
        self.local.mkdir(parents=True, exist_ok=True)
        for h in self.hosts:
            (self.root / h).mkdir(parents=True, exist_ok=True)
        self.hostfile = tmp / "hostfile"
        self.hostfile.write_text("".join(f"{h} slots={ranks_per_node}\n" for h in self.hosts))

    @property
    def size(self) -> int:
        return len(self.hosts) * self.ranks_per_node

    def node_dir(self, host: str) -> Path:
        """Node ``host``'s local directory as this (outside) process sees it."""
        return self.root / host

    def env(self, **extra: str) -> Dict[str, str]:
        """The environment of ``mpirun``: a fresh job, the agent, TCP over loopback."""
        env = mpi_env(OSNODE_ROOT=str(self.root), OSNODE_LOCAL=str(self.local),
                      OMPI_MCA_plm_rsh_agent=str(LAUNCHER),
                      OMPI_MCA_plm_rsh_no_tree_spawn="1",
                      OMPI_MCA_btl="self,vader,tcp",
                      OMPI_MCA_btl_tcp_if_include="lo",
                      OMPI_MCA_oob_tcp_if_include="lo")
        env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env.update(extra)
        return env

    def command(self, args: Sequence[str], np: Optional[int] = None) -> List[str]:
        return ["mpirun", "-n", str(np or self.size), "--hostfile", str(self.hostfile),
                *args]

    def popen(self, args: Sequence[str], np: Optional[int] = None,
              env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        """Start ``mpirun ... ARGS`` in its own session (kill it as a group)."""
        return subprocess.Popen(self.command(args, np), cwd=self.tmp, env=env or self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def run(self, args: Sequence[str], np: Optional[int] = None, timeout: float = 120,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """``mpirun`` of ``ARGS`` over the nodes; a hang is killed (with every rank)."""
        proc = self.popen(args, np, env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            raise AssertionError(f"no result in {timeout} s: {self.command(args, np)}\n"
                                 f"{out}\n{err}") from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def stager(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """``mpirun ... python -m stager ARGS`` (no ``--emulate-nodes``)."""
        return self.run([sys.executable, "-m", "stager", *args], **kw)
