"""Shared fixtures of the three test tiers.

* ``tests/unit`` -- serial, no MPI: plain pytest;
* ``tests/mpi`` -- ``@pytest.mark.mpi``, run by ``make test-mpi`` as
  ``mpirun -n 4 python -m pytest --with-mpi -m mpi``; every test passes at any
  rank count (1..4) and checks through ``tests.mpiutil.assert_all``, so a
  failure on one rank fails every rank instead of leaving them in a collective;
* ``tests/e2e`` -- through the command line, ``mpirun`` subprocesses, sbatch.

``comm`` imports mpi4py only when an MPI test asks for it, so the serial tiers
never initialise MPI.

``make test-serial`` runs the serial tiers in parallel workers (pytest-xdist,
``-n 4``): each file on one worker, and the files of :data:`SHARED_WORKER` together
(docs/contributing.md, "Running the tests").
"""
from __future__ import annotations

import shutil

import pytest

#: Files that must share one pytest-xdist worker, by group (``make test-serial`` runs
#: ``-n 4``; :func:`pytest_xdist_make_scheduler`). ``machine``: tests of one
#: machine-wide thing (the local Slurm cluster's daemons, FUSE mounts, host names in
#: namespaces), one after the other. (The HEDM jobs, once one group because each rank
#: compiled the NF kernels side by side with a cold numba cache, now run side by side:
#: ``make test`` compiles every kernel into the tree's cache first, ``warm-kernels``.)
SHARED_WORKER = {
    "machine": ("tests/e2e/test_slurm.py", "tests/e2e/test_streams_session_sbatch.py",
                "tests/e2e/test_osnodes.py",
                "tests/e2e/test_bench_pfs.py", "tests/e2e/test_bench_pfs_stage.py"),
    # one FF sweep and its file flow (the session fixture ``ff_sweep``), built once
    "ffsweep": ("tests/e2e/test_hedm_ff_grains.py", "tests/e2e/test_hedm_ff_grains_stream.py"),
}
#: Marks of the ``machine`` group's tests: a file with one must be listed there.
MACHINE_MARKS = ("slurm", "fuse", "osnodes")
#: The documentation examples (tests/docexamples.py): scheduled one document per unit.
DOCS_EXAMPLES = "tests/e2e/test_docs_examples.py"
_GROUP_OF = {path: group for group, paths in SHARED_WORKER.items() for path in paths}


@pytest.hookimpl(optionalhook=True)  # the NumPy 2 venv (test_serial_venv) has no xdist
def pytest_xdist_make_scheduler(config, log):
    """xdist's ``loadfile`` (each file's tests on one worker: its module fixtures are
    built once), with the files of :data:`SHARED_WORKER` merged into one unit per
    group. (``--dist loadgroup`` and ``xdist_group`` marks do nothing with pytest 9.2
    and xdist 3.8: xdist renames ``item._nodeid``, which pytest 9.2 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path == DOCS_EXAMPLES and "[" in nodeid:
                # one unit per document: its examples in order on one worker, the
                # documents side by side
                return path + "::" + nodeid.split("[", 1)[1].rsplit(":", 1)[0]
            return _GROUP_OF.get(path, path)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """A test marked ``slurm``, ``fuse`` or ``osnodes`` outside the ``machine`` files
    is a usage error: it would run beside the others under xdist."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if any(item.get_closest_marker(m) for m in MACHINE_MARKS) and \
                _GROUP_OF.get(path) != "machine":
            raise pytest.UsageError(f"{item.nodeid} is marked {'/'.join(MACHINE_MARKS)}: "
                                    "add its file to SHARED_WORKER['machine'] in "
                                    "tests/conftest.py")


@pytest.fixture
def comm():
    """``MPI.COMM_WORLD`` (MPI tests only)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def mpi_tmpdir(comm):
    """One temporary directory shared by every rank (made on rank 0), removed afterwards."""
    from tests.mpiutil import shared_tmpdir, sleep_until_all

    path = shared_tmpdir(comm, "mpistage-test-")
    yield path
    sleep_until_all(comm)
    if comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def nf_layer(tmp_path_factory):
    """A small synthetic NF layer (3 grains in a 15 um disk, 2 x 360 frames of 1 deg), its
    binary images written as stage 1 would (no raw frames); built once per session and
    shared (tests/unit/test_hedm_nffit.py, tests/e2e/test_hedm_nffit_e2e.py): read it,
    write elsewhere."""
    from hedm.nfsynth import make_layer

    folder = str(tmp_path_factory.mktemp("layer"))
    make_layer(folder, frames=360, rsample=15.0, grains=3, raw_frames=False)
    return folder


@pytest.fixture(scope="session")
def ff_sweep(tmp_path_factory):
    """The HEDM guide's "Far field to grains" commands (docs/guide/hedm.md) as printed: a
    synthetic sweep of 20 grains, stage 1, stage 2 and FF's grains as NF's seeds, with
    ``SWEEP``, ``OUT`` and ``seeds.txt`` under one temporary folder. Run once per session
    (the guide's block is not run again by tests/e2e/test_docs_examples.py) and shared by
    tests/e2e/test_hedm_ff_grains.py and test_hedm_ff_grains_stream.py, which one xdist
    worker runs (``SHARED_WORKER["ffsweep"]``): read it, write elsewhere."""
    import os
    import re
    import subprocess
    import sys

    from tests.docexamples import ROOT, examples

    found = [e for e in examples("docs/guide/hedm.md") if "hedm.ffsynth SWEEP" in e.text]
    assert len(found) == 1, [e.id for e in found]
    folder = tmp_path_factory.mktemp("ffsweep")
    paths = {"SWEEP": folder / "SWEEP", "OUT": folder / "OUT", "seeds.txt": folder / "seeds.txt"}
    text = re.sub(r"\b(SWEEP|OUT|seeds\.txt)\b", lambda m: str(paths[m.group(1)]),
                  found[0].text)
    env = dict(os.environ, STAGER_PROGRESS="0",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    r = subprocess.run(["bash", "-e", "-c", text], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"{found[0].id}\n{text}\n{r.stdout}\n{r.stderr}"
    return {"folder": folder, "sweep": paths["SWEEP"], "params": paths["SWEEP"] / "ff.params",
            "out": paths["OUT"], "seeds": paths["seeds.txt"], "text": text}


def pytest_terminal_summary(terminalreporter):
    """How many documentation examples ran and were skipped, and why
    (tests/e2e/test_docs_examples.py)."""
    reports = [r for key in ("passed", "failed", "skipped", "error")
               for r in terminalreporter.stats.get(key, [])
               if "test_docs_examples.py::test_example" in getattr(r, "nodeid", "")]
    if reports:
        from tests.docexamples import summary

        terminalreporter.write_sep("-", "documentation examples")
        for line in summary(reports):
            terminalreporter.write_line(line)


# ---- a test writes under tmp_path, never into the checkout ----------------------------
_GUARD = "MPISTAGE_TESTS_CHECK_CHECKOUT"


def _untracked() -> set[str] | None:
    """The checkout's untracked files and directories that git does not ignore."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        r = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--directory"],
                           cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return set(r.stdout.splitlines()) if r.returncode == 0 else None


def pytest_sessionstart(session):
    import os

    # the controller, or a plain run; not a pytest that a test runs (it inherits the
    # variable), whose start and end may straddle another test's files
    if not hasattr(session.config, "workerinput") and not os.environ.get(_GUARD):
        os.environ[_GUARD] = "1"
        session.config.untracked_before = _untracked()


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when the tests left a new file or directory in the checkout (one
    left its default output directory in the repository: a user's first run there would
    find it)."""
    before = getattr(session.config, "untracked_before", None)
    after = _untracked() if before is not None else None
    new = sorted(after - before) if after is not None else []
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line("tests left files in the checkout (write under tmp_path): "
                                + ", ".join(new), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
