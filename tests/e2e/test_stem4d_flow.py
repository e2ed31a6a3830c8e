"""The 4D-STEM flow end to end on inputs a user brings: ``python -m workflows run
stem4d/flow.py`` and ``stager stream receive --analysis stem4d.flow``.

Frames of other detectors keep their values (uint32 with a 70,000-count pixel,
streamed and from a file), masks and a dark reference from files, thresholds
sampled from the scan, stempy's rule; bad inputs end with a clear error and a
non-zero exit, never exit 0 with a wrong or empty result.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]
SCAN, SHAPE = (4, 6), (32, 28)


def _env():
    import os

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "OMPI_MCA_ess", "OMPI_MCA_orte")):
            env.pop(k)
    return env


def _flow(tmp: Path, frames: str, *params: str, scan="s"):
    cmd = [sys.executable, "-m", "workflows", "run", str(ROOT / "stem4d/flow.py"),
           "--executor", "inline", "--out", str(tmp / "out"), "--", "--frames", frames,
           "--scan", scan, "--partition-frames", "5"]
    for p in params:
        cmd += ["--set", p]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr, tmp / "out" / f"{scan}.h5"


def _uint32_scan(tmp: Path) -> np.ndarray:
    from stem4d.synth import frames_array

    f = frames_array(SCAN, SHAPE).astype(np.uint32) * 3      # a 32-bit counting detector
    f[0, 10, 10] = 70_000
    f[5, 3, 20] = 250_000
    with h5py.File(tmp / "u32.h5", "w") as h:
        h["frames"] = f.reshape(*SCAN, *SHAPE)
    return f


def test_uint32_frames_mask_file_dark_file_sampled_thresholds_stempy_rule(tmp_path):
    import stempy.io as sio

    import libertem.masks as lm
    from kernels import count_electrons
    from stem4d.counting import sample_indices, sampled_thresholds

    f = _uint32_scan(tmp_path)
    rows, cols = SHAPE
    masks = {"disk_a": lm.circular(10, 12, cols, rows, 5).astype(np.float32),
             "ring_b": lm.ring(13.5, 15.5, cols, rows, 12, 6).astype(np.float32)}
    np.savez(tmp_path / "masks.npz", **masks)
    dark = np.random.default_rng(0).normal(60, 2, SHAPE)
    with h5py.File(tmp_path / "dark.h5", "w") as h:
        h["dark"] = dark
    rc, log, out = _flow(tmp_path, f"{tmp_path}/u32.h5:/frames",
                         f'mask_file="{tmp_path}/masks.npz"', f'dark="{tmp_path}/dark.h5:/dark"',
                         'thresholds="sampled"', "samples=7", 'rule="stempy"')
    assert rc == 0, log
    t = sampled_thresholds(f[sample_indices(len(f), 7)], dark, None, 4.0, 10.0)
    with h5py.File(out, "r") as h:
        assert np.array_equal(h["sum_image"][()].ravel(),
                              f.reshape(len(f), -1).sum(1).astype(np.float64))
        assert sorted(h["virtual"]) == ["disk_a", "ring_b"]
        for name, m in masks.items():
            np.testing.assert_allclose(h[f"virtual/{name}"][()].ravel(),
                                       np.einsum("nij,ij->n", f.astype(float), m), rtol=1e-12)
        meta = dict(h["metadata/electron_counting"].attrs)
        counts = h["electron_counts"][()].ravel()
    assert meta["threshold_calculated"] and meta["number_of_samples"] == 7
    assert meta["background_threshold"] == t.background_threshold
    assert meta["frame_dtype"] == "uint32" and meta["rule"] == "stempy"
    want = [count_electrons(fr, dark, t.background_threshold, t.x_ray_threshold,
                            rule="stempy")[1] for fr in f]
    assert list(counts) == want and sum(want) > 0
    sa = sio.load_electron_counts(str(out))
    assert [len(sa.data[i, 0]) for i in range(len(f))] == want


def test_virtual_only_does_not_count_and_writes_no_events(tmp_path):
    _uint32_scan(tmp_path)
    rc, log, out = _flow(tmp_path, f"{tmp_path}/u32.h5:/frames", 'mode="virtual"',
                         'masks=[{"name": "bf", "r": 4}, {"name": "haadf", "ri": 8, "ro": 14}]')
    assert rc == 0, log
    with h5py.File(out, "r") as h:
        assert sorted(h) == ["frames_complete", "frames_received", "sum_image", "virtual"]
        assert sorted(h["virtual"]) == ["bf", "haadf"]
        assert h["virtual/bf"].attrs["kind"] == "disk" and h["virtual/bf"].attrs["cx"] == 13.5


@pytest.mark.parametrize("case", ["int64_frames", "mask_shape", "dark_shape"])
def test_bad_inputs_end_non_zero_with_the_reason(tmp_path, case):
    f = _uint32_scan(tmp_path)
    src = f"{tmp_path}/u32.h5:/frames"
    params = []
    if case == "int64_frames":
        with h5py.File(tmp_path / "i8.h5", "w") as h:
            h["frames"] = f.astype(np.int64).reshape(*SCAN, *SHAPE)
        src, why = f"{tmp_path}/i8.h5:/frames", "int64"
    elif case == "mask_shape":
        np.save(tmp_path / "m.npy", np.ones((SHAPE[0], SHAPE[1] + 1)))
        params, why = [f'mask_file="{tmp_path}/m.npy"'], "has shape"
    else:
        np.save(tmp_path / "d.npy", np.ones((SHAPE[1], SHAPE[0])))
        params, why = [f'dark="{tmp_path}/d.npy"'], "dark .* has shape"
    rc, log, out = _flow(tmp_path, src, *params)
    assert rc != 0 and not out.exists(), log
    assert re.search(why, log), log


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_a_streamed_uint32_scan_keeps_its_values_and_a_bad_dark_fails_the_job(tmp_path):
    from streams import ScanGeometry, SimulatedScan
    from streams.protocols.native.rendezvous import wait_for_rendezvous
    from streams.simulate import array_source, run_producers

    f = _uint32_scan(tmp_path)
    np.save(tmp_path / "bad_dark.npy", np.zeros((5, 5)))

    def job(out, *extra):
        rv = tmp_path / f"{out}.json"
        cmd = ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "stager",
               "stream", "receive", "--rendezvous", str(rv), "--out", str(tmp_path / out),
               "--emulate-nodes", "1", "--bind", "127.0.0.1", "--local",
               str(tmp_path / "local" / "%n"), "--analysis", "stem4d.flow",
               "--partition-frames", "4", "--idle-timeout", "20", *extra]
        p = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            info = wait_for_rendezvous(rv, timeout=60)
            g = ScanGeometry("s", 2, len(f), 2, SHAPE, "<u4", SCAN)
            run_producers(SimulatedScan(g, source=array_source(f)), info)
            o, e = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        return p.returncode, o + e

    rc, log = job("good", "--set", "xray_threshold=1000000")
    assert rc == 0, log
    rc2, log2, off = _flow(tmp_path, f"{tmp_path}/u32.h5:/frames", "xray_threshold=1000000")
    assert rc2 == 0, log2
    with h5py.File(tmp_path / "good" / "s.h5", "r") as a, h5py.File(off, "r") as b:
        assert a["sum_image"][0, 0] == f[0].sum() and a["sum_image"][0, 0] > 70_000
        for name in ("sum_image", "electron_counts", "virtual/bright_field",
                     "virtual/annular_dark_field"):
            assert np.array_equal(a[name][()], b[name][()]), name
    rc, log = job("bad", "--set", f'dark="{tmp_path}/bad_dark.npy"')
    assert rc != 0 and "dark" in log and "(5, 5)" in log, log
