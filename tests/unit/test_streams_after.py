"""streams.after.AfterScan (``stager stream receive --then``): a served scan's command runs
with its placeholders filled, its output in OUT/<scan>.then.log; a scan not served is not
handed on; a failing command, a missing program or an unsplittable template is said."""
import json
import os
import sys
import time

import pytest

from core.mpi.launcher import without_launcher
from streams.after import AfterScan

PRINT_ARGV = f"{sys.executable} -c 'import sys; print(sys.argv[1:])'"


def _scan(out, name, served=True):
    (out / f"{name}.json").write_text(json.dumps({"served": served}))
    (out / f"{name}.h5").write_bytes(b"")


def test_a_served_scan_runs_the_command_with_its_files(tmp_path):
    said = []
    then = AfterScan(PRINT_ARGV + " {h5} 'scan {scan}' --out={out}/{scan}-grains", str(tmp_path),
                     said.append)
    _scan(tmp_path, "s1")
    then.start("s1")
    assert then.wait(), said
    log = (tmp_path / "s1.then.log").read_text()
    assert log.strip() == str([str(tmp_path / "s1.h5"), "scan s1",
                               f"--out={tmp_path}/s1-grains"])
    assert any("--then exited 0" in m for m in said), said


def test_a_scan_not_served_is_not_handed_on_and_fails_the_job(tmp_path):
    said = []
    then = AfterScan(PRINT_ARGV + " {h5}", str(tmp_path), said.append)
    _scan(tmp_path, "s2", served=False)
    then.start("s2")
    then.start("s3")            # no report at all
    assert not then.wait()
    assert not (tmp_path / "s2.then.log").exists()
    assert "the scan was not served" in said[0] and "s2.json" in said[0]
    assert "s3.json unreadable" in said[1]


def test_a_failing_or_missing_program_fails_the_job(tmp_path):
    said = []
    _scan(tmp_path, "a")
    fails = AfterScan(f"{sys.executable} -c 'raise SystemExit(3)'", str(tmp_path), said.append)
    fails.start("a")
    assert not fails.wait() and "--then exited 3" in said[-1]
    gone = tmp_path / "indexer"          # there at the start, gone when the scan ends
    gone.write_text("#!/bin/sh\n")
    gone.chmod(0o755)
    missing = AfterScan(f"{gone} {{h5}}", str(tmp_path), said.append)
    gone.unlink()
    missing.start("a")
    assert not missing.wait() and str(gone) in said[-1]


def test_stop_ends_a_running_command(tmp_path):
    _scan(tmp_path, "b")
    then = AfterScan(f"{sys.executable} -c 'import time; time.sleep(60)'", str(tmp_path),
                     lambda m: None)
    then.start("b")
    t0 = time.monotonic()
    then.stop()
    assert time.monotonic() - t0 < 30 and then.running == []


def test_a_template_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match="--then"):
        AfterScan("indexer 'unclosed", "/tmp")
    with pytest.raises(ValueError, match="empty"):
        AfterScan("  ", "/tmp")


def test_a_command_that_cannot_run_is_refused_before_the_job_starts():
    """Checked when the job starts, not when the first scan has ended (issue 41)."""
    with pytest.raises(ValueError, match="'/nonexistent/indexer' is not an executable file"):
        AfterScan("/nonexistent/indexer {h5}", "/tmp")
    with pytest.raises(ValueError, match="'no-such-indexer-41' is not found on PATH"):
        AfterScan("no-such-indexer-41 {h5}", "/tmp")
    # a backslash-newline inside the shell's quotes, as a guide's multi-line example gave
    with pytest.raises(ValueError, match=r"argument 3 '\\n' is a line break"):
        AfterScan(f"{sys.executable} -m hedm.ff \\\n    --out {{h5}}", "/tmp")
    # a program text of several lines is one argument, not a line break
    AfterScan(f"{sys.executable} -c 'import sys\nprint(sys.argv)' {{h5}}", "/tmp")


def test_without_launcher_keeps_the_users_settings():
    env = {"PMIX_RANK": "0", "OMPI_COMM_WORLD_RANK": "0", "OMPI_MCA_ess": "^singleton",
           "OMPI_MCA_orte_hnp_uri": "x", "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "PATH": "/bin", "SLURM_JOB_ID": "7"}
    assert without_launcher(env) == {"OMPI_ALLOW_RUN_AS_ROOT": "1", "PATH": "/bin",
                                     "OMPI_MCA_rmaps_base_oversubscribe": "1",
                                     "SLURM_JOB_ID": "7"}


def test_the_receiving_job_refuses_a_bad_template_before_it_starts(tmp_path):
    import subprocess

    r = subprocess.run([sys.executable, "-m", "stager", "stream", "receive", "--rendezvous",
                        str(tmp_path / "rv.json"), "--out", str(tmp_path / "out"),
                        "--then", "indexer 'unclosed"], capture_output=True, text=True,
                       timeout=120, env=without_launcher(dict(os.environ)))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--then" in r.stderr and "No closing quotation" in r.stderr
    assert not (tmp_path / "rv.json").exists() and not (tmp_path / "out").exists()


def test_a_log_in_the_way_is_replaced_not_written_through(tmp_path):
    _scan(tmp_path, "c")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.link(victim, tmp_path / "c.then.log")    # a hard link planted where the log goes
    then = AfterScan(PRINT_ARGV + " {scan}", str(tmp_path), lambda m: None)
    then.start("c")
    assert then.wait()
    assert victim.read_text() == "keep me"
    assert (tmp_path / "c.then.log").read_text().strip() == str(["c"])
