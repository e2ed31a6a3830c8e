"""The NF flows (and ``hedm.demo``, which runs them) settle their outputs before any task
(issue 41): a file in ``--out`` that mpistage did not write -- a user's own
``nf_spots_binary.npy`` or ``nf_map.mic`` -- is refused, naming it and ``--overwrite``,
and left byte-identical; ``--overwrite`` is what lets a run replace it. The files a run
wrote are its own: a later run replaces them."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOREIGN = b"my own file, from MIDAS\n"


def _run(flow, out, flow_args, *runner):
    env = dict(os.environ, STAGER_PROGRESS="0")
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "workflows", "run", f"hedm.{flow}", "--executor", "local",
           "--workers", "1", "--out", str(out), *runner, "--", *flow_args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    """A layer of 2 x 6 raw frames (hedm.nfsynth), and stage 1's output of it."""
    from hedm.nfsynth import make_layer

    folder = tmp_path_factory.mktemp("nf-outputs")
    make_layer(str(folder / "layer"), frames=6, rsample=15.0, grains=3, raw_frames=True)
    params = str(folder / "layer" / "nf.params")
    proc = _run("nf", folder / "reduced", ["--params", params])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return params, folder / "reduced"


def _refused(proc, path):
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert f"{path} exists and was not written by mpistage" in text, text
    assert "--overwrite" in text, text
    assert path.read_bytes() == FOREIGN


@pytest.mark.parametrize("name", ["nf_spots_binary.npy", "nf_spots.png", "nf_spots.h5"])
def test_nf_refuses_a_users_file_and_replaces_it_with_overwrite(tmp_path, layer, name):
    params, _ = layer
    out = tmp_path / "out"
    out.mkdir()
    mine = out / name
    mine.write_bytes(FOREIGN)
    _refused(_run("nf", out, ["--params", params]), mine)
    assert not (out / "nf_run.json").exists() and not (out / "work").exists()
    if name != "nf_spots_binary.npy":
        return
    proc = _run("nf", out, ["--params", params], "--overwrite")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert np.load(mine).dtype == np.uint8          # stage 2's input, in place of the user's
    # now every file there is this project's: a run without --overwrite replaces them
    proc = _run("nf", out, ["--params", params])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["nf_map.mic", "nf_map.h5", "nf_map.png", "nffit_run.json"])
def test_nffit_refuses_a_users_file(tmp_path, layer, name):
    params, reduced = layer
    out = tmp_path / "out"
    out.mkdir()
    mine = out / name
    mine.write_bytes(FOREIGN)
    _refused(_run("nffit", out, ["--params", params, "--ReducedDirectory", str(reduced)]), mine)
    assert not (out / "nffit_run.json").exists() or name == "nffit_run.json"


def test_nffit_replaces_a_users_map_with_overwrite_and_its_own_without(tmp_path, layer):
    from core.outputs import ours

    params, reduced = layer
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "nf_map.mic"
    mine.write_bytes(FOREIGN)
    proc = _run("nffit", out, ["--params", params, "--ReducedDirectory", str(reduced),
                               "--MinMappedFraction", "0"], "--overwrite")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert mine.read_text().startswith("%TriEdgeSize")
    # the map is marked, so it and the files named after it are replaced by a later run
    # without --overwrite (the rule core.outputs keeps)
    assert all(ours(str(out / n)) for n in ("nf_map.h5", "nf_map.mic", "nf_map.png",
                                             "nffit_run.json"))


@pytest.mark.parametrize("name", ["nf_map.mic", "demo_report.txt", "reduced/nf_spots.png"])
def test_demo_refuses_a_users_file_before_anything(tmp_path, name):
    """``python -m hedm.demo`` checks its results before making the dataset or a job
    (``--overwrite`` replaces: tests/e2e/test_hedm_demo.py); a report it wrote is its own."""
    out = tmp_path / "demo-out"
    mine = out / name
    mine.parent.mkdir(parents=True)
    mine.write_bytes(FOREIGN)
    proc = subprocess.run([sys.executable, "-m", "hedm.demo", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _refused(proc, mine)
    assert sorted(p.name for p in out.iterdir()) == sorted({name.split("/")[0]})
    from hedm.run import write_json
    from core.outputs import ours

    write_json(str(out / "demo_report.json"), {"state": "running"})
    (out / "demo_report.log").write_text("$ mpirun ...\n")
    (out / "demo_report.txt").write_text("mpistage demo: ...\n")
    assert ours(str(out / "demo_report.log")) and ours(str(out / "demo_report.txt"))
