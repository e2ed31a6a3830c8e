"""Start-up guard: ``import kernels`` and the readers load no heavy package.

Each check runs in a fresh interpreter, so what this test process has already
imported (pytest plugins load numpy, h5py, ...) cannot hide an import.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = ("numba", "scipy", "h5py", "tifffile", "matplotlib", "fabio", "rsciio", "hdf5plugin")

PROBE = """
import json, sys
{code}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))))
"""


def _heavy_after(code: str) -> list:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", [
    "import kernels",
    "import kernels; dir(kernels); kernels.__all__",
    "import kernels.io",
    # the readers and writers themselves: numpy only until a file is opened
    "from kernels import open_frames, GEFile, TiffSeries, HDF5Stack, ReaderError",
    "from kernels.io import write_ge, write_hdf5, write_tiff_series, open_frames",
    "from kernels import DetectorModel, frames",
])
def test_import_loads_no_heavy_package(code):
    assert _heavy_after(code) == []


NO_SCIPY = """
import sys
class _NoScipy:  # as if scipy were not installed (numba imports it when it is there)
    def find_spec(self, name, path=None, target=None):
        if name == "scipy" or name.startswith("scipy."):
            raise ImportError("scipy is blocked by the test")
sys.meta_path.insert(0, _NoScipy())
"""


def test_every_public_name_resolves_and_kernels_run_without_scipy():
    # the lazy table names existing objects; every kernel module imports and the
    # LoG runs with scipy unavailable (its weights are computed with NumPy);
    # numba is loaded only once a kernel is used
    code = (NO_SCIPY + "import kernels\n"
            "missing = [n for n in kernels.__all__ if getattr(kernels, n, None) is None]\n"
            "assert not missing, missing\n"
            "import numpy as np\n"
            "assert kernels.log_filter(np.eye(8, dtype=np.uint16), 1.0, 3)[0, 0] < 0")
    assert _heavy_after(code) == ["numba"]


def test_ge_reader_reads_without_numba(tmp_path):
    import numpy as np

    from kernels.io import write_ge

    stack = np.arange(3 * 6 * 5, dtype=np.uint16).reshape(3, 6, 5)
    path = str(tmp_path / "a.ge2")
    write_ge(path, stack)
    code = ("from kernels import open_frames\n"
            f"r = open_frames({path!r}, shape=(6, 5))\n"
            "assert int(r.read(2)[5, 4]) == 89, r.read(2)")
    assert _heavy_after(code) == []


def test_unknown_name_is_an_attribute_error():
    import kernels
    import kernels.io

    with pytest.raises(AttributeError, match="no_such_kernel"):
        kernels.no_such_kernel  # noqa: B018
    with pytest.raises(AttributeError, match="nope"):
        kernels.io.nope  # noqa: B018
    assert {"open_frames", "log_filter", "HDF5Stack"} <= set(dir(kernels))
