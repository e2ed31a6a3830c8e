"""The FF flows settle their outputs before any task (issue 41 item 2): a file in ``--out``
that mpistage did not write -- a user's own ``Grains.csv`` or ``Grains.h5``, ``ff_peaks.h5``
-- is refused, naming it, and left as it was; ``--overwrite`` is what lets a run replace it.
A file an earlier run wrote is replaced without it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(flow, out, flow_args, *runner):
    env = dict(os.environ, STAGER_PROGRESS="0")
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "workflows", "run", f"hedm.{flow}", "--executor", "local",
           "--workers", "1", "--out", str(out), *runner, "--", *flow_args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def sweep(tmp_path):
    from hedm.ffsynth import make_sweep

    info = make_sweep(str(tmp_path / "data"), grains=2, n_frames=90, shape=(96, 96),
                      extra="OmegaRange -180 180")
    return info["params"]


@pytest.mark.parametrize("name", ["Grains.csv", "Grains.h5"])
def test_ffgrains_refuses_a_users_grains_file(tmp_path, sweep, name):
    out = tmp_path / "out"
    out.mkdir()
    peaks = tmp_path / "peaks.h5"           # checked only for being there: the refusal is first
    peaks.write_bytes(b"not read")
    mine = out / name
    mine.write_text("my own grains, from MIDAS\n")
    proc = _run("ffgrains", out, ["--params", sweep, "--PeaksFile", str(peaks)])
    assert proc.returncode != 0, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert f"{name} exists and was not written by mpistage" in text, text
    assert "--overwrite" in text
    assert mine.read_text() == "my own grains, from MIDAS\n"
    assert not (out / "ffgrains_run.json").exists()
    # the rule is the one core.outputs keeps: our own Grains.h5 makes Grains.csv ours too
    from core.outputs import ours
    assert not ours(str(mine))


def test_ff_refuses_a_users_peaks_file(tmp_path, sweep):
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "ff_peaks.csv"
    mine.write_text("peak list\n")
    proc = _run("ff", out, ["--params", sweep])
    assert proc.returncode != 0 and "ff_peaks.csv exists and was not written by mpistage" in (
        proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert mine.read_text() == "peak list\n"


def test_ffsynth_writes_only_into_a_new_folder(tmp_path, capsys):
    """``python -m hedm.ffsynth FOLDER`` makes a dataset (an input, not a result): as
    ``python -m hedm.synth``, a folder with anything in it is refused, nothing written."""
    from hedm.ffsynth import main

    mine = tmp_path / "ff.params"
    mine.write_text("my own parameters\n")
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path), "--grains", "1"])
    assert info.value.code == 2
    assert f"{tmp_path} is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["ff.params"]
    assert mine.read_text() == "my own parameters\n"
