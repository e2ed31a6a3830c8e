"""End to end on a real local Slurm cluster (four slurmd on this machine).

The session fixture starts the cluster and stops it at the end (see
tests/slurm_cluster.py). Each test renders a template, submits it with
``sbatch``, polls ``scontrol show job`` with a deadline, and checks the files.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from stager.sbatch import load_template, render
from tests.slurm_cluster import REPO, slurm_cluster  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
NODES = [f"node{i}" for i in range(1, 5)]
STAGER = f"{sys.executable} -m stager"

# The workflow step: on every node, checksum the staged copies into the node's
# results, and record which node ran it (so drain has something per node).
WORKFLOW = r"""
$MPISTAGE_LAUNCHER bash -c '
  N="$SLURMD_NODENAME"; R="${MPISTAGE_RESULTS//\%n/$N}"; mkdir -p "$R/sums"
  cd "$0/$N/data" && find . -path ./.stager -prune -o -type f ! -name ".stager-*" -print | sort \
    | xargs sha256sum > "$R/sums/sha256.txt"
  echo "$N" > "$R/node.txt"' "$LOCAL"
"""


def _dataset(root: Path) -> dict[str, str]:
    """A small source tree; returns sha256 by path relative to the data dir."""
    src = root / "src"
    (src / "sub").mkdir(parents=True)
    files = {"big.bin": os.urandom(3 << 20), "small.txt": b"hello nodes\n",
             "sub/part.dat": os.urandom(70_001), "empty": b""}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def _job_script(tmp: Path, workflow: str) -> tuple[Path, Path, Path]:
    local = tmp / "local"          # node-local storage of the four emulated nodes
    shared = tmp / "shared"
    shared.mkdir()
    spec = tmp / "run.hook"
    spec.write_text(f"broadcast to {local}/%n/data files {{\n  {tmp}/src/*\n}}\n")
    info, text = load_template("stage-run-drain")
    script = render(text, {
        "nodes": "4", "spec": str(spec), "results": f"{local}/%n/results",
        "shared_out": str(shared / "out"), "output": str(shared / "job-%j.out"),
        "time": "00:05:00", "stager": STAGER,
        "workflow": f'LOCAL="{local}"\n' + workflow,
    }, where=info.path)
    path = tmp / "job.sbatch"
    path.write_text(script)
    return path, local, shared


def _files_under(d: Path) -> list[str]:
    if not d.exists():
        return []
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if not p.is_dir())


def test_stage_run_drain_on_four_nodes(slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    sums = _dataset(tmp_path)
    script, local, shared = _job_script(tmp_path, WORKFLOW)
    job = slurm_cluster.sbatch(script, tmp_path)
    out = shared / f"job-{job}.out"
    info = slurm_cluster.wait(job, timeout=240, output=out)
    log = out.read_text() if out.exists() else "(no output)"
    assert info["JobState"] == "COMPLETED", f"job {job}: {info.get('JobState')}\n{log}"
    assert info["ExitCode"] == "0:0"
    assert info["NumNodes"] == "4" and info["NodeList"] == "node[1-4]"
    for node in NODES:
        drained = shared / "out" / node
        # Each node's copies, checksummed on that node inside the job, match the sources.
        lines = (drained / "sums" / "sha256.txt").read_text().split("\n")
        got = {name[2:]: digest for digest, name in (ln.split() for ln in lines if ln)}
        assert got == sums, f"{node}: staged copies differ from the sources"
        assert (drained / "node.txt").read_text() == f"{node}\n", "step ran on the wrong node"
        assert (shared / "out" / f".stager-drain-{node}.json").is_file()
    # The EXIT trap left every node clean: no staged file, no result, no temp file.
    assert _files_under(local) == [], f"left on the nodes: {_files_under(local)}"
    # Counts from this dataset: every source on every node; two result files per node.
    for step in ("stage", f"verified {len(sums) * len(NODES)} staged copies", "workflow",
                 "drain", f"drained {2 * len(NODES)} files", "cleanup (exit status 0)"):
        assert step in log, f"'{step}' missing from the job output:\n{log}"


def test_failing_workflow_still_cleans_the_nodes(slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    _dataset(tmp_path)
    failing = WORKFLOW + "\necho 'workflow breaks' >&2\nexit 3\n"
    script, local, shared = _job_script(tmp_path, failing)
    job = slurm_cluster.sbatch(script, tmp_path)
    out = shared / f"job-{job}.out"
    info = slurm_cluster.wait(job, timeout=240, output=out)
    log = out.read_text() if out.exists() else "(no output)"
    assert info["JobState"] == "FAILED", f"job {job}: {info.get('JobState')}\n{log}"
    assert info["ExitCode"] == "3:0"
    assert "workflow failed (exit status 3); results not drained" in log
    assert "cleanup (exit status 3)" in log
    # The workflow did write results and the stage did put copies on every node ...
    assert "workflow breaks" in log
    # ... and the trap removed all of it; nothing was drained.
    assert _files_under(local) == [], f"left on the nodes: {_files_under(local)}"
    assert not (shared / "out").exists()


def test_mpirun_in_a_job_gives_each_rank_its_node(slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    # The fact --node-id-env SLURMD_NODENAME relies on (see slurm/README.md).
    out = tmp_path / "out.txt"
    script = tmp_path / "j.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH -N 4\n#SBATCH --time=00:02:00\n"
                      f"#SBATCH --output={out}\n"
                      "mpirun -n 4 bash -c 'echo \"$OMPI_COMM_WORLD_RANK $SLURMD_NODENAME\"'\n")
    job = slurm_cluster.sbatch(script, tmp_path)
    info = slurm_cluster.wait(job, timeout=120, output=out)
    assert info["JobState"] == "COMPLETED", out.read_text()
    pairs = sorted(ln.split() for ln in out.read_text().splitlines() if ln[:1].isdigit())
    assert sorted(n for _, n in pairs) == NODES, pairs


def _where(i: int) -> tuple[int, str]:
    return i, os.environ.get("SLURMD_NODENAME", "")


def test_parsl_htex_workers_on_slurm_nodes(slurm_cluster, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    from workflows import app, foreach
    from workflows.executors.parsl import ParslExecutor
    from workflows.executors.parsl_slurm import slurm_htex_config

    for k, v in slurm_cluster.env.items():
        monkeypatch.setenv(k, v)   # SlurmProvider runs sbatch/squeue with our environment
    where = app(_where)
    ex = ParslExecutor(config=slurm_htex_config(nodes=4, run_dir=str(tmp_path / "runinfo"),
                                                walltime="00:05:00"))
    with ex:
        results = [f.result(timeout=180) for f in foreach(where, range(16))]
    assert [i for i, _ in results] == list(range(16))
    nodes = {n for _, n in results}
    assert nodes and nodes <= set(NODES), f"tasks ran outside the Slurm nodes: {nodes}"
