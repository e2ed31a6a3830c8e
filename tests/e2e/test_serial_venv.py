"""The staging, workflow and kernel tests again, with NumPy 2 and today's numba.

``pip install mpistage`` into a current environment gets NumPy 2 (``install_requires``
has no cap; only ``constraints.txt`` pins Debian's NumPy 1.24 for its MPI h5py). The
plain venv of ``make serial-venv`` (``.venv-serial``: the pyenv python3, PyPI's h5py,
mpi4py, NumPy and numba, no Debian packages) is that environment; here it runs

* the unit tests of staging, planning, hook specs, workflows and kernels (not the
  ones marked ``slow``: ``test_kernels_cache`` alone takes minutes of compilation;
  nor the timing tests of ``test_workflows_limits`` and ``test_kernels_startup``,
  which do not depend on NumPy);
* under ``mpirun -n 4``, the MPI tests of staging, scatter and the workflow executor
  (not its parallel-HDF5 result writers, which need Debian's MPI h5py).

``tests/e2e/test_stager_h5_serial.py`` runs the HDF5 staging tests in the same venv. Both
skip, saying why, when the venv was not built.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.environ.get("STAGER_SERIAL_VENV", os.path.join(REPO, ".venv-serial"))
PY = os.path.join(VENV, "bin", "python")

UNIT = ["core_checksum", "core_localfs", "core_nodes", "stager_plan_files", "stager_plan_guards",
        "stager_plan_h5", "stager_plan_h5_filters", "stager_scatter", "stager_scatter_h5",
        "hooks_spec_errors", "hooks_spec_parse", "stager_stage_units", "stager_state_files",
        "stager_drain", "workflows_leader_hooks", "workflows_task_arrays",
        "workflows_dispatch_queues", "workflows_apps", "workflows_command", "workflows_dataflow",
        "workflows_node", "kernels_convert", "kernels_ff", "kernels_filters", "kernels_io",
        "kernels_label", "kernels_nf", "kernels_readers", "kernels_stem"]
MPI = ["test_stager_stage", "test_stager_scatter_mpi", "test_workflows_mpi_executor"]
#: tests that need the MPI build of h5py (parallel writes), which the pip path lacks
NEEDS_MPI_H5PY = "not collective_hdf5"


def _numpy2_python() -> str:
    if not os.path.exists(os.path.join(VENV, ".mpistage-serial")):
        pytest.skip(f"no plain venv with PyPI's NumPy at {VENV}: `make serial-venv` builds it "
                    "(needs the pyenv python3 and the package index); it was not built or "
                    "its build failed")
    r = subprocess.run([PY, "-c", "import numpy, numba; print(numpy.__version__, "
                        "numba.__version__)"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{VENV} is broken: {r.stderr}"
    major = int(r.stdout.split(".")[0])
    assert major >= 2, f"{VENV} has numpy {r.stdout.strip()}: the pip path must get NumPy 2"
    return PY


def _env(tmp_path):
    from tests.stagerun import mpi_env

    env = mpi_env()
    env.pop("PYTHONPATH", None)  # the venv's editable install, not the Debian venv's path
    # its own numba cache: in the tree's __pycache__ another numba version (the main
    # venv's, in a test running beside this one) overwrites the same cache files
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
    return env


def _check(r: subprocess.CompletedProcess) -> None:
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " failed" not in r.stdout, tail


# The subprocess's own 900 s limit decides (under CI load the run took more than the
# default 300 s, and pytest-timeout's thread method then ends the whole xdist worker).
@pytest.mark.timeout(960)
def test_unit_tests_pass_with_numpy2(tmp_path):
    py = _numpy2_python()
    files = [f"tests/unit/test_{name}.py" for name in UNIT]
    r = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no",
                        "-m", "not mpi and not slow", *files],
                       cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    _check(r)


@pytest.mark.timeout(960)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_mpi_staging_and_workflow_tests_pass_with_numpy2(tmp_path):
    py = _numpy2_python()
    files = [f"tests/mpi/{name}.py" for name in MPI]
    r = subprocess.run(["mpirun", "-n", "4", "--oversubscribe", py, "-m", "pytest",
                        "--with-mpi", "-m", "mpi and not slow", "-k", NEEDS_MPI_H5PY, "-q",
                        "-p", "no:cacheprovider", "--color=no", *files],
                       cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    _check(r)
