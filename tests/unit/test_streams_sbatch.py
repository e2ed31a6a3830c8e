"""The streaming-session sbatch template (``slurm/stream-session.sbatch``), rendered without Slurm.

The generic checks of every template (parameters declared = used, #SBATCH lines
first, ``bash -n``) are in ``test_stager_sbatch.py``; these check what the session
script must do. ``tests/e2e/test_streams_session_sbatch.py`` runs it.
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stager import sbatch

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "slurm" / "stream-session.sbatch"
REQUIRED = {"nodes": "4", "rendezvous": "/shared/rv.json", "out": "/shared/out"}


def _render(**values: str) -> str:
    return sbatch.render(TEMPLATE.read_text(), {**REQUIRED, **values}, where="stream-session")


def _receive_line(text: str) -> list:
    """The receiving job's command, continuation lines joined, as shell words."""
    joined = text.replace("\\\n", " ")
    (line,) = [ln for ln in joined.splitlines() if " stream receive " in ln]
    return shlex.split(line.strip())


def test_it_is_found_and_needs_nodes_rendezvous_and_out():
    info = {t.name: t for t in sbatch.find_templates([str(REPO / "slurm")])}["stream-session"]
    assert {p.name for p in info.params if p.required} == set(REQUIRED)
    with pytest.raises(sbatch.TemplateError) as e:
        sbatch.render(TEMPLATE.read_text(), {}, where="stream-session")
    assert all(f"--set {k}=VALUE" in str(e.value) for k in REQUIRED)


def test_one_job_serves_several_scans_with_the_analysis():
    out = _render(scans="5", ranks_per_node="4", analysis="stem4d.flow",
                  receive_options="--allow-loss 0.01 --rate 1000")
    assert "#SBATCH --nodes=4" in out and "#SBATCH --ntasks-per-node=4" in out
    assert "#SBATCH --signal=B:TERM@120" in out
    words = _receive_line(out)
    # mpirun leaves rank 0 time to write a scan's report when a rank dies
    assert words[:6] == ["run", "mpirun", "--mca", "odls_base_sigkill_timeout", "5", "stager"]
    i = words.index("--scans")
    assert words[i + 1] == "5"
    assert words[words.index("--analysis") + 1] == "stem4d.flow"
    assert words[words.index("--rendezvous") + 1] == "$RV" and 'RV="/shared/rv.json"' in out
    assert words[-4:] == ["--allow-loss", "0.01", "--rate", "1000"]
    # the default finds nodes by Slurm's node name
    assert 'NODE_OPTS=(--node-id-env SLURMD_NODENAME)' in out


def test_the_rendezvous_file_is_removed_before_and_after_the_session():
    out = _render()
    body = out[out.index("cleanup() {"):]
    trap = body[:body.index("\n}\n")]
    assert 'rm -f -- "$RV"' in trap                     # at exit, whatever happened
    start = out.index('mkdir -p -- "$OUT"')
    assert out.index('rm -f -- "$RV"', start) < out.index(" stream receive ")  # stale file


def test_spill_is_drained_then_cleaned_only_when_asked():
    out = _render(spill="/dev/shm/spill/%n", node_options="--emulate-nodes 2")
    assert 'SPILL="/dev/shm/spill/%n"' in out and "NODE_OPTS=(--emulate-nodes 2)" in out
    trap = out[out.index("cleanup() {"):]
    drain, clean = trap.index(" stager drain "), trap.index(" stager clean ")
    assert drain < clean and '"$OUT/spill.hook"' in trap[clean:clean + 200]
    assert re.search(r'if \[ -n "\$SPILL" \]; then SPILL_OPTS=\(--spill "\$SPILL"\)', out)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_then_reaches_the_receiving_job_as_one_word_exactly_as_given():
    then = """python -m workflows run "hedm/ff grains.py" --out {out}/{scan}-g -- --x '$HOME' \\"""
    out = _render(then=then)
    setup = out[out.index("THEN=$(cat"):out.index('say() {')]
    # the script's own lines up to the options, then the options as the job gets them
    r = subprocess.run(["bash", "-c", setup + 'printf "%s\\n" "${THEN_OPTS[@]}"'],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"--then\n{then}\n"
    assert "${THEN_OPTS[@]}" in _receive_line(out)      # and the job is given them
    empty = _render()
    r = subprocess.run(["bash", "-c", empty[empty.index("THEN=$(cat"):empty.index('say() {')]
                        + 'echo "${#THEN_OPTS[@]}"'], capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "0", r.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_stager_sbatch_renders_it_and_bash_parses_it(tmp_path):
    job = tmp_path / "job.sbatch"
    r = subprocess.run([sys.executable, "-m", "stager", "sbatch", "stream-session", "--set",
                        "nodes=2", "--set", "rendezvous=/s/rv.json", "--set", "out=/s/out",
                        "--set", "scans=3", "-o", str(job)],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    text = job.read_text()
    assert "--scans \"3\"" in text
    assert subprocess.run(["bash", "-n", str(job)], capture_output=True).returncode == 0
