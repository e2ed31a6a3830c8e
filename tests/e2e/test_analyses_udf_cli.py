"""LiberTEM UDFs through the command lines, against LiberTEM's own inline run.

* staged copy: ``mpirun -n 4 python -m workflows run analyses.runner
  --emulate-nodes N -- --frames scan.h5:/frames --valid scan.h5:/valid
  --analysis udf:... --analysis-params JSON`` at 4 emulated nodes (2: the
  spilled partitions below);
* live: ``mpirun -n 4 stager stream receive --emulate-nodes 2 --analysis udf:...
  --analysis-params JSON --spill DIR`` fed by ``python -m streams.simulate
  --withhold ...``, then the same flow on the spilled partitions.

Every ``OUT/<scan>.h5`` must hold ``/udf/<UDF>/<buffer>`` equal to
``Context.make_with("inline").run_udf`` (``roi`` = the frames present) and
``/udf/valid`` naming the missing positions.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("libertem")

from tests import udf_cases as uc
from tests.e2e.test_streams_receive import ROOT
from tests.e2e.test_streams_receive import _env as _job_env


def _env():
    """The jobs import the tests' UDFs (``udf:tests.udf_cases:...``) from this checkout."""
    env = _job_env()
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    return env

# slow: LiberTEM imported by every rank of every job, 71 s of CPU for the file (tests/README.md)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")]

WITHHELD = [2, 9, 30, 31]
F = uc.SCAN[0] * uc.SCAN[1]


def _specs(tmp_path):
    np.save(tmp_path / "masks.npy", uc.masks())
    specs = [(s, {k: (str(tmp_path / "masks.npy") if v == "MASKS" else v) for k, v in p.items()})
             for s, p in uc.SPECS]
    return specs, ["--analysis", "udf:" + ",".join(s for s, _ in specs),
                   "--analysis-params", json.dumps([p for _, p in specs])]


def _check(path, specs, data, valid, what):
    import h5py

    ref = uc.reference(specs, data, valid)
    bad = []
    with h5py.File(path, "r") as f:
        assert (f["udf/valid"][()].reshape(-1) == valid).all(), what
        for (spec, _), r in zip(specs, ref):
            label = spec.rpartition(":")[2]
            bad += uc.compare(r, {k: f[f"udf/{label}/{k}"][()] for k in r if
                                  f"udf/{label}/{k}" in f}, f"{what} {label}")
    assert not bad, bad


def _flow(tmp_path, out, nodes, *flow_args):
    cmd = ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m", "workflows", "run",
           "analyses.runner", "--emulate-nodes", str(nodes), "--out", str(out),
           "--", *flow_args]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


# 4 nodes: a rank per node, the merge across nodes. One node (every rank's partial merged
# on the node) through the same command: the 2-node run on the spill below; every node
# count's merge, in process: tests/unit/test_analyses_udf_adapter.py.
@pytest.mark.parametrize("nodes", [4])
def test_udfs_on_a_staged_copy(tmp_path, nodes):
    import h5py

    specs, args = _specs(tmp_path)
    data = uc.frames()
    valid = np.ones(F, bool)
    valid[WITHHELD] = False
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f["frames"] = data.reshape(*uc.SCAN, *uc.FRAME)
        f["valid"] = valid.reshape(uc.SCAN)
    _flow(tmp_path, tmp_path / "out", nodes, "--frames", "scan.h5:/frames", "--valid",
          "scan.h5:/valid", "--partition-frames", "6", *args)
    _check(tmp_path / "out" / "scan.h5", specs, data, valid, f"staged, {nodes} nodes")


def test_udfs_live_from_the_simulator_then_offline_on_the_spill(tmp_path):
    specs, args = _specs(tmp_path)
    spill = tmp_path / "spill" / "%n"
    out = tmp_path / "out"
    job = subprocess.Popen(
        ["mpirun", "-n", "4", "--oversubscribe", sys.executable, "-m", "stager", "stream",
         "receive", "--rendezvous", str(tmp_path / "rv.json"), "--out", str(out),
         "--emulate-nodes", "2", "--bind", "127.0.0.1", "--local", str(tmp_path / "l" / "%n"),
         "--live-interval", "0.3", "--partition-frames", "4", "--spill", str(spill),
         "--allow-loss", "0.1", *args],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sim = subprocess.run(
        [sys.executable, "-m", "streams.simulate", "--rendezvous",
         str(tmp_path / "rv.json"), "--scan", "s1", "--producers", "2", "--sectors", "2",
         "--scan-shape", *map(str, uc.SCAN), "--shape", *map(str, uc.FRAME), "--withhold",
         *map(str, WITHHELD), "--wait", "120"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    try:
        jout, jerr = job.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        job.kill()
        raise AssertionError(f"the job hung: {job.communicate()}") from None
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert job.returncode == 0, jout + jerr
    data = uc.frames()
    valid = np.ones(F, bool)
    valid[WITHHELD] = False
    _check(out / "s1.h5", specs, data, valid, "live")
    report = json.loads((out / "s1.json").read_text())
    assert report["analysis"] == "udf"
    assert (out / "s1.live.png").read_bytes().startswith(b"\x89PNG")
    _flow(tmp_path, tmp_path / "rerun", 2, "--spilled", str(spill), "--scan", "s1", *args)
    _check(tmp_path / "rerun" / "s1.h5", specs, data, valid, "offline on the spill")
