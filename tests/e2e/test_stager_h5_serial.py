"""The h5 staging tests again, with the serial h5py that ``pip install`` gives.

A cluster user's install (docs/guide/staging.md, "Real detector files"): a plain venv made from
the pyenv python3 -- no Debian packages -- with this project, PyPI's h5py
(serial: ``h5py.get_config().mpi`` is False), mpi4py from PyPI and hdf5plugin.
``make serial-venv`` builds it (cached, ``.venv-serial``; ``make test`` tries it).
Under ``mpirun -n 2`` the leaders then read with independent read-only opens,
and the same MPI tests (``tests/mpi/test_stager_stage_h5.py``, the whole corpus in
``tests/mpi/test_stager_stage_h5_corpus.py``, which checks the reported read path, and
the frame ranges of ``tests/mpi/test_stager_scatter_h5_mpi.py``) must pass.
"""
import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.environ.get("STAGER_SERIAL_VENV", os.path.join(REPO, ".venv-serial"))
PY = os.path.join(VENV, "bin", "python")

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def _serial_python():
    if not os.path.exists(os.path.join(VENV, ".mpistage-serial")):
        pytest.skip(f"no plain venv with PyPI's serial h5py at {VENV}: `make serial-venv` "
                    "builds it (needs the pyenv python3 and the package index); it was not "
                    "built or its build failed")
    r = subprocess.run([PY, "-c", "import h5py, mpi4py, hdf5plugin; "
                        "print(h5py.get_config().mpi, h5py.__file__)"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{VENV} is broken: {r.stderr}"
    assert r.stdout.startswith("False"), f"{VENV}'s h5py is an MPI build: {r.stdout}"
    return PY


def test_h5_staging_tests_pass_with_serial_h5py(tmp_path):
    from tests.stagerun import mpi_env

    py = _serial_python()
    env = mpi_env()
    env.pop("PYTHONPATH", None)
    r = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", py, "-m", "pytest", "--with-mpi",
                        "-m", "mpi", "-q", "-p", "no:cacheprovider", "--color=no",
                        "tests/mpi/test_stager_stage_h5.py",
                        "tests/mpi/test_stager_stage_h5_corpus.py",
                        "tests/mpi/test_stager_scatter_h5_mpi.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " failed" not in r.stdout, tail
