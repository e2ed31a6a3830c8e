"""Kill, Ctrl-C and SIGTERM in the middle of a real ``mpirun -n 2`` staging run.

After any of them every complete copy is recorded, no temporary
file is left (or, after a SIGKILL, the next run removes it), the re-run transfers
only what was incomplete, and ``clean`` leaves the destination empty. Ctrl-C and
SIGTERM end with one line from rank 0 naming the signal, how much is complete and
the command that resumes.

The transfer is made slow on purpose (1 KiB collective rounds) so that it is still
running when the signal arrives (``mpirun`` forwards Ctrl-C about 0.5 s later); each
test takes a few seconds (the resume runs at the default chunk size).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.stagerun import Job, journal_lines, run, stager_lines, temp_files, wait_for

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")

FILES = 400
SIZE = 128 << 10
SLOW = ["--emulate-nodes", "2", "--chunk-size", "1K", "--small-file-threshold", "512",
        "--no-progress"]
FAST = ["--emulate-nodes", "2", "--no-progress"]


@pytest.fixture
def data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(FILES):
        (src / f"f{i:04d}.bin").write_bytes(os.urandom(SIZE))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {src}/*.bin\n}}\n")
    return tmp_path, spec


def _complete(tmp: Path) -> dict:
    """Per node, the names of the files present under their final name (all must be whole)."""
    out = {}
    for node in ("node0", "node1"):
        root = tmp / "out" / node
        names = set()
        for p in root.glob("f*.bin"):
            assert p.read_bytes() == (tmp / "src" / p.name).read_bytes(), f"{p} is not whole"
            names.add(p.name)
        out[node] = names
    return out


def _resume_and_clean(tmp: Path, spec: Path) -> None:
    """The re-run moves exactly what is missing somewhere; then clean leaves nothing."""
    have = _complete(tmp)
    on_all = have["node0"] & have["node1"]
    missing_bytes = SIZE * sum(FILES - len(v) for v in have.values())
    # the resume need not be slow: the chunk size is how bytes move, not what a copy is
    r = run(tmp, 2, "stage", str(spec), *FAST, "--json", str(tmp / "r.json"))
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp / "r.json").read_text())
    assert rep["files_skipped"] == len(on_all), (rep, len(on_all))
    assert rep["files_transferred"] == FILES - len(on_all)
    assert rep["bytes_written"] == missing_bytes, (rep["bytes_written"], missing_bytes)
    assert rep["extra"]["records"]["leftovers_removed"] >= 0
    have = _complete(tmp)
    assert have["node0"] == have["node1"] == {f"f{i:04d}.bin" for i in range(FILES)}
    assert temp_files(tmp / "out") == []
    r = run(tmp, 2, "verify", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0 and "all match" in r.stdout, r.stderr
    r = run(tmp, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
    assert not (tmp / "out").exists(), sorted(map(str, (tmp / "out").rglob("*")))


def _start_and_wait_for_copies(tmp: Path, spec: Path) -> Job:
    job = Job(tmp, 2, ["stage", str(spec), *SLOW])
    wait_for(lambda: journal_lines(tmp / "out" / "node0") >= 10 or job.proc.poll() is not None,
             what="the first copies")
    assert job.proc.poll() is None, "the run ended before it could be interrupted"
    return job


def _recorded(tmp: Path, node: str) -> set:
    from tests.stagerun import read_record
    from stager.planning import spec_key

    return set(read_record(str(tmp / "out" / node), spec_key(str(tmp / "s.hook"))).files)


def test_ctrl_c_on_mpirun_stops_every_rank_with_one_line_and_resumes(data):
    tmp, spec = data
    job = _start_and_wait_for_copies(tmp, spec)
    job.signal_mpirun(signal.SIGINT)  # what Ctrl-C in the terminal does
    r = job.wait(60)
    assert r.returncode != 0
    lines = stager_lines(r.stderr)
    assert len(lines) == 1, r.stderr  # mpirun forwards SIGTERM; rank 0 speaks once
    line = lines[0]
    assert line.startswith("stager stage: interrupted by SIGTERM: "), line
    assert "complete and recorded on 2 node(s)" in line and "temporary files removed" in line
    assert f"to resume, run the same command again: stager stage {spec}" in line, line
    assert temp_files(tmp / "out") == [], "temporary files left"
    have = _complete(tmp)
    for node in ("node0", "node1"):  # the record names exactly the complete copies
        assert _recorded(tmp, node) == have[node], node
    assert 0 < len(have["node0"]) < FILES
    _resume_and_clean(tmp, spec)


def test_sigterm_to_every_rank_exits_143_and_resumes(data):
    """``scancel`` and a time limit: Slurm sends SIGTERM to every process of the job."""
    tmp, spec = data
    job = _start_and_wait_for_copies(tmp, spec)
    for pid in job.rank_pids():
        os.kill(pid, signal.SIGTERM)
    r = job.wait(60)
    assert r.returncode == 143, (r.returncode, r.stderr)
    (line,) = stager_lines(r.stderr)
    assert line.startswith("stager stage: interrupted by SIGTERM: ") and "resume" in line, line
    assert temp_files(tmp / "out") == []
    have = _complete(tmp)
    for node in ("node0", "node1"):
        assert _recorded(tmp, node) == have[node], node
    _resume_and_clean(tmp, spec)


def test_sigkill_of_one_rank_ends_the_run_and_the_rerun_resumes(data):
    tmp, spec = data
    job = _start_and_wait_for_copies(tmp, spec)
    os.kill(job.rank_pids()[1], signal.SIGKILL)  # node1's leader dies without a word
    r = job.wait(60)  # mpirun SIGTERMs rank 0, stuck in a collective: the watchdog ends it
    assert r.returncode != 0
    assert "could not stop together" in r.stderr, r.stderr
    have = _complete(tmp)
    for node in ("node0", "node1"):
        # every complete copy is recorded; the killed rank's temporary file may be left ...
        assert _recorded(tmp, node) == have[node], node
    assert not [t for t in temp_files(tmp / "out") if "/node0/" in t], "rank 0 left temporaries"
    # ... and the next run, holding the lock, removes it
    _resume_and_clean(tmp, spec)
