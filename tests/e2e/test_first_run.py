"""A new user's first runs, through the command line: no output over an input, and one
error standard for every entry point.

* ``python -m workflows run stem4d/flow.py -- --frames FILE.h5:/frames`` without
  ``--out``, in the input's directory, leaves the input byte-identical (its results go
  to a new directory named for the run); an ``--out`` that would put a result on the
  input, or on a file mpistage did not write, is refused with exit 2 naming both;
* a missing ``--frames`` file is one line, exit 2, not an h5py traceback;
* ``stager stream receive`` under ``mpirun -n 4``: a usage error is printed once; an
  unknown ``--analysis`` is one line from rank 0 listing the shipped analyses (and
  ``stem4d`` suggests ``stem4d.flow``), exit 2, no ``MPI_ABORT`` and no key file left;
  an analysis failing on the ranks mid-scan is one message from rank 0;
* ``stage``/``drain`` without ``mpirun`` say once that they run as one rank on one
  node (``--quiet`` hides it); an unset ``--node-id-env`` variable exits 2; drain's
  summary is on stdout and says ``1 file``; the resume hint of an interrupted
  ``stage --force`` does not repeat ``--force``.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stagerun import Job, journal_lines, mpi_env, run, stager_lines, wait_for

h5py = pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[2]
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")


def _env(**extra: str) -> dict:
    env = mpi_env(**extra)
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scan(folder: Path, name: str = "scanx.h5") -> Path:
    from stem4d.synth import write_scan_file

    return Path(write_scan_file(str(folder / name), (4, 4), (16, 16)))


def _flow(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    out, flow = [], []
    if "--" in args:
        i = args.index("--")
        out, flow = list(args[:i]), list(args[i + 1:])
    cmd = [sys.executable, "-m", "workflows", "run", str(ROOT / "stem4d" / "flow.py"),
           "--executor", "inline", *out, "--", *flow]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300)


def test_stem4d_flow_without_out_leaves_its_input_byte_identical(tmp_path):
    src = _scan(tmp_path)
    before = _sha(src)
    r = _flow(tmp_path, "--", "--frames", f"{src.name}:/frames")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _sha(src) == before, "the input was written over"
    (made,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert made.name.startswith("stem4d-flow-out-"), made
    with h5py.File(made / "scanx.h5", "r") as f:
        assert f.attrs["written_by"] == "mpistage" and "frames_complete" in f
    assert f"output in {made}" in r.stdout


def test_an_output_on_the_input_or_a_foreign_file_is_refused_naming_both(tmp_path):
    src = _scan(tmp_path)
    before = _sha(src)
    r = _flow(tmp_path, "--out", str(tmp_path), "--", "--frames", f"{src}:/frames")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"output {src} is the input {src}" in r.stderr, r.stderr
    assert _sha(src) == before
    # a file of the same name that mpistage did not write: refused, then --overwrite
    out = tmp_path / "out"
    out.mkdir()
    (out / "scanx.h5").write_bytes(b"someone else's notes")
    r = _flow(tmp_path, "--out", str(out), "--", "--frames", f"{src}:/frames")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"output {out / 'scanx.h5'} exists and was not written by mpistage" in r.stderr
    assert "--overwrite" in r.stderr
    assert (out / "scanx.h5").read_bytes() == b"someone else's notes"
    r = _flow(tmp_path, "--out", str(out), "--overwrite", "--", "--frames", f"{src}:/frames")
    assert r.returncode == 0, r.stdout + r.stderr
    # its own result is replaced by a re-run without --overwrite
    r = _flow(tmp_path, "--out", str(out), "--", "--frames", f"{src}:/frames")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _sha(src) == before


MINE = """import os

from analyses.contract import FrameSum


class Mine(FrameSum):
    files = (".txt",)

    def write_files(self, folder, partial, geometry):
        path = os.path.join(folder, geometry.scan + ".txt")
        with open(path, "w") as fh:
            fh.write("sums written\\n")
        return [path]
"""


def test_an_analysis_s_own_files_are_settled_with_its_h5(tmp_path):
    """A file the analysis writes beside ``<scan>.h5`` (``Analysis.files``): a user's file
    of that name is refused before any task, left as it was; ``--overwrite`` replaces it,
    and a re-run replaces its own without."""
    src = _scan(tmp_path)
    (tmp_path / "mine.py").write_text(MINE)
    out = tmp_path / "out"
    out.mkdir()
    theirs = out / "scanx.txt"
    theirs.write_bytes(b"someone else's notes")
    flow = ["--", "--frames", f"{src}:/frames", "--analysis", f"{tmp_path / 'mine.py'}:Mine"]
    r = _flow(tmp_path, "--out", str(out), *flow)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"output {theirs} exists and was not written by mpistage" in r.stderr, r.stderr
    assert "--overwrite" in r.stderr
    assert theirs.read_bytes() == b"someone else's notes" and not (out / "scanx.h5").exists()
    r = _flow(tmp_path, "--out", str(out), "--overwrite", *flow)
    assert r.returncode == 0, r.stdout + r.stderr
    assert theirs.read_text() == "sums written\n"
    r = _flow(tmp_path, "--out", str(out), *flow)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_missing_frames_file_is_one_line(tmp_path):
    r = _flow(tmp_path, "--", "--frames", "nothere.h5:/frames")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert errors == ["error: AnalysisError: --frames nothere.h5:/frames: no such file "
                      "nothere.h5: give an existing HDF5 file (FILE.h5:/DATASET)"], r.stderr
    assert os.listdir(tmp_path) == [], "a refused run left its results directory"


def _receive(tmp: Path, *args: str, np: int = 4, timeout: float = 120):
    cmd = ["mpirun", "-n", str(np), "--oversubscribe", sys.executable, "-m", "stager",
           "stream", "receive", *args]
    return subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


@needs_mpirun
def test_receive_usage_error_is_printed_once(tmp_path):
    r = _receive(tmp_path, "--rendezvous", "rv.json")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("usage: stager stream receive") == 1, r.stderr
    assert r.stderr.count("the following arguments are required: --out") == 1, r.stderr


@needs_mpirun
@pytest.mark.parametrize("name", ["nosuch", "stem4d"])
def test_an_unknown_analysis_is_one_line_listing_the_shipped_ones(tmp_path, name):
    r = _receive(tmp_path, "--rendezvous", "rv.json", "--out", "out", "--emulate-nodes", "2",
                 "--analysis", name, "--timeout", "20")
    assert r.returncode == 2, r.stderr
    lines = stager_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert "the analyses shipped: sum, stem4d.flow, hedm.ffpeaks, hedm.nfreduce" in lines[0]
    if name == "stem4d":
        assert "did you mean stem4d.flow?" in lines[0], lines
    assert "MPI_ABORT" not in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == [], "a refused start left files behind"


@needs_mpirun
def test_an_analysis_failing_on_the_ranks_is_one_message_from_rank_0(tmp_path):
    """As NF live with a frame shape its parameters do not expect: the analysis refuses
    the scan when it is prepared on the ranks that hold frames."""
    from streams import ScanGeometry, SimulatedScan
    from streams.protocols.native.rendezvous import wait_for_rendezvous
    from streams.simulate import run_producers

    (tmp_path / "picky.py").write_text(
        "from analyses.contract import FrameSum\n"
        "from streams.errors import StreamError\n\n"
        "class Picky(FrameSum):\n"
        "    def prepare(self, geometry):\n"
        "        raise StreamError(f'picky: scan {geometry.scan} sends frames of '\n"
        "                          f'{geometry.shape}; the parameters need (288, 512)')\n\n"
        "ANALYSIS = Picky\n")
    cmd = ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m", "stager", "stream",
           "receive", "--rendezvous", "rv.json", "--out", "out", "--emulate-nodes", "2",
           "--bind", "127.0.0.1", "--analysis", str(tmp_path / "picky.py"),
           "--timeout", "60", "--local", str(tmp_path / "local" / "%n")]
    p = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        rv = wait_for_rendezvous(tmp_path / "rv.json", timeout=60)
        g = ScanGeometry("s1", 1, 4, 1, (8, 8), "<u2", (2, 2))
        try:
            run_producers(SimulatedScan(g), rv)
        except Exception:
            pass        # the job may end before the producer is done
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode not in (0, None), err
    lines = [ln for ln in err.splitlines() if ln.startswith("stager stream receive")]
    assert len(lines) == 1, err
    assert "picky: scan s1 sends frames of (8, 8); the parameters need (288, 512)" in lines[0]
    assert "MPI_ABORT was invoked on rank 1" not in err.split(lines[0])[0], err


def _stager(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stager", *args], cwd=tmp, env=_env(**env),
                          capture_output=True, text=True, timeout=120)


def test_without_mpirun_stage_and_drain_say_so_once_and_drain_reports_one_file(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a\n")
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/dest files {{\n  {tmp_path}/src/*.txt\n}}\n")
    note = "not started by mpirun or srun: running as one rank on one node"
    r = _stager(tmp_path, "stage", str(spec))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(note) == 1, r.stderr
    assert "staged 1 file (" in r.stdout and "to 1 node with" in r.stdout, r.stdout
    r = _stager(tmp_path, "stage", str(spec), "--quiet")
    assert r.returncode == 0 and note not in r.stderr, r.stderr
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.txt").write_text("r\n")
    r = _stager(tmp_path, "drain", str(tmp_path / "results"), str(tmp_path / "shared"),
                "--merge")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("drained 1 file, 2 bytes from 1 node to "), r.stdout
    assert r.stderr.count(note) == 1 and "drained" not in r.stderr, r.stderr
    # drained into the source itself: every target is a result, refused
    r = _stager(tmp_path, "drain", str(tmp_path / "results"), str(tmp_path / "results" / "in"),
                "--quiet")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "is inside the input directory" in r.stderr, r.stderr
    r = _stager(tmp_path, "clean", str(spec), "--quiet")
    assert r.returncode == 0, r.stderr


def test_an_unset_node_id_env_variable_is_bad_input(tmp_path):
    spec = tmp_path / "s.hook"
    (tmp_path / "a.txt").write_text("a")
    spec.write_text(f"broadcast to {tmp_path}/dest files {{\n  {tmp_path}/a.txt\n}}\n")
    env = {k: v for k, v in os.environ.items() if k != "W33_UNSET"}
    assert "W33_UNSET" not in env
    r = _stager(tmp_path, "stage", str(spec), "--node-id-env", "W33_UNSET", "--quiet")
    assert r.returncode == 2, r.stderr
    assert "environment variable W33_UNSET is unset or empty" in r.stderr
    assert not (tmp_path / "dest").exists()


@needs_mpirun
def test_the_resume_hint_of_a_forced_stage_drops_force(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(200):
        (src / f"f{i:04d}.bin").write_bytes(os.urandom(64 << 10))
    spec = tmp_path / "s.hook"
    spec.write_text(f"broadcast to {tmp_path}/out/%n files {{\n  {src}/*.bin\n}}\n")
    job = Job(tmp_path, 2, ["stage", str(spec), "--force", "--emulate-nodes", "2",
                            "--chunk-size", "1K", "--small-file-threshold", "512",
                            "--no-progress"])
    wait_for(lambda: journal_lines(tmp_path / "out" / "node0") >= 5
             or job.proc.poll() is not None, what="the first copies")
    assert job.proc.poll() is None, "the run ended before it could be interrupted"
    job.signal_mpirun(signal.SIGINT)
    r = job.wait(60)
    (line,) = stager_lines(r.stderr)
    assert "interrupted by" in line, line
    assert line.endswith(f"to resume, run it again without --force (which would stage "
                         f"everything again): stager stage {spec} --emulate-nodes 2 "
                         "--chunk-size 1K --small-file-threshold 512 --no-progress"), line
    r = run(tmp_path, 2, "clean", str(spec), "--emulate-nodes", "2")
    assert r.returncode == 0, r.stderr
