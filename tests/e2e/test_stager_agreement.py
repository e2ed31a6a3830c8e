"""Ranks that see different things: every rank fails with one message, or none does; no hang.

Real launches (``mpirun -n 4``, two emulated nodes: ranks 0-1 and 2-3) where
one rank's view differs from the others':

* a different *file*: rank 2 (node1's leader) runs in its own mount namespace
  where the ``h5`` source is bind-mounted over by a file of another size, as
  if the shared filesystem had changed it under that node only. The leaders
  agree on their "changed since planning" check before the collective
  ``driver='mpio'`` open, so no leader skips the open while another waits
  inside it;
* a different *environment*: ``STAGER_CHUNK_SIZE`` or ``STAGER_H5_MEMORY``
  set differently on one rank. Rank 0 resolves every option and broadcasts
  it, so rank 0's value rules everywhere; a bad value on rank 0 is the same
  error on every rank.

Each run has a deadline: a regression fails here instead of hanging the suite.
"""
import os
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun (make setup installs it)")

# Runs the command; on the rank named by ODD_RANK, first apply ODD_ENV and, with ODD_BIND
# "SRC:ALT", bind-mount ALT over SRC in a private mount namespace (root only).
WRAPPER = """#!/bin/sh
if [ "${OMPI_COMM_WORLD_RANK}" = "${ODD_RANK}" ]; then
  if [ -n "${ODD_ENV}" ]; then export "${ODD_ENV}"; fi
  if [ -n "${ODD_BIND}" ]; then
    exec unshare -m --propagation private sh -c \\
      'mount --bind "${ODD_BIND#*:}" "${ODD_BIND%%:*}" && exec "$@"' sh "$@"
  fi
fi
exec "$@"
"""


def _run(tmp_path, args, odd_rank=None, odd_env="", odd_bind="", env_all=None, timeout=120):
    wrapper = tmp_path / "odd.sh"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ODD_RANK="" if odd_rank is None else str(odd_rank), ODD_ENV=odd_env,
               ODD_BIND=odd_bind, **(env_all or {}))
    cmd = [MPIRUN, "-n", "4", "--oversubscribe", str(wrapper), sys.executable, "-m", "stager",
           *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpirun and every rank it started
        out, err = proc.communicate()
        pytest.fail(f"ranks were left waiting (no result in {timeout} s): {' '.join(cmd)}\n"
                    f"{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _stderr_lines(proc):
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("stager ")]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="a per-rank view of a file needs a mount namespace: root and unshare")
def test_h5_source_that_changed_on_one_leader_fails_every_rank(tmp_path):
    src = tmp_path / "scan.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("entry/data/data", data=np.arange(8 * 64 * 64, dtype=np.uint16)
                         .reshape(8, 64, 64), chunks=(1, 64, 64))
    alt = tmp_path / "scan-rewritten.h5"
    with h5py.File(alt, "w") as f:
        f.create_dataset("entry/data/data", data=np.zeros((9, 64, 64), np.uint16))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n h5 {{\n  {src}:/entry/data/data\n}}\n")
    proc = _run(tmp_path, ["stage", str(spec), "--emulate-nodes", "2", "--no-progress"],
                odd_rank=2, odd_bind=f"{src}:{alt}",  # inline 0: collective reads, not the plan
                env_all={"STAGER_H5_INLINE_BYTES": "0"}, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = _stderr_lines(proc)  # rank 0 prints the agreed error once
    assert "changed since planning" in line and "node node1" in line and "rank 2" in line, line
    assert str(src) in line
    assert not list((tmp_path / "out").rglob("scan.h5")), "a copy was committed"


def _dataset(tmp_path, n=6, size=300_000):
    (tmp_path / "src").mkdir()
    for i in range(n):
        (tmp_path / "src" / f"f{i}.bin").write_bytes(os.urandom(size + i))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {tmp_path}/src/*.bin\n}}\n")
    return spec


def test_option_set_differently_on_one_rank_takes_rank_0s_value(tmp_path):
    spec = _dataset(tmp_path)
    report = tmp_path / "r.json"
    proc = _run(tmp_path, ["stage", str(spec), "--emulate-nodes", "2", "--no-progress",
                           "--json", str(report)],
                odd_rank=3, odd_env="STAGER_CHUNK_SIZE=100K",
                env_all={"STAGER_CHUNK_SIZE": "64K", "STAGER_SMALL_FILE_THRESHOLD": "1K"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    assert json.loads(report.read_text())["chunk_size"] == 64 << 10
    for node in ("node0", "node1"):
        for src in sorted((tmp_path / "src").iterdir()):
            copy = tmp_path / "out" / node / src.name
            assert copy.read_bytes() == src.read_bytes(), f"{copy} differs"


def test_bad_option_on_rank_0_is_one_error_on_every_rank(tmp_path):
    spec = _dataset(tmp_path, n=1)
    proc = _run(tmp_path, ["stage", str(spec), "--emulate-nodes", "2"],
                odd_rank=0, odd_env="STAGER_H5_MEMORY=12 potatoes")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = _stderr_lines(proc)
    assert "STAGER_H5_MEMORY" in line and "12 potatoes" in line, line
    assert not (tmp_path / "out").exists()


def test_bad_option_on_another_rank_is_ignored(tmp_path):
    spec = _dataset(tmp_path, n=1)
    proc = _run(tmp_path, ["stage", str(spec), "--emulate-nodes", "2", "--no-progress"],
                odd_rank=3, odd_env="STAGER_H5_MEMORY=12 potatoes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
