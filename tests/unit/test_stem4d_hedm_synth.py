"""The generators as commands: python -m stem4d.synth and python -m hedm.synth."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def test_stem4d_synth_writes_the_simulator_frames(tmp_path):
    import h5py

    from stem4d.synth import frames_array, main

    path = tmp_path / "scan.h5"
    assert main([str(path), "--scan-shape", "3", "4", "--shape", "8", "6"]) == 0
    with h5py.File(path, "r") as f:
        got = f["frames"][()]
    assert got.shape == (3, 4, 8, 6) and got.dtype == np.uint16
    np.testing.assert_array_equal(got.reshape(12, 8, 6), frames_array((3, 4), (8, 6)))


def test_stem4d_synth_refuses_an_existing_file(tmp_path, capsys):
    from stem4d.synth import main

    path = tmp_path / "scan.h5"
    path.write_bytes(b"mine")
    with pytest.raises(SystemExit) as exc:
        main([str(path)])
    assert exc.value.code == 2 and path.read_bytes() == b"mine"
    assert "exists" in capsys.readouterr().err


def test_hedm_synth_ff_writes_a_dataset_and_refuses_a_nonempty_folder(tmp_path, capsys):
    from hedm.synth import load_truth, main

    folder = tmp_path / "ff"
    assert main(["ff", str(folder), "--frames", "8", "--size", "48", "--spots", "3",
                 "--hdf5"]) == 0
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["dark_000001.ge3", "ff.params", "ff_000001.ge3", "frames.h5", "model.json",
                     "truth.npy"]
    import h5py

    from kernels import open_frames

    ge = open_frames(str(folder / "ff_000001.ge3"), shape=(48, 48))
    with h5py.File(folder / "frames.h5", "r") as f:   # the simulator's copy: the same frames
        np.testing.assert_array_equal(f["frames"][()], np.stack([ge.read(i) for i in range(8)]))
    assert len(load_truth(str(folder))) == 3
    with pytest.raises(SystemExit) as exc:
        main(["ff", str(folder)])
    assert exc.value.code == 2 and "not empty" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["stem4d.synth", "hedm.synth"])
def test_help(module):
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and f"python -m {module}" in out.stdout
