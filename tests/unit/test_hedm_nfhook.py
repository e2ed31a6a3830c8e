"""Staging hooks derived from the layer's parameter file (hedm/nfhook.py): any InputPattern,
MIDAS's OrigFileName/extOrig, files outside the layer folder; checked with ``stager plan``
(the plan is what staging does) and one staged MPI run of stage 1 on frames named
unlike the demo's."""
import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest

from hedm.nfhook import hook_path, stage1_hook, stage2_hook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = shutil.which("mpirun")
BASE = "NrFilesPerDistance 3\nnDistances 2\nNrPixelsY 8\nNrPixelsZ 8\n"


def env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM", "PMI"))}
    e.update(PYTHONPATH=ROOT, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", STAGER_PROGRESS="0", **extra)
    return e


def plan(hook_text, tmp_path, stage_root="/tmp/hedm-nfhook-plan"):
    """``stager plan --json --all`` of the hook: {source: destination with %n}."""
    hook = tmp_path / f"h{uuid.uuid4().hex[:6]}.hook"
    hook.write_text(hook_text)
    proc = subprocess.run([sys.executable, "-m", "stager", "plan", "--json", "--all", str(hook)],
                          cwd=ROOT, env=env(HEDM_STAGE=stage_root), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    return {os.path.realpath(f["source"]): f["dest"].replace(stage_root + "/%n/", "")
            for f in doc["entries"]}


def touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"x")
    return os.path.realpath(path)


def test_any_input_pattern_stages_exactly_its_frames(tmp_path):
    layer = tmp_path / "layer"
    frames = [touch(str(layer / "raw" / f"Au_{k:05d}.tiff")) for k in range(3, 9)]
    touch(str(layer / "raw" / "Au_00002.tiff"))            # another layer's frame: not staged
    touch(str(layer / "raw" / "Au_00009.tiff"))
    params = layer / "layer1.txt"
    params.write_text(BASE + "DataDirectory raw\nInputPattern Au_%05d.tiff\nRawStartNr 3\n")
    text, flags = stage1_hook(str(params))
    assert flags == []
    got = plan(text, tmp_path)
    want = {os.path.realpath(params): "nf/layer1.txt",
            **{f: "nf/raw/" + os.path.basename(f) for f in frames}}
    assert got == want
    assert '--params "$HEDM_STAGE/%n/nf/layer1.txt"' in text


def test_midas_names_and_folders_outside_the_layer(tmp_path):
    layer, elsewhere = tmp_path / "layer", tmp_path / "beamline" / "raw data"
    frames = [touch(str(elsewhere / f"ps_au_{k:06d}.tif")) for k in range(6)]
    params = layer / "ps.txt"
    os.makedirs(layer)
    params.write_text(BASE + f"DataDirectory {elsewhere}\nOrigFileName ps_au\nextOrig tif\n")
    text, flags = stage1_hook(str(params))
    assert flags == ["--DataDirectory frames"]              # the staged file must look there
    assert plan(text, tmp_path) == {os.path.realpath(params): "nf/ps.txt",
                                    **{f: "nf/frames/" + os.path.basename(f) for f in frames}}
    os.unlink(frames[4])
    with pytest.raises(Exception, match=r"1 of 6 frame files do not exist, first .*"
                                        r"ps_au_000004.tif"):
        stage1_hook(str(params))


def test_stage2_hook_from_the_parameter_file(tmp_path):
    layer, reduced = tmp_path / "layer", tmp_path / "reduced"
    grid = touch(str(layer / "grids" / "g.txt"))
    seeds = touch(str(tmp_path / "ff" / "grains_seeds.csv"))
    binary = touch(str(reduced / "Au_spots_binary.npy"))
    params = layer / "nf.params"
    params.write_text(BASE + f"ReducedFileName Au_spots\nGridFileName grids/g.txt\n"
                             f"SeedOrientations {tmp_path}/ff/grains_seeds.csv\n")
    text, flags = stage2_hook(str(params), str(reduced))
    assert flags == ["--SeedOrientations grains_seeds.csv"]
    assert plan(text, tmp_path) == {os.path.realpath(params): "nffit/nf.params",
                                    binary: "nffit/Au_spots_binary.npy",
                                    grid: "nffit/grids/g.txt",
                                    seeds: "nffit/grains_seeds.csv"}
    with pytest.raises(Exception, match="stage 1's binary images .* does not exist"):
        stage2_hook(str(params), str(tmp_path))


def test_hook_paths_are_literal(tmp_path):
    odd = [touch(str(tmp_path / n)) for n in ("a*b[1].tif", "it's $HOME?.tif")]
    touch(str(tmp_path / "aXb1.tif"))                       # what an unescaped glob would match
    text = "broadcast to ${HEDM_STAGE}/%n/x files {\n" + "".join(
        f"  {hook_path(p)}\n" for p in odd) + "}\n"
    assert set(plan(text, tmp_path)) == set(odd)


def test_cli_writes_the_hook_and_says_how_to_run(tmp_path):
    layer = tmp_path / "layer"
    for k in range(6):
        touch(str(layer / f"x_{k}.tif"))
    (layer / "nf.params").write_text(BASE + "InputPattern x_%d.tif\n")
    proc = subprocess.run([sys.executable, "-m", "hedm.nfhook", str(layer / "nf.params"),
                           "--stage", "1", "-o", str(tmp_path / "nf.hook")], cwd=ROOT,
                          env=env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'workflow arguments after --: --params "$HEDM_STAGE/%n/nf/nf.params"' in proc.stderr
    assert len(plan((tmp_path / "nf.hook").read_text(), tmp_path)) == 7
    # -o settles its file (core.outputs): a hook it wrote is replaced, a user's file or
    # the parameter file is not (the user's with --overwrite)
    hook = [sys.executable, "-m", "hedm.nfhook", str(layer / "nf.params"), "--stage", "1",
            "-o"]
    again = subprocess.run(hook + [str(tmp_path / "nf.hook")], cwd=ROOT, env=env(),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    mine = tmp_path / "my.hook"
    mine.write_text("broadcast to /x files {\n}\n")
    for target, words in ((mine, "exists and was not written by mpistage"),
                          (layer / "nf.params", "is the input")):
        before = target.read_bytes()
        refused = subprocess.run(hook + [str(target)], cwd=ROOT, env=env(),
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and f"{target} {words}" in refused.stderr, refused.stderr
        assert target.read_bytes() == before
        assert ("--overwrite" in refused.stderr) == (target == mine), refused.stderr
    replaced = subprocess.run(hook + [str(mine), "--overwrite"], cwd=ROOT, env=env(),
                              capture_output=True, text=True, timeout=60)
    assert replaced.returncode == 0 and len(plan(mine.read_text(), tmp_path)) == 7
    proc = subprocess.run([sys.executable, "-m", "hedm.nfhook", str(layer / "nf.params"),
                           "--stage", "2"], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "SeedOrientations" in proc.stderr, proc.stderr


@pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")
def test_staged_stage1_with_a_generated_hook(tmp_path):
    """Frames named Au_%05d.tiff in a sub-folder, no hook written by hand: staged to two
    emulated nodes and reduced, the binary images equal an unstaged run's."""
    import tifffile

    from hedm.nfsynth import make_layer

    src = tmp_path / "synth"
    make_layer(str(src), frames=3, rsample=15.0, grains=3, raw_frames=True)
    layer = tmp_path / "layer"
    os.makedirs(layer / "raw")
    for k in range(6):
        tifffile.imwrite(layer / "raw" / f"Au_{k + 10:05d}.tiff",
                         tifffile.imread(src / f"stem_{k:06d}.tif"))
    text = (src / "nf.params").read_text()
    text = text.replace("InputPattern stem_%06d.tif", "InputPattern Au_%05d.tiff")
    text = text.replace("DataDirectory .", "DataDirectory raw").replace("RawStartNr 0",
                                                                        "RawStartNr 10")
    (layer / "nf.params").write_text(text)
    hook, _ = stage1_hook(str(layer / "nf.params"))
    (tmp_path / "nf.hook").write_text(hook)
    stage_root = f"/dev/shm/pytest-nfhook-{uuid.uuid4().hex[:8]}"
    try:
        cmd = [MPIRUN, "-n", "3", "--oversubscribe", sys.executable, "-m", "workflows", "run",
               os.path.join(ROOT, "hedm", "nf.py"), "--stage", str(tmp_path / "nf.hook"),
               "--emulate-nodes", "2", "--out", str(tmp_path / "out"), "--", "--params",
               f"{stage_root}/%n/nf/nf.params"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env(HEDM_STAGE=stage_root),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert sorted(n for n in os.listdir(f"{stage_root}/node1/nf/raw")
                      if not n.startswith(".")) == \
            [f"Au_{k:05d}.tiff" for k in range(10, 16)]
    finally:
        shutil.rmtree(stage_root, ignore_errors=True)
    cmd = [sys.executable, "-m", "workflows", "run", os.path.join(ROOT, "hedm", "nf.py"),
           "--executor", "inline", "--out", str(tmp_path / "plain"), "--", "--params",
           str(src / "nf.params")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    a = np.load(tmp_path / "out" / "nf_spots_binary.npy")
    b = np.load(tmp_path / "plain" / "nf_spots_binary.npy")
    assert a.any() and np.array_equal(a, b)
